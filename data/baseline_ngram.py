#!/usr/bin/env python3
"""Character 1-3-gram logistic regression: the linear baseline for the demo.

Reads ``train.tsv``, ``dev.tsv`` and ``test.tsv`` ("label<TAB>text", as
``data/prepare_sentiment.py`` writes them) from ``--data_dir``, fits TF-IDF
character n-grams (1 to 3) with logistic regression on train, picks the
inverse regularisation strength C on dev from ``--c_values``, and prints dev
and test accuracy of that model.  Deterministic (lbfgs, no random state).
Needs scikit-learn (requirements-extra.txt).

Usage::

    python3 data/baseline_ngram.py --data_dir data/sentiment
"""

import argparse
import os
import sys
import time

PROG = "baseline_ngram.py"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATA_DIR = os.path.join(REPO_ROOT, "data", "sentiment")


def read_tsv(path):
  """Returns (texts, labels) of a "label<TAB>text" file.

  Raises:
    ValueError: naming the file and line of a malformed line.
  """
  texts, labels = [], []
  with open(path, encoding="utf-8") as handle:
    for number, line in enumerate(handle, 1):
      line = line.rstrip("\n")
      if not line:
        continue
      label, sep, text = line.partition("\t")
      if not sep:
        raise ValueError("%s:%d: no tab in line" % (path, number))
      labels.append(label)
      texts.append(text)
  if not texts:
    raise ValueError("%s: no examples" % path)
  return texts, labels


def fit_and_score(splits, c_values, max_n=3):
  """Fits one model per C on train; returns (best C, dev acc, test acc, all).

  Args:
    splits: {"train"|"dev"|"test": (texts, labels)}.
    c_values: iterable of float, candidate inverse regularisation strengths.
    max_n: int, longest character n-gram.
  """
  # Imported here so that --help works without scikit-learn installed.
  from sklearn.feature_extraction.text import TfidfVectorizer  # pylint: disable=import-outside-toplevel
  from sklearn.linear_model import LogisticRegression  # pylint: disable=import-outside-toplevel
  vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, max_n),
                               sublinear_tf=True, min_df=1)
  features = {"train": vectorizer.fit_transform(splits["train"][0])}
  for part in ("dev", "test"):
    features[part] = vectorizer.transform(splits[part][0])
  results = []
  for c in c_values:
    model = LogisticRegression(C=c, max_iter=2000)
    model.fit(features["train"], splits["train"][1])
    accuracy = {part: model.score(features[part], splits[part][1])
                for part in ("dev", "test")}
    results.append((c, accuracy["dev"], accuracy["test"]))
  best = max(results, key=lambda r: (r[1], -r[0]))
  return best + (results,)


def main(argv=None):
  """Prints dev/test accuracy; returns 0, or 2 on missing/bad input."""
  parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
  parser.add_argument("--data_dir", default=DEFAULT_DATA_DIR)
  parser.add_argument("--c_values", default="1,2,4,8,16,32",
                      help="comma-separated C values tried on dev")
  parser.add_argument("--max_n", type=int, default=3)
  args = parser.parse_args(argv)
  try:
    import sklearn  # pylint: disable=import-outside-toplevel,unused-import
  except ImportError:
    print("%s: error: needs scikit-learn, an optional dependency: install it with "
          "`pip install -r requirements-extra.txt`" % PROG, file=sys.stderr)
    return 2
  try:
    c_values = [float(c) for c in args.c_values.split(",")]
    splits = {part: read_tsv(os.path.join(args.data_dir, part + ".tsv"))
              for part in ("train", "dev", "test")}
  except (OSError, ValueError) as exc:
    print("%s: error: %s" % (PROG, exc), file=sys.stderr)
    return 2
  start = time.time()
  c, dev, test, results = fit_and_score(splits, c_values, args.max_n)
  for value, d, t in results:
    print("C=%-6g dev %.4f test %.4f" % (value, d, t))
  print("char 1-%d-gram logistic regression (C=%g chosen on dev): "
        "dev_accuracy = %.4f test_accuracy = %.4f (%d train, %.1f s)"
        % (args.max_n, c, dev, test, len(splits["train"][0]),
           time.time() - start))
  return 0


if __name__ == "__main__":
  sys.exit(main())
