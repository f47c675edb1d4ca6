"""Tests for tokenization.py (pure Python, no TensorFlow needed)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tokenization  # noqa: E402

VOCAB_TOKENS = [
    "[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn",
    "##ing", ",", "低", "頻",
]


def _write_vocab(tmp_path, tokens, name="vocab.txt"):
  path = tmp_path / name
  path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
  return str(path)


@pytest.fixture
def vocab_file(tmp_path):
  return _write_vocab(tmp_path, VOCAB_TOKENS)


def _vocab_dict(tokens=VOCAB_TOKENS):
  return {token: i for i, token in enumerate(tokens)}


def test_full_tokenizer(vocab_file):
  tokenizer = tokenization.FullTokenizer(vocab_file)
  tokens = tokenizer.tokenize(u"UNwant\u00E9d,running")
  assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
  assert tokenizer.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]
  assert tokenizer.convert_ids_to_tokens([7, 4, 5, 10, 8, 9]) == tokens


def test_full_tokenizer_bytes_input(vocab_file):
  tokenizer = tokenization.FullTokenizer(vocab_file)
  text = u"UNwant\u00E9d,running".encode("utf-8")
  assert tokenizer.tokenize(text) == [
      "un", "##want", "##ed", ",", "runn", "##ing"]


def test_full_tokenizer_chinese(vocab_file):
  tokenizer = tokenization.FullTokenizer(vocab_file)
  tokens = tokenizer.tokenize(u"低頻低x")
  assert tokens == ["低", "頻", "低", "[UNK]"]
  assert tokenizer.convert_tokens_to_ids(tokens) == [11, 12, 11, 0]


def test_full_tokenizer_unknown_words(vocab_file):
  tokenizer = tokenization.FullTokenizer(vocab_file)
  assert tokenizer.tokenize(u"wanted xyz unwanted") == [
      "want", "##ed", "[UNK]", "un", "##want", "##ed"]


def test_full_tokenizer_attributes(vocab_file):
  tokenizer = tokenization.FullTokenizer(vocab_file)
  assert list(tokenizer.vocab.items()) == [
      (t, i) for i, t in enumerate(VOCAB_TOKENS)]
  assert tokenizer.inv_vocab == {i: t for i, t in enumerate(VOCAB_TOKENS)}


def test_chinese():
  tokenizer = tokenization.BasicTokenizer()
  assert tokenizer.tokenize(u"ah\u535A\u63A8zz") == [
      u"ah", u"\u535A", u"\u63A8", u"zz"]


def test_basic_tokenizer_lower():
  tokenizer = tokenization.BasicTokenizer(do_lower_case=True)
  assert tokenizer.tokenize(u" \tHeLLo!how  \n Are yoU?  ") == [
      "hello", "!", "how", "are", "you", "?"]
  assert tokenizer.tokenize(u"H\u00E9llo") == ["hello"]


def test_basic_tokenizer_no_lower():
  tokenizer = tokenization.BasicTokenizer(do_lower_case=False)
  assert tokenizer.tokenize(u" \tHeLLo!how  \n Are yoU?  ") == [
      "HeLLo", "!", "how", "Are", "yoU", "?"]
  assert tokenizer.tokenize(u"H\u00E9llo") == [u"H\u00E9llo"]


def test_basic_tokenizer_cleans_text():
  tokenizer = tokenization.BasicTokenizer()
  # NUL, U+FFFD and control characters vanish; other whitespace splits.
  text = u"a\x00b\ufffdc\x07d\u200be\u00a0f\u3000g"
  assert tokenizer.tokenize(text) == ["abcde", "f", "g"]
  assert tokenizer.tokenize(u"") == []
  assert tokenizer.tokenize(u"  \t\n ") == []


def test_basic_tokenizer_combining_only_token_dropped():
  tokenizer = tokenization.BasicTokenizer(do_lower_case=True)
  assert tokenizer.tokenize(u"a \u0301 b") == ["a", "b"]


def test_basic_tokenizer_punctuation():
  tokenizer = tokenization.BasicTokenizer()
  assert tokenizer.tokenize(u"don't $5.00 a^b `x` \u00bfqu\u00e9?") == [
      "don", "'", "t", "$", "5", ".", "00", "a", "^", "b", "`", "x", "`",
      "\u00bf", "que", "?"]


def test_internal_helpers_match_single_pass():
  tokenizer = tokenization.BasicTokenizer()
  text = u"a\x00\tb\u535Ac\ufffd\u3000d"
  cleaned = tokenizer._clean_text(text)
  assert cleaned == u"a b\u535Ac d"
  assert tokenizer._tokenize_chinese_chars(cleaned) == u"a b \u535A c d"
  assert tokenizer._run_strip_accents(u"h\u00e9llo") == "hello"
  assert tokenizer._run_split_on_punc(u"a,b!!c") == [
      "a", ",", "b", "!", "!", "c"]
  assert tokenizer._is_chinese_char(0x535A)
  assert not tokenizer._is_chinese_char(ord(u"\u3042"))  # Hiragana


def test_wordpiece_tokenizer():
  tokenizer = tokenization.WordpieceTokenizer(vocab=_vocab_dict())
  assert tokenizer.tokenize(u"") == []
  assert tokenizer.tokenize(u"unwanted running") == [
      "un", "##want", "##ed", "runn", "##ing"]
  assert tokenizer.tokenize(u"unwantedX running") == [
      "[UNK]", "runn", "##ing"]


def test_wordpiece_custom_unk():
  tokenizer = tokenization.WordpieceTokenizer(
      vocab=_vocab_dict(), unk_token="<unk>")
  assert tokenizer.tokenize(u"zzz want") == ["<unk>", "want"]


def test_wordpiece_max_input_chars_per_word():
  tokenizer = tokenization.WordpieceTokenizer(
      vocab=_vocab_dict(), max_input_chars_per_word=6)
  assert tokenizer.tokenize(u"wanted") == ["want", "##ed"]
  assert tokenizer.tokenize(u"unwanted") == ["[UNK]"]
  assert tokenizer.tokenize(u"unwanted wanted") == [
      "[UNK]", "want", "##ed"]


def test_wordpiece_word_starting_with_hashes():
  vocab = _vocab_dict(["[UNK]", "##ab", "##c"])
  tokenizer = tokenization.WordpieceTokenizer(vocab=vocab)
  assert tokenizer.tokenize(u"##abc") == ["##ab", "##c"]


def test_wordpiece_cache_identical_results():
  tokenizer = tokenization.WordpieceTokenizer(vocab=_vocab_dict())
  first = tokenizer.tokenize(u"unwanted running xyz unwanted")
  second = tokenizer.tokenize(u"unwanted running xyz unwanted")
  assert first == second == [
      "un", "##want", "##ed", "runn", "##ing", "[UNK]", "un", "##want",
      "##ed"]
  assert isinstance(first, list)
  # Mutating a returned list must not corrupt the cache.
  first.append("junk")
  assert tokenizer.tokenize(u"unwanted") == ["un", "##want", "##ed"]


def test_full_tokenizer_cache_identical_results(vocab_file):
  tokenizer = tokenization.FullTokenizer(vocab_file)
  text = u"UNwant\u00E9d,running \u535A UNwant\u00E9d"
  first = tokenizer.tokenize(text)
  second = tokenizer.tokenize(text)
  expected = ["un", "##want", "##ed", ",", "runn", "##ing", "[UNK]", "un",
              "##want", "##ed"]
  assert first == expected
  assert second == expected


def test_cache_is_bounded(monkeypatch):
  monkeypatch.setattr(tokenization, "_CACHE_LIMIT", 3)
  tokenizer = tokenization.WordpieceTokenizer(vocab=_vocab_dict())
  basic = tokenization.BasicTokenizer()
  words = [u"want", u"wanted", u"unwanted", u"running", u"xyz", u"un"]
  for _ in range(2):
    for word in words:
      basic.tokenize(word)
      tokenizer.tokenize(word)
      assert len(tokenizer._cache) <= 3
      assert len(basic._cache) <= 3
  assert tokenizer.tokenize(u"wanted") == ["want", "##ed"]


def test_convert_tokens_to_ids():
  vocab = _vocab_dict()
  assert tokenization.convert_tokens_to_ids(
      vocab, ["un", "##want", "##ed", "runn", "##ing"]) == [7, 4, 5, 8, 9]
  inv = {v: k for k, v in vocab.items()}
  assert tokenization.convert_ids_to_tokens(inv, [7, 4, 5]) == [
      "un", "##want", "##ed"]
  assert tokenization.convert_by_vocab(vocab, []) == []
  with pytest.raises(KeyError):
    tokenization.convert_tokens_to_ids(vocab, ["nope"])


def test_whitespace_tokenize():
  assert tokenization.whitespace_tokenize(u"  a b\t\nc  ") == ["a", "b", "c"]
  assert tokenization.whitespace_tokenize(u"   ") == []
  assert tokenization.whitespace_tokenize(u"") == []


def test_is_whitespace():
  assert tokenization._is_whitespace(u" ")
  assert tokenization._is_whitespace(u"\t")
  assert tokenization._is_whitespace(u"\r")
  assert tokenization._is_whitespace(u"\n")
  assert tokenization._is_whitespace(u"\u00A0")

  assert not tokenization._is_whitespace(u"A")
  assert not tokenization._is_whitespace(u"-")


def test_is_control():
  assert tokenization._is_control(u"\u0005")

  assert not tokenization._is_control(u"A")
  assert not tokenization._is_control(u" ")
  assert not tokenization._is_control(u"\t")
  assert not tokenization._is_control(u"\r")
  assert not tokenization._is_control(u"\U0001F4A9")


def test_is_punctuation():
  assert tokenization._is_punctuation(u"-")
  assert tokenization._is_punctuation(u"$")
  assert tokenization._is_punctuation(u"`")
  assert tokenization._is_punctuation(u".")
  assert tokenization._is_punctuation(u"\u00bf")  # inverted question mark

  assert not tokenization._is_punctuation(u"A")
  assert not tokenization._is_punctuation(u" ")
  assert not tokenization._is_punctuation(u"5")


def test_convert_to_unicode():
  assert tokenization.convert_to_unicode(u"h\u00e9") == u"h\u00e9"
  assert tokenization.convert_to_unicode(b"h\xc3\xa9") == u"h\u00e9"
  assert tokenization.convert_to_unicode(b"a\xffb") == u"ab"
  with pytest.raises(ValueError):
    tokenization.convert_to_unicode(5)
  assert tokenization.printable_text(b"h\xc3\xa9") == u"h\u00e9"
  assert tokenization.printable_text(u"x") == u"x"


def test_load_vocab(tmp_path):
  path = _write_vocab(tmp_path, ["[PAD]", "hello  ", "##lo"])
  vocab = tokenization.load_vocab(path)
  assert list(vocab.items()) == [("[PAD]", 0), ("hello", 1), ("##lo", 2)]


def test_load_vocab_missing_file(tmp_path):
  path = str(tmp_path / "does_not_exist.txt")
  with pytest.raises(ValueError) as excinfo:
    tokenization.load_vocab(path)
  assert str(excinfo.value) == "vocab_file %s: no such file" % path
  with pytest.raises(ValueError, match="does_not_exist.txt"):
    tokenization.FullTokenizer(path)


def test_load_vocab_empty_file(tmp_path):
  path = tmp_path / "empty.txt"
  path.write_text("", encoding="utf-8")
  with pytest.raises(ValueError) as excinfo:
    tokenization.load_vocab(str(path))
  assert str(excinfo.value) == "vocab_file %s is empty" % path


def test_load_vocab_duplicate_token(tmp_path):
  path = _write_vocab(tmp_path, ["[UNK]", "a", "b", "a"])
  with pytest.raises(ValueError) as excinfo:
    tokenization.load_vocab(path)
  message = str(excinfo.value)
  assert path in message
  assert "'a'" in message
  assert "line 4" in message


def test_validate_case_matches_checkpoint():
  ckpt = "/models/uncased_L-12_H-768_A-12/bert_model.ckpt"
  tokenization.validate_case_matches_checkpoint(True, ckpt)
  tokenization.validate_case_matches_checkpoint(False, "/x/model.ckpt")
  tokenization.validate_case_matches_checkpoint(False, None)
  with pytest.raises(ValueError):
    tokenization.validate_case_matches_checkpoint(False, ckpt)
  with pytest.raises(ValueError):
    tokenization.validate_case_matches_checkpoint(
        True, "/m/cased_L-12_H-768_A-12/bert_model.ckpt")


def test_module_does_not_import_tensorflow():
  with open(tokenization.__file__, encoding="utf-8") as f:
    source = f.read()
  assert "import tensorflow" not in source
