"""Tests of data/baseline_ngram.py on a tiny separable split."""

import importlib.util
import os
import random

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


def test_byte_order_mark_is_not_part_of_the_first_label(tmp_path):
  (tmp_path / "x.tsv").write_text("\ufeff1\tok\n0\tbad\n", encoding="utf-8")
  assert bn.read_tsv(str(tmp_path / "x.tsv"))[1] == ["1", "0"]


def test_teacher_file_holds_out_of_fold_probabilities(tmp_path, capsys):
  """Each training example carries a unique n-gram and a random label: a model that
  saw the example would predict its label; cross-fitted ones cannot (about 50%)."""
  rng = random.Random(0)
  lines = ["%d\t%s" % (rng.randint(0, 1), "".join(rng.choice("甲乙丙丁戊己庚辛壬癸")
                                                 for _ in range(6)))
           for _ in range(200)]
  (tmp_path / "train.tsv").write_text("\n".join(lines[:100]) + "\n\n" +
                                      "\n".join(lines[100:]) + "\n", encoding="utf-8")
  _write(tmp_path, "dev.tsv", 8, 100)
  _write(tmp_path, "test.tsv", 8, 200)
  teacher = tmp_path / "teacher.tsv"
  assert bn.main(["--data_dir", str(tmp_path), "--c_values", "100",
                  "--teacher_file", str(teacher), "--folds", "4"]) == 0
  assert "200 cross-fitted training probabilities (4 folds" in capsys.readouterr().out
  rows = teacher.read_text(encoding="utf-8").splitlines()
  assert rows[0] == "guid\t0\t1"
  # Line numbers of train.tsv: the blank line 101 is skipped.
  guids = [r.split("\t")[0] for r in rows[1:]]
  assert guids == ["train-%d" % n for n in list(range(1, 101)) + list(range(102, 202))]
  probs = [[float(x) for x in r.split("\t")[1:]] for r in rows[1:]]
  assert all(abs(sum(p) - 1.0) < 1e-5 for p in probs)
  hits = sum((p[1] > 0.5) == (line[0] == "1") for p, line in zip(probs, lines))
  assert 60 <= hits <= 140, hits
  # The same model fitted on every example does know their labels.
  texts, labels = [l[2:] for l in lines], [l[0] for l in lines]
  vectorizer = bn._vectorizer(3)  # pylint: disable=protected-access
  model = bn._regression(100.0).fit(vectorizer.fit_transform(texts), labels)  # pylint: disable=protected-access
  assert model.score(vectorizer.transform(texts), labels) > 0.95
