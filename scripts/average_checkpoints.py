#!/usr/bin/env python
"""Averages the weights of several checkpoints of one model into one checkpoint.

One model, one forward pass: the element-wise mean of every floating-point variable
(checkpoint averaging, Vaswani et al. 2017; a "uniform model soup" of fine-tunings
from one pretrained checkpoint, Wortsman et al. 2022, arXiv 2203.05482). Integer
variables (`global_step`) take the value of the last checkpoint given.

  python scripts/average_checkpoints.py --output_dir output/soup \\
      output/ft-seed1 output/ft-seed2 output/ft-seed3
  python run_classifier.py --task_name=tsv --do_eval --do_predict \\
      --output_dir=output/soup ...        # evaluates the averaged model

Each input is a checkpoint prefix (`D/model.ckpt-651`) or a folder (its latest
checkpoint). All must hold the same variables with the same shapes and dtypes.
Written: `O/model.ckpt-STEP` and `O/checkpoint`, so the folder works as a
`run_classifier.py --output_dir` (evaluate, predict, `--export_dir`) or its
checkpoint as `--init_checkpoint`; `label_list.txt` and `pooling.txt` are copied
from the inputs' folders when present (they must agree).

Errors print one line `average_checkpoints.py: error: ...` on stderr, exit code 2.
"""

import argparse
import os
import shutil
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (ROOT, os.path.join(ROOT, "scripts")):
  if _path not in sys.path:
    sys.path.insert(0, _path)

import convert_hf_checkpoint  # pylint: disable=wrong-import-position

PROG = "average_checkpoints.py"
# Files of a run_classifier.py output folder that describe the model's head.
HEAD_FILES = ("label_list.txt", "pooling.txt")


class AverageError(Exception):
  """A bad input; main() prints it as one line and exits 2."""


def resolve_checkpoint(path):
  """A checkpoint prefix for `path`: itself, or a folder's latest checkpoint."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  if os.path.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if not latest:
      raise AverageError("%s: no checkpoint in this folder" % path)
    return latest
  if not os.path.exists(path + ".index"):
    raise AverageError("%s: not a checkpoint (no %s.index) nor a folder" % (path, path))
  return path


def read_checkpoint(prefix):
  """Returns {variable name: numpy array} of the checkpoint `prefix`."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  try:
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name)
            for name in reader.get_variable_to_shape_map()}
  except (tf.errors.OpError, ValueError) as e:
    raise AverageError("%s: cannot read: %s" % (prefix, e)) from e


def average(checkpoints):
  """Averages checkpoints given as (prefix, {name: array}) pairs.

  Returns:
    {name: array}: the float mean of each floating-point variable (computed in
    float64, stored in its dtype); the last checkpoint's value for the others.
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  first_prefix, first = checkpoints[0]
  for prefix, values in checkpoints[1:]:
    missing = sorted(set(first) - set(values))
    extra = sorted(set(values) - set(first))
    if missing or extra:
      raise AverageError("%s and %s hold different variables (%s)" % (
          first_prefix, prefix, ", ".join(
              ["%s only in the first" % n for n in missing[:2]] +
              ["%s only in the second" % n for n in extra[:2]])))
    for name, value in values.items():
      if value.shape != first[name].shape or value.dtype != first[name].dtype:
        raise AverageError("%s: %s is %s %s, in %s %s %s" % (
            prefix, name, value.dtype, list(value.shape), first_prefix,
            first[name].dtype, list(first[name].shape)))
  result = {}
  for name, value in first.items():
    if tf.as_dtype(value.dtype).is_floating:  # bfloat16 too, which numpy does not know
      total = sum(values[name].astype(np.float64) for _, values in checkpoints)
      result[name] = (total / len(checkpoints)).astype(value.dtype)
    else:
      result[name] = checkpoints[-1][1][name]
  return result


def copy_head_files(folders, output_dir):
  """Copies label_list.txt and pooling.txt into `output_dir`; they must agree."""
  for name in HEAD_FILES:
    found = {}
    for folder in folders:
      path = os.path.join(folder, name)
      if os.path.exists(path):
        with open(path, "r", encoding="utf-8") as f:
          found[path] = f.read()
    if len(set(found.values())) > 1:
      raise AverageError("the inputs' %s differ (%s): these are not one model" %
                         (name, ", ".join(sorted(found))))
    if found:
      shutil.copyfile(sorted(found)[0], os.path.join(output_dir, name))


def parse_args(argv):
  """Parses the command line."""
  parser = argparse.ArgumentParser(
      prog=PROG, description="Average the weights of checkpoints of one model.")
  parser.add_argument("checkpoints", nargs="+",
                      help="checkpoint prefixes, or folders (their latest checkpoint)")
  parser.add_argument("--output_dir", required=True,
                      help="folder to write model.ckpt-STEP and its checkpoint file to")
  args = parser.parse_args(argv)
  if len(args.checkpoints) < 2:
    parser.error("give at least two checkpoints")
  return args


def main(argv=None):
  """Averages; returns the exit code (0, or 2 on an error)."""
  args = parse_args(argv)
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  try:
    prefixes = [resolve_checkpoint(p) for p in args.checkpoints]
    if os.path.abspath(args.output_dir) in {os.path.abspath(os.path.dirname(p))
                                            for p in prefixes}:
      raise AverageError("--output_dir %s holds an input checkpoint; write elsewhere" %
                         args.output_dir)
    weights = average([(p, read_checkpoint(p)) for p in prefixes])
    step = int(weights.get("global_step", 0))
    os.makedirs(args.output_dir, exist_ok=True)
    copy_head_files([os.path.dirname(p) for p in prefixes], args.output_dir)
    written = convert_hf_checkpoint.write_checkpoint(
        weights, os.path.join(args.output_dir, "model.ckpt-%d" % step))
    tf.compat.v1.train.update_checkpoint_state(args.output_dir, written)
  except (AverageError, convert_hf_checkpoint.ConversionError, OSError) as e:
    sys.stderr.write("%s: error: %s\n" % (PROG, " ".join(str(e).split())))
    return 2
  print("averaged %d checkpoints (%d variables, %d parameters) into %s" % (
      len(prefixes), len(weights), sum(v.size for v in weights.values()), written))
  return 0


if __name__ == "__main__":
  sys.exit(main())
