"""Tiny pretraining TFRecords (Google's features) written by the tests themselves."""

import collections
import os
import random

import tensorflow as tf

from conftest import VOCAB

SEQ = 16
PRED = 3


def make_instance(rng, seq=SEQ, pred=PRED, vocab_size=len(VOCAB)):
  """One record's features: [CLS] a [SEP] b [SEP], some masked positions, padding."""
  len_a = rng.randint(2, (seq - 3) // 2)
  len_b = rng.randint(1, seq - 3 - len_a - rng.randint(0, 3))
  tokens = ([2] + [rng.randrange(5, vocab_size) for _ in range(len_a)] + [3] +
            [rng.randrange(5, vocab_size) for _ in range(len_b)] + [3])
  segments = [0] * (len_a + 2) + [1] * (len_b + 1)
  candidates = [i for i, t in enumerate(tokens) if t not in (2, 3)]
  positions = sorted(rng.sample(candidates, rng.randint(1, min(pred, len(candidates)))))
  ids = [tokens[p] for p in positions]
  for p in positions:
    tokens[p] = 4  # [MASK]
  n = len(tokens)
  return collections.OrderedDict([
      ("input_ids", tokens + [0] * (seq - n)),
      ("input_mask", [1] * n + [0] * (seq - n)),
      ("segment_ids", segments + [0] * (seq - n)),
      ("masked_lm_positions", positions + [0] * (pred - len(positions))),
      ("masked_lm_ids", ids + [0] * (pred - len(ids))),
      ("masked_lm_weights", [1.0] * len(ids) + [0.0] * (pred - len(ids))),
      ("next_sentence_labels", [rng.randint(0, 1)]),
  ])


def to_example(features):
  feature = {}
  for name, values in features.items():
    if name == "masked_lm_weights":
      feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
    else:
      feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
  return tf.train.Example(features=tf.train.Features(feature=feature))


def write_records(path, n, seed, seq=SEQ, pred=PRED, vocab_size=len(VOCAB)):
  """Writes `n` records to `path`; returns their feature dicts in file order."""
  rng = random.Random(seed)
  instances = [make_instance(rng, seq, pred, vocab_size) for _ in range(n)]
  with tf.io.TFRecordWriter(path) as writer:
    for inst in instances:
      writer.write(to_example(inst).SerializeToString())
  return instances


def write_shards(folder, num_files, per_file, seed=0, **kwargs):
  """Writes `num_files` files part-00000.tfrecord... ; returns (paths, instances)."""
  os.makedirs(folder, exist_ok=True)
  paths, instances = [], []
  for i in range(num_files):
    path = os.path.join(folder, "part-%05d.tfrecord" % i)
    instances.extend(write_records(path, per_file, seed * 1000 + i, **kwargs))
    paths.append(path)
  return paths, instances
