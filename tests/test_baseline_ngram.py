"""Tests of data/baseline_ngram.py on a tiny separable split."""

import importlib.util
import os

import pytest

pytest.importorskip("sklearn", reason="needs requirements-extra.txt")

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "data", "baseline_ngram.py")
_spec = importlib.util.spec_from_file_location("baseline_ngram", SCRIPT)
bn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bn)

GOOD = ["很好", "不错", "满意", "喜欢"]
BAD = ["很差", "失望", "退货", "垃圾"]


def _write(directory, name, n, offset):
  lines = []
  for i in range(n):
    lines.append("1\t%s%s，第%d次" % (GOOD[i % 4], GOOD[(i + 1) % 4], i + offset))
    lines.append("0\t%s%s，第%d次" % (BAD[i % 4], BAD[(i + 1) % 4], i + offset))
  (directory / name).write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_separable_split_is_learned(tmp_path, capsys):
  _write(tmp_path, "train.tsv", 40, 0)
  _write(tmp_path, "dev.tsv", 8, 100)
  _write(tmp_path, "test.tsv", 8, 200)
  assert bn.main(["--data_dir", str(tmp_path), "--c_values", "1,10"]) == 0
  last = capsys.readouterr().out.strip().splitlines()[-1]
  assert "dev_accuracy = 1.0000 test_accuracy = 1.0000" in last


def test_missing_split_exits_2(tmp_path, capsys):
  _write(tmp_path, "train.tsv", 4, 0)
  assert bn.main(["--data_dir", str(tmp_path)]) == 2
  assert "dev.tsv" in capsys.readouterr().err


def test_line_without_tab_is_named(tmp_path):
  (tmp_path / "x.tsv").write_text("1\tok\nbroken\n", encoding="utf-8")
  with pytest.raises(ValueError, match="x.tsv:2"):
    bn.read_tsv(str(tmp_path / "x.tsv"))
