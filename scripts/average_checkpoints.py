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
import tensorflow as tf

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
  if os.path.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if not latest:
      raise AverageError("%s: no checkpoint in this folder" % path)
    return latest
  if not os.path.exists(path + ".index"):
    raise AverageError("%s: not a checkpoint (no %s.index) nor a folder" % (path, path))
  return path


def open_checkpoint(prefix):
  """A tf.train.CheckpointReader of the checkpoint `prefix`."""
  try:
    return tf.train.load_checkpoint(prefix)
  except (tf.errors.OpError, ValueError) as e:
    raise AverageError("%s: cannot read: %s" % (prefix, e)) from e


def check_same_model(prefixes, readers):
  """Raises unless every checkpoint has the first one's variables, shapes and dtypes.

  Reads only the checkpoints' indexes, no tensor.
  """
  shapes = readers[0].get_variable_to_shape_map()
  dtypes = readers[0].get_variable_to_dtype_map()
  for prefix, reader in zip(prefixes[1:], readers[1:]):
    other_shapes = reader.get_variable_to_shape_map()
    missing = sorted(set(shapes) - set(other_shapes))
    extra = sorted(set(other_shapes) - set(shapes))
    if missing or extra:
      raise AverageError("%s and %s hold different variables (%s)" % (
          prefixes[0], prefix, ", ".join(
              ["%s only in the first" % n for n in missing[:2]] +
              ["%s only in the second" % n for n in extra[:2]])))
    other_dtypes = reader.get_variable_to_dtype_map()
    for name, shape in other_shapes.items():
      if shape != shapes[name] or other_dtypes[name] != dtypes[name]:
        raise AverageError("%s: %s is %s %s, in %s %s %s" % (
            prefix, name, other_dtypes[name].name, shape, prefixes[0],
            dtypes[name].name, shapes[name]))


def average(prefixes):
  """Averages the checkpoints `prefixes`, one variable at a time.

  Returns:
    {name: array}: the mean of each floating-point variable, bfloat16 included
    (computed in float64, stored in its dtype); the last checkpoint's value for the
    others.
  """
  readers = [open_checkpoint(p) for p in prefixes]
  check_same_model(prefixes, readers)
  result = {}
  for name, dtype in readers[0].get_variable_to_dtype_map().items():
    if dtype.is_floating:
      total = sum(r.get_tensor(name).astype(np.float64) for r in readers)
      result[name] = (total / len(readers)).astype(dtype.as_numpy_dtype)
    else:
      result[name] = readers[-1].get_tensor(name)
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
  try:
    prefixes = [resolve_checkpoint(p) for p in args.checkpoints]
    if os.path.abspath(args.output_dir) in {os.path.abspath(os.path.dirname(p))
                                            for p in prefixes}:
      raise AverageError("--output_dir %s holds an input checkpoint; write elsewhere" %
                         args.output_dir)
    weights = average(prefixes)
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
