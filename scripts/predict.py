#!/usr/bin/env python
"""Classifies lines of text with a SavedModel exported by run_classifier.py --export_dir.

Usage:

  python scripts/predict.py --export_dir D [--input FILE] [--tsv] [--batch_size 64]

Reads one example a line from FILE, or from stdin without --input. A line is the
text to classify; with --tsv it is `label<TAB>text` (the format of the tsv task's
files): the label is ignored and the text after the first tab is classified.

Prints one line per input line on stdout, in input order:

  label<TAB>p0<TAB>p1...

the most probable label, then the probability of every label in the order of
D/assets.extra/label_list.txt. The vocabulary, labels, max_seq_length and
do_lower_case come from D/assets.extra/, so the export is all that is needed.

Errors (no export at D, an empty line, a --tsv line without a tab, an unreadable
input) print one line `predict.py: error: ...` on stderr and exit with code 2;
they are found before the model is loaded.
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PROG = "predict.py"
EXIT_BAD_INPUT = 2
STDIN_NAME = "<stdin>"


class PredictError(ValueError):
  """Bad input or export: reported as one line, exit code 2."""


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
  parser.add_argument("--export_dir", required=True,
                      help="SavedModel directory written by --export_dir of "
                      "run_classifier.py (or export.export_saved_model).")
  parser.add_argument("--input", default=None,
                      help="UTF-8 file with one example a line; stdin if omitted.")
  parser.add_argument("--tsv", action="store_true",
                      help="Input lines are `label<TAB>text`; the label is ignored.")
  parser.add_argument("--batch_size", type=int, default=64,
                      help="Examples per call of the model.")
  args = parser.parse_args(argv)
  if args.batch_size < 1:
    parser.error("--batch_size must be at least 1, got %d" % args.batch_size)
  return args


def check_export_dir(export_dir):
  """Raises PredictError unless `export_dir` looks like a SavedModel directory."""
  if not os.path.isdir(export_dir):
    raise PredictError("--export_dir=%s: no such directory" % export_dir)
  if not (os.path.isfile(os.path.join(export_dir, "saved_model.pb")) or
          os.path.isfile(os.path.join(export_dir, "saved_model.pbtxt"))):
    raise PredictError("--export_dir=%s: no saved_model.pb (not a SavedModel)" %
                       export_dir)


def read_input(path):
  """Returns `(name, text)` of the input file, or of stdin when `path` is None."""
  if path is None:
    name, data = STDIN_NAME, sys.stdin.buffer.read()
  else:
    name = path
    if not os.path.isfile(path):
      raise PredictError("--input=%s: no such file" % path)
    try:
      with open(path, "rb") as f:
        data = f.read()
    except OSError as e:
      raise PredictError("--input=%s: cannot read (%s)" % (path, e.strerror or e))
  try:
    return name, data.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    raise PredictError("%s: not valid UTF-8 (byte %d)" % (name, e.start))


def parse_lines(name, text, tsv):
  """The texts to classify, one per line of `text`.

  Args:
    name: the input's name for error messages.
    text: the whole input; a final newline does not make an extra line.
    tsv: bool, lines are `label<TAB>text` and the part after the first tab is used.

  Returns:
    list of (line_number, text) with 1-based line numbers.

  Raises:
    PredictError: naming the line of the first empty line or empty text, or (with
      `tsv`) of the first line without a tab.
  """
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  texts = []
  for i, line in enumerate(lines):
    number = i + 1
    line = line.rstrip("\r")
    if not line.strip():
      raise PredictError("%s:%d: empty line" % (name, number))
    if tsv:
      if "\t" not in line:
        raise PredictError("%s:%d: expected 'label<TAB>text' (--tsv), found no tab" %
                           (name, number))
      line = line.split("\t", 1)[1]
      if not line.strip():
        raise PredictError("%s:%d: empty text after the tab" % (name, number))
    texts.append((number, line.strip()))
  return texts


def featurize(texts, name, vocab_file, label_list, max_seq_length, do_lower_case):
  """Tokenizes like run_classifier.py; returns int32 arrays [n, max_seq_length] x3."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import classifier_data  # pylint: disable=g-import-not-at-top
  import tokenization  # pylint: disable=g-import-not-at-top

  tokenizer = tokenization.load_tokenizer(vocab_file, do_lower_case)
  label_map = {label: i for i, label in enumerate(label_list)}
  ids, masks, segments = [], [], []
  for index, (number, text) in enumerate(texts):
    # The label is not used for prediction; any known one lets the conversion run.
    example = classifier_data.InputExample(guid="%s:%d" % (name, number), text_a=text,
                                           label=label_list[0])
    feature = classifier_data.convert_single_example(index, example, label_map,
                                                     max_seq_length, tokenizer)
    ids.append(feature.input_ids)
    masks.append(feature.input_mask)
    segments.append(feature.segment_ids)
  shape = (len(texts), max_seq_length)
  return tuple(np.asarray(x, dtype=np.int32).reshape(shape) for x in (ids, masks, segments))


def load_signature(export_dir, max_seq_length, num_labels):
  """Loads the "serving_default" signature (a TF2 ConcreteFunction)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  try:
    loaded = tf.saved_model.load(export_dir)
  except (OSError, ValueError, tf.errors.OpError) as e:
    raise PredictError("--export_dir=%s: cannot load the SavedModel (%s)" %
                       (export_dir, str(e).splitlines()[0] if str(e) else type(e).__name__))
  if "serving_default" not in loaded.signatures:
    raise PredictError("--export_dir=%s: no 'serving_default' signature (has %s)" %
                       (export_dir, sorted(loaded.signatures.keys())))
  signature = loaded.signatures["serving_default"]
  spec = signature.structured_input_signature[1].get("input_ids")
  if spec is None:
    raise PredictError("--export_dir=%s: the signature has no input 'input_ids'" %
                       export_dir)
  if spec.shape.rank != 2 or spec.shape[1] not in (None, max_seq_length):
    raise PredictError("--export_dir=%s: input_ids has shape %s, export_config.json "
                       "says max_seq_length=%d" % (export_dir, spec.shape, max_seq_length))
  out = signature.structured_outputs.get("probabilities")
  if out is None or out.shape[-1] not in (None, num_labels):
    raise PredictError("--export_dir=%s: output 'probabilities' missing or not of "
                       "width %d" % (export_dir, num_labels))
  # Keep the loaded object alive as long as its signature is used.
  return loaded, signature


def predict(signature, features, batch_size):
  """Yields float32 probability rows [num_labels], one per example, in order."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  input_ids, input_mask, segment_ids = features
  for start in range(0, len(input_ids), batch_size):
    end = start + batch_size
    outputs = signature(input_ids=tf.constant(input_ids[start:end]),
                        input_mask=tf.constant(input_mask[start:end]),
                        segment_ids=tf.constant(segment_ids[start:end]))
    for row in outputs["probabilities"].numpy():
      yield row


def run(args, out=None):
  """Classifies the input; writes `label<TAB>p0<TAB>p1...` lines to `out`."""
  out = out or sys.stdout
  check_export_dir(args.export_dir)
  import export  # pylint: disable=g-import-not-at-top

  try:
    vocab_file, label_list, config = export.load_assets_extra(args.export_dir)
  except ValueError as e:
    raise PredictError("--export_dir=%s: %s" % (args.export_dir, e))
  name, text = read_input(args.input)
  texts = parse_lines(name, text, args.tsv)
  if not texts:
    return 0
  max_seq_length = int(config["max_seq_length"])
  try:
    features = featurize(texts, name, vocab_file, label_list, max_seq_length,
                         bool(config["do_lower_case"]))
  except ValueError as e:  # classifier_data.InputError
    raise PredictError(str(e))
  # `loaded` owns the variables: it stays alive while the signature runs.
  loaded, signature = load_signature(args.export_dir, max_seq_length, len(label_list))
  for index, row in enumerate(predict(signature, features, args.batch_size)):
    best = int(row.argmax())
    out.write("\t".join([label_list[best]] + [str(p) for p in row]) + "\n")
    if (index + 1) % args.batch_size == 0:
      out.flush()
  out.flush()
  return 0


def main(argv=None):
  args = parse_args(argv)
  try:
    return run(args)
  except PredictError as e:
    sys.stderr.write("%s: error: %s\n" % (PROG, e))
    sys.stderr.flush()
    return EXIT_BAD_INPUT


if __name__ == "__main__":
  sys.exit(main())
