"""The tail every tf.data input of this project ends with (classifier and pretraining)."""

import tensorflow as tf

# Trimmed batches have a multiple of this many positions (at most the records'
# length): few distinct shapes, each of them aligned for the matmuls.
LENGTH_GRANULARITY = 16


def _no_autotune(dataset):
  """tf.data autotuning is off: its background thread sleeps for up to its
  optimization period (tens of seconds, growing with the run) and closing the
  session waits for it, so train, eval and predict each ended 0-40 s late."""
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)


def trim_batch(features, sequence_keys, granularity=LENGTH_GRANULARITY):
  """Cuts a batch's sequence features after its longest real sequence.

  Args:
    features: dict of Tensors; those in `sequence_keys` have shape
      [batch_size, seq_length] with padding (input_mask 0) at the end.
    sequence_keys: the names of the features to cut ("input_mask" among them).
    granularity: the kept length is the longest real length rounded up to a
      multiple of this, at most seq_length.

  Returns:
    The dict with those features of shape [batch_size, kept_length]. Padding is
    masked out of attention and pooling, so the model's outputs for the real
    tokens are those of the full-length batch (up to float rounding).
  """
  mask = features["input_mask"]
  longest = tf.reduce_max(tf.reduce_sum(mask, axis=1))
  rounded = (longest + granularity - 1) // granularity * granularity
  length = tf.maximum(1, tf.minimum(tf.shape(mask)[1], rounded))
  return {k: v[:, :length] if k in sequence_keys else v for k, v in features.items()}


def batch_and_decode(dataset, batch_size, drop_remainder, decode_fn, trim_keys=None):
  """Batches serialized records, decodes each batch, prefetches two batches.

  Args:
    dataset: tf.data.Dataset of serialized tf.train.Example strings.
    batch_size: records per batch.
    drop_remainder: True in training (every step sees a full [batch_size] batch).
    decode_fn: maps a [batch_size] string tensor to a dict of feature tensors.
    trim_keys: optional names of [batch_size, seq_length] features to cut after
      each batch's longest real sequence (`trim_batch`).

  Returns:
    The dataset of decoded batches. Parsing a batch takes about a millisecond;
    prefetch's thread does it while the model computes.
  """
  dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
  dataset = dataset.map(decode_fn)
  if trim_keys:
    dataset = dataset.map(lambda features: trim_batch(features, trim_keys))
  return _no_autotune(dataset.prefetch(2))


def length_bucket_boundaries(seq_length, granularity=LENGTH_GRANULARITY):
  """Bucket boundaries for real lengths 1..seq_length: one bucket per
  `granularity` positions ([1, g], [g + 1, 2g], ...), as
  `tf.data.Dataset.bucket_by_sequence_length` takes them (exclusive upper ends)."""
  return list(range(granularity + 1, seq_length + 1, granularity))


def bucket_and_decode(dataset, batch_size, seq_length, decode_fn, sequence_keys):
  """Training batches of examples of similar real length, trimmed (`trim_batch`).

  Each record goes to the bucket of its real length (`length_bucket_boundaries`);
  a bucket that holds `batch_size` records becomes the next batch. For text of
  mixed lengths a batch then computes on a few padding positions instead of up
  to seq_length - length per example. Which records share a batch depends on
  the stream's order and lengths, so batches differ from those of
  `batch_and_decode` (and N processes no longer train exactly as one).

  Args:
    dataset: an endless tf.data.Dataset of serialized tf.train.Example strings.
    batch_size: records per batch (every batch is full).
    seq_length: the records' length.
    decode_fn: maps a [n] string tensor to a dict of feature tensors.
    sequence_keys: names of the [n, seq_length] features ("input_mask" among them).
  """
  # Decoding 64 records at a time, then one by one into the buckets.
  dataset = dataset.batch(64).map(decode_fn).unbatch()
  boundaries = length_bucket_boundaries(seq_length)
  dataset = dataset.bucket_by_sequence_length(
      lambda features: tf.reduce_sum(features["input_mask"]),
      bucket_boundaries=boundaries,
      bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
      no_padding=True, drop_remainder=True)
  dataset = dataset.map(lambda features: trim_batch(features, sequence_keys))
  return _no_autotune(dataset.prefetch(2))
