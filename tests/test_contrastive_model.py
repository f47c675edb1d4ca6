"""Tests of contrastive_model.py (SimCSE) on a tiny model and tiny records."""

import random

import numpy as np
import tensorflow as tf

import contrastive_model
import modeling
from conftest import tiny_config
from pretraining_fixtures import PRED, SEQ, make_instance

tf1 = tf.compat.v1


def numpy_info_nce(first, candidates, labels, temperature):
  """Reference: cross-entropy of cosine similarities / temperature."""
  unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
  logits = unit(first) @ unit(candidates).T / temperature
  logits -= logits.max(axis=-1, keepdims=True)
  log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
  return -log_probs[np.arange(len(labels)), labels]


def test_restore_masked_ids_puts_the_originals_back():
  rng = random.Random(3)
  instances = [make_instance(rng) for _ in range(6)]
  arrays = {name: np.array([inst[name] for inst in instances])
            for name in instances[0]}
  expected = arrays["input_ids"].copy()
  for row, inst in enumerate(instances):
    for pos, token, weight in zip(inst["masked_lm_positions"], inst["masked_lm_ids"],
                                  inst["masked_lm_weights"]):
      if weight:
        expected[row, pos] = token
  assert (expected != arrays["input_ids"]).any()  # Something was masked.
  with tf.Graph().as_default(), tf1.Session() as sess:
    restored = sess.run(contrastive_model.restore_masked_ids(
        tf.constant(arrays["input_ids"], tf.int32),
        tf.constant(arrays["masked_lm_positions"], tf.int32),
        tf.constant(arrays["masked_lm_ids"], tf.int32),
        tf.constant(arrays["masked_lm_weights"], tf.float32)))
  # Padding predictions (position 0, weight 0) leave [CLS] alone.
  np.testing.assert_array_equal(restored, expected)
  assert (restored[:, 0] == 2).all()


def test_first_segment_mask():
  mask = np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]])
  segments = np.array([[0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0]])
  with tf.Graph().as_default(), tf1.Session() as sess:
    out = sess.run(contrastive_model.first_segment_mask(tf.constant(mask),
                                                        tf.constant(segments)))
  np.testing.assert_array_equal(out, [[1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0]])


def test_info_nce_matches_numpy_alone_and_gathered():
  """One process, and rank 1 of 2 with the other rank's rows gathered before its
  own; a pair of weight 0 is no query, and the loss divides by the mean count."""
  rng = np.random.RandomState(0)
  views = rng.randn(8, 5).astype(np.float32)  # B = 4
  other = rng.randn(4, 5).astype(np.float32)  # rank 0's second views, as gathered:
  other /= np.linalg.norm(other, axis=-1, keepdims=True)  # normalized, 2 queries
  other_rows = np.concatenate([other, [[1], [1], [0], [0]]], axis=1).astype(np.float32)
  weights = np.array([1, 0, 1, 1], np.float32)
  with tf.Graph().as_default(), tf1.Session() as sess:
    alone = sess.run(contrastive_model.get_contrastive_output(
        tf.constant(views), 0.05, tf.ones([4])))
    gathered = sess.run(contrastive_model.get_contrastive_output(
        tf.constant(views), 0.05, tf.constant(weights), rank=1,
        gather_fn=lambda rows: tf.concat([tf.constant(other_rows), rows], axis=0)))
  first, second = views[:4], views[4:]
  expected = numpy_info_nce(first, second, np.arange(4), 0.05)
  np.testing.assert_allclose(alone[1], expected, rtol=1e-4)
  np.testing.assert_allclose(alone[0], expected.mean(), rtol=1e-4)
  np.testing.assert_array_equal(alone[3], np.arange(4))
  expected = numpy_info_nce(first, np.concatenate([other, second]), np.arange(4, 8), 0.05)
  np.testing.assert_allclose(gathered[1], expected, rtol=1e-4)
  np.testing.assert_allclose(gathered[0], (weights * expected).sum() / 2.5, rtol=1e-4)
  assert gathered[2].shape == (4, 8)
  np.testing.assert_array_equal(gathered[3], np.arange(4, 8))


def test_segment_pairs_views():
  """"segments": A's mask, B's mask, and queries only where B is the true next."""
  rng = random.Random(4)
  instances = [make_instance(rng) for _ in range(6)]
  with tf.Graph().as_default(), tf1.Session() as sess:
    arrays = {name: tf.constant(np.array([inst[name] for inst in instances]),
                                tf.float32 if name == "masked_lm_weights" else tf.int32)
              for name in instances[0]}
    _, first, second, weights = sess.run(
        contrastive_model.pair_views(arrays, "segments"))
  for row, inst in enumerate(instances):
    mask, segments = np.array(inst["input_mask"]), np.array(inst["segment_ids"])
    np.testing.assert_array_equal(first[row], mask * (segments == 0))
    np.testing.assert_array_equal(second[row], mask * (segments == 1))
    assert second[row].sum() > 0 and first[row].sum() > 2
    assert weights[row] == (inst["next_sentence_labels"][0] == 0)
  assert 0 < weights.sum() < 6


def test_model_has_only_encoder_variables_and_views_differ_by_dropout():
  config = modeling.BertConfig.from_dict(tiny_config(dropout=0.1))
  rng = random.Random(5)
  instances = [make_instance(rng) for _ in range(4)]
  with tf.Graph().as_default():
    tf1.set_random_seed(1)
    features = {name: tf.constant(np.array([inst[name] for inst in instances]),
                                  tf.float32 if name == "masked_lm_weights" else tf.int32)
                for name in instances[0]}
    loss, outputs = contrastive_model.create_model(config, features, 0.05)
    found = {v.name[:-2]: tuple(v.shape.as_list()) for v in tf1.global_variables()}
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      loss, logits = sess.run([loss, outputs["contrastive_logits"]])
  assert found == dict(contrastive_model.expected_checkpoint_shapes(config))
  assert logits.shape == (4, 4) and np.isfinite(loss) and loss > 0
  # Cosines / 0.05 of two dropout views of one sentence: close to, but below, 20.
  diagonal = np.diag(logits)
  assert (diagonal < 20.0 - 1e-4).all() and (diagonal > 10.0).all(), diagonal
