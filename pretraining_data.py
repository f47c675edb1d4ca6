"""Pretraining input: Google's TFRecord features, split among Horovod ranks.

The records are those of Google's create_pretraining_data.py (int64 features):

    input_ids, input_mask, segment_ids          [max_seq_length]
    masked_lm_positions, masked_lm_ids          [max_predictions_per_seq]
    masked_lm_weights (float)                   [max_predictions_per_seq]
    next_sentence_labels                        [1]

Each rank reads its own share: whole files when there are at least as many files
as ranks, else every size-th record of all the files, so any number of files
works with any number of ranks.
"""

import os

import tensorflow as tf

import input_pipeline

FEATURE_LENGTHS = (
    ("input_ids", "seq"), ("input_mask", "seq"), ("segment_ids", "seq"),
    ("masked_lm_positions", "pred"), ("masked_lm_ids", "pred"),
    ("masked_lm_weights", "pred"), ("next_sentence_labels", 1))
FLOAT_FEATURES = ("masked_lm_weights",)


class InputFileError(ValueError):
  """A pretraining input file that is missing, unreadable or of the wrong shape."""


def expand_input_files(patterns):
  """The sorted, distinct files that comma-separated glob `patterns` match.

  As in the shell, a wildcard matches no hidden file (a name starting with "."),
  such as a shard create_pretraining_data.py was killed while writing; a pattern
  whose last part starts with "." names hidden files.

  Raises:
    InputFileError: naming a pattern that matches no file.
  """
  files = set()
  for pattern in patterns.split(","):
    pattern = pattern.strip()
    if not pattern:
      continue
    hidden_ok = os.path.basename(pattern).startswith(".")
    matched = [f for f in tf.io.gfile.glob(pattern) if not tf.io.gfile.isdir(f) and
               (hidden_ok or not os.path.basename(f).startswith("."))]
    if not matched:
      raise InputFileError("--input_file=%s: no file matches %r" % (patterns, pattern))
    files.update(matched)
  if not files:
    raise InputFileError("--input_file is empty")
  return sorted(files)


def shard_files(files, rank, size):
  """This rank's share of `files`.

  Returns:
    (files_to_read, record_sharding): with at least as many files as ranks, every
    size-th file and False (each rank reads whole files); otherwise all the files
    and True (each rank keeps every size-th record).
  """
  if len(files) >= size:
    return files[rank::size], False
  return list(files), True


def _feature_spec(max_seq_length, max_predictions_per_seq):
  lengths = {"seq": max_seq_length, "pred": max_predictions_per_seq}
  spec = {}
  for name, length in FEATURE_LENGTHS:
    dtype = tf.float32 if name in FLOAT_FEATURES else tf.int64
    spec[name] = tf.io.FixedLenFeature([lengths.get(length, length)], dtype)
  return spec


def check_input_file(path, max_seq_length, max_predictions_per_seq):
  """Checks that the first record of `path` has the features and lengths expected.

  Raises:
    InputFileError: naming the file and the feature that does not fit.
  """
  try:
    record = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
  except (tf.errors.OpError, OSError) as e:
    raise InputFileError("%s: not a readable TFRecord file (%s)" %
                         (path, str(e).splitlines()[0]))
  if record is None:
    raise InputFileError("%s: no records" % path)
  try:
    example = tf.train.Example.FromString(record.numpy())
  except Exception as e:  # pylint: disable=broad-except  (protobuf DecodeError)
    raise InputFileError("%s: record 0 is not a tf.train.Example (%s)" % (path, e))
  spec = _feature_spec(max_seq_length, max_predictions_per_seq)
  for name in sorted(spec):
    if name not in example.features.feature:
      raise InputFileError("%s: record 0 has no feature %r (expected the features of "
                           "create_pretraining_data.py)" % (path, name))
    feature = example.features.feature[name]
    values = (feature.float_list.value if spec[name].dtype == tf.float32 else
              feature.int64_list.value)
    expected = spec[name].shape[0]
    if len(values) != expected:
      hint = ("--max_seq_length" if expected == max_seq_length and
              name in ("input_ids", "input_mask", "segment_ids") else
              "--max_predictions_per_seq" if name.startswith("masked_lm") else "")
      raise InputFileError(
          "%s: feature %r has %d values, expected %d%s" %
          (path, name, len(values), expected,
           " (%s must match the data's)" % hint if hint else ""))


def input_fn_builder(input_files, max_seq_length, max_predictions_per_seq, batch_size,
                     is_training, rank=0, size=1, shuffle_buffer=0, seed=None,
                     num_cpu_threads=2, start_step=0):
  """Creates an `input_fn` over pretraining TFRecords for one rank.

  Args:
    input_files: list of file paths (all the job's files, the same on every rank).
    max_seq_length, max_predictions_per_seq: ints, the records' lengths.
    batch_size: int, examples per batch of this rank.
    is_training: bool. Training reads this rank's share (see `shard_files`),
      repeats forever (the step count, the same on every rank, ends training) and
      drops the remainder; eval reads all the files once, in order.
    rank, size: this process's place among `size` processes.
    shuffle_buffer: int, records in the shuffle buffer (training); 0 keeps the
      order of the files exactly (with record sharding: batch k of every rank
      together is batch k of one process with `size` times the batch).
    seed: int seed of the file and record shuffles, or None.
    num_cpu_threads: int, files read at once (training, file sharding).
    start_step: int, the global step training resumes at. The stream of records
      (seeded shuffles included) is the same in every run, so skipping the
      start_step * batch_size records trained on already continues it where the
      earlier run stopped instead of starting the data over.

  Returns:
    input_fn(params) -> tf.data.Dataset of dicts: int32 Tensors input_ids,
    input_mask, segment_ids [batch_size, max_seq_length]; masked_lm_positions,
    masked_lm_ids [batch_size, max_predictions_per_seq]; float32 masked_lm_weights
    [batch_size, max_predictions_per_seq]; int32 next_sentence_labels [batch_size, 1].
  """
  spec = _feature_spec(max_seq_length, max_predictions_per_seq)

  def _decode_batch(records):
    example = tf.io.parse_example(records, spec)
    return {k: v if v.dtype == tf.float32 else tf.cast(v, tf.int32)
            for k, v in example.items()}

  def input_fn(params=None):
    del params
    if not is_training:
      d = tf.data.TFRecordDataset(list(input_files))
    else:
      files, record_sharding = shard_files(list(input_files), rank, size)
      if record_sharding:
        # Horovod: fewer files than ranks: every rank reads all of them and keeps
        # every size-th record of the repeated stream, so no rank is left without
        # input and batch k of all ranks is batch k of one process, epochs included.
        d = tf.data.TFRecordDataset(files).repeat().shard(size, rank)
      else:
        # Horovod: each rank reads its own files (files[rank::size]).
        d = tf.data.Dataset.from_tensor_slices(files)
        if shuffle_buffer > 0:
          d = d.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        d = d.repeat().interleave(
            tf.data.TFRecordDataset, cycle_length=min(num_cpu_threads, len(files)),
            num_parallel_calls=min(num_cpu_threads, len(files)), deterministic=True)
      if shuffle_buffer > 0:
        d = d.shuffle(buffer_size=shuffle_buffer, seed=seed)
      if start_step > 0:
        d = d.skip(start_step * batch_size)
    return input_pipeline.batch_and_decode(d, batch_size, is_training, _decode_batch)

  return input_fn


def describe_sharding(num_files, size):
  """One line for the log: how `num_files` files are split among `size` ranks."""
  if size == 1:
    return "%d input file%s" % (num_files, "" if num_files == 1 else "s")
  if num_files >= size:
    return "%d input files, split by file among %d ranks" % (num_files, size)
  return "%d input file%s < %d ranks: split by record" % (
      num_files, "" if num_files == 1 else "s", size)
