#!/usr/bin/env python3
"""Character 1-3-gram logistic regression: the linear baseline for the demo.

Reads ``train.tsv``, ``dev.tsv`` and ``test.tsv`` ("label<TAB>text", as
``data/prepare_sentiment.py`` writes them) from ``--data_dir``, fits TF-IDF
character n-grams (1 to 3) with logistic regression on train, picks the
inverse regularisation strength C on dev from ``--c_values``, and prints dev
and test accuracy of that model.  Deterministic (lbfgs, no random state).
Needs scikit-learn (requirements-extra.txt).

``--teacher_file`` also writes cross-fitted probabilities of the training
examples, for ``run_classifier.py --teacher_file`` (distillation): the training
set is cut into ``--folds`` folds (line i goes to fold i mod K) and each fold is
predicted by a model (vectorizer and regression, the chosen C) fitted on the
other folds only, so no probability comes from a model that saw its example.
The file is tab-separated: a header ``guid<TAB>label...`` (the labels sorted),
then ``train-LINE<TAB>probability...`` per example, LINE being its line number
in train.tsv (the example ids of ``run_classifier.py --task_name=tsv``).

Usage::

    python3 data/baseline_ngram.py --data_dir data/sentiment
    python3 data/baseline_ngram.py --data_dir data/sentiment \
        --teacher_file data/sentiment/ngram_teacher.tsv
"""

import argparse
import os
import sys
import time

PROG = "baseline_ngram.py"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATA_DIR = os.path.join(REPO_ROOT, "data", "sentiment")


def read_tsv(path, with_line_numbers=False):
  """Returns (texts, labels) of a "label<TAB>text" file, skipping blank lines.

  With `with_line_numbers`, (texts, labels, line numbers counted from 1).

  Raises:
    ValueError: naming the file and line of a malformed line.
  """
  texts, labels, numbers = [], [], []
  with open(path, encoding="utf-8-sig") as handle:
    for number, line in enumerate(handle, 1):
      line = line.rstrip("\n")
      if not line.strip():
        continue
      label, sep, text = line.partition("\t")
      if not sep:
        raise ValueError("%s:%d: no tab in line" % (path, number))
      labels.append(label)
      texts.append(text)
      numbers.append(number)
  if not texts:
    raise ValueError("%s: no examples" % path)
  return (texts, labels, numbers) if with_line_numbers else (texts, labels)


def _vectorizer(max_n):
  # Imported here so that --help works without scikit-learn installed.
  from sklearn.feature_extraction.text import TfidfVectorizer  # pylint: disable=import-outside-toplevel
  return TfidfVectorizer(analyzer="char", ngram_range=(1, max_n), sublinear_tf=True,
                         min_df=1)


def _regression(c):
  from sklearn.linear_model import LogisticRegression  # pylint: disable=import-outside-toplevel
  return LogisticRegression(C=c, max_iter=2000)


def fit_and_score(splits, c_values, max_n=3):
  """Fits one model per C on train; returns (best C, dev acc, test acc, all).

  Args:
    splits: {"train"|"dev"|"test": (texts, labels)}.
    c_values: iterable of float, candidate inverse regularisation strengths.
    max_n: int, longest character n-gram.
  """
  vectorizer = _vectorizer(max_n)
  features = {"train": vectorizer.fit_transform(splits["train"][0])}
  for part in ("dev", "test"):
    features[part] = vectorizer.transform(splits[part][0])
  results = []
  for c in c_values:
    model = _regression(c)
    model.fit(features["train"], splits["train"][1])
    accuracy = {part: model.score(features[part], splits[part][1])
                for part in ("dev", "test")}
    results.append((c, accuracy["dev"], accuracy["test"]))
  best = max(results, key=lambda r: (r[1], -r[0]))
  return best + (results,)


def cross_fitted_probabilities(texts, labels, c, max_n=3, folds=5):
  """Out-of-fold probabilities of the training examples.

  Example i is predicted by a model fitted on the examples j with j mod `folds`
  != i mod `folds` (its own fold left out).

  Returns:
    (sorted label names, float array [len(texts), number of labels]).
  """
  import numpy as np  # pylint: disable=import-outside-toplevel
  label_names = sorted(set(labels))
  probabilities = np.zeros((len(texts), len(label_names)))
  fold_of = np.arange(len(texts)) % folds
  for fold in range(folds):
    fit_rows = np.flatnonzero(fold_of != fold)
    held_rows = np.flatnonzero(fold_of == fold)
    vectorizer = _vectorizer(max_n)
    model = _regression(c)
    model.fit(vectorizer.fit_transform([texts[i] for i in fit_rows]),
              [labels[i] for i in fit_rows])
    held = model.predict_proba(vectorizer.transform([texts[i] for i in held_rows]))
    for column, name in enumerate(model.classes_):
      probabilities[held_rows, label_names.index(name)] = held[:, column]
  return label_names, probabilities


def write_teacher_file(path, line_numbers, label_names, probabilities):
  """Writes `guid<TAB>label...` and one `train-LINE<TAB>p...` row per example."""
  rows = ["guid\t" + "\t".join(label_names)]
  for number, row in zip(line_numbers, probabilities):
    rows.append("train-%d\t%s" % (number, "\t".join("%.6f" % p for p in row)))
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as handle:
    handle.write("\n".join(rows) + "\n")
  os.replace(tmp, path)


def main(argv=None):
  """Prints dev/test accuracy; returns 0, or 2 on missing/bad input."""
  parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
  parser.add_argument("--data_dir", default=DEFAULT_DATA_DIR)
  parser.add_argument("--c_values", default="1,2,4,8,16,32",
                      help="comma-separated C values tried on dev")
  parser.add_argument("--max_n", type=int, default=3)
  parser.add_argument("--teacher_file", default=None,
                      help="also write cross-fitted training probabilities here")
  parser.add_argument("--folds", type=int, default=5,
                      help="folds of the cross-fitting (with --teacher_file)")
  args = parser.parse_args(argv)
  if args.folds < 2:
    parser.error("--folds must be at least 2, got %d" % args.folds)
  try:
    import sklearn  # pylint: disable=import-outside-toplevel,unused-import
  except ImportError:
    print("%s: error: needs scikit-learn, an optional dependency: install it with "
          "`pip install -r requirements-extra.txt`" % PROG, file=sys.stderr)
    return 2
  try:
    c_values = [float(c) for c in args.c_values.split(",")]
    train = read_tsv(os.path.join(args.data_dir, "train.tsv"), with_line_numbers=True)
    splits = {part: read_tsv(os.path.join(args.data_dir, part + ".tsv"))
              for part in ("dev", "test")}
    splits["train"] = train[:2]
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
  if args.teacher_file:
    label_names, probabilities = cross_fitted_probabilities(
        train[0], train[1], c, args.max_n, args.folds)
    write_teacher_file(args.teacher_file, train[2], label_names, probabilities)
    hits = sum(label_names[row.argmax()] == label
               for row, label in zip(probabilities, train[1]))
    print("wrote %s: %d cross-fitted training probabilities (%d folds, C=%g), "
          "their accuracy %.4f" % (args.teacher_file, len(train[0]), args.folds, c,
                                   hits / len(train[0])))
  return 0


if __name__ == "__main__":
  sys.exit(main())
