"""The tail every tf.data input of this project ends with (classifier and pretraining)."""

import tensorflow as tf


def batch_and_decode(dataset, batch_size, drop_remainder, decode_fn):
  """Batches serialized records, decodes each batch, prefetches two batches.

  Args:
    dataset: tf.data.Dataset of serialized tf.train.Example strings.
    batch_size: records per batch.
    drop_remainder: True in training (every step sees a full [batch_size] batch).
    decode_fn: maps a [batch_size] string tensor to a dict of feature tensors.

  Returns:
    The dataset of decoded batches. Parsing a batch takes about a millisecond;
    prefetch's thread does it while the model computes. tf.data autotuning is
    off: its background thread sleeps for up to its optimization period (tens of
    seconds, growing with the run) and closing the session waits for it, so
    train, eval and predict each ended 0-40 s late.
  """
  dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
  dataset = dataset.map(decode_fn).prefetch(2)
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)
