"""Tests of modeling.py on a tiny config: shapes, JSON round trip, checkpoint names."""

import json

import numpy as np
import pytest
import tensorflow as tf

import classifier_model
import modeling
from conftest import tiny_config

tf1 = tf.compat.v1


def build(config, batch=3, seq=7, is_training=True):
  graph = tf.Graph()
  with graph.as_default():
    ids = tf1.placeholder(tf.int32, [batch, seq])
    mask = tf1.placeholder(tf.int32, [batch, seq])
    types = tf1.placeholder(tf.int32, [batch, seq])
    model = modeling.BertModel(config, is_training, ids, mask, types)
  return graph, model, (ids, mask, types)


def test_output_shapes():
  config = modeling.BertConfig.from_dict(tiny_config())
  graph, model, (ids, mask, types) = build(config)
  assert model.get_sequence_output().shape.as_list() == [3, 7, 32]
  assert model.get_pooled_output().shape.as_list() == [3, 32]
  assert len(model.get_all_encoder_layers()) == 2
  rng = np.random.RandomState(0)
  with tf1.Session(graph=graph) as sess:
    sess.run(tf1.global_variables_initializer())
    seq, pooled = sess.run(
        [model.get_sequence_output(), model.get_pooled_output()],
        {ids: rng.randint(0, 20, (3, 7)), mask: np.ones((3, 7)),
         types: np.zeros((3, 7))})
  assert seq.shape == (3, 7, 32) and pooled.shape == (3, 32)
  assert np.all(np.isfinite(seq)) and np.all(np.abs(pooled) <= 1.0)


def test_padding_does_not_change_real_tokens():
  config = modeling.BertConfig.from_dict(tiny_config(dropout=0.0))
  graph, model, (ids, mask, types) = build(config, batch=1, seq=7, is_training=False)
  base = np.array([[2, 5, 6, 7, 3, 0, 0]])
  other = np.array([[2, 5, 6, 7, 3, 9, 11]])
  m = np.array([[1, 1, 1, 1, 1, 0, 0]])
  with tf1.Session(graph=graph) as sess:
    sess.run(tf1.global_variables_initializer())
    out = [sess.run(model.get_sequence_output(),
                    {ids: x, mask: m, types: np.zeros((1, 7))}) for x in (base, other)]
  np.testing.assert_allclose(out[0][:, :5], out[1][:, :5], atol=1e-5)


def test_mean_pooling_averages_the_real_tokens_only():
  config = modeling.BertConfig.from_dict(tiny_config(dropout=0.0))
  graph, model, (ids, mask, types) = build(config, batch=2, seq=7, is_training=False)
  with graph.as_default():
    mean = classifier_model.sentence_representation(model, mask, "mean")
    cls = classifier_model.sentence_representation(model, mask, "cls")
    with pytest.raises(ValueError, match="pooling must be one of"):
      classifier_model.sentence_representation(model, mask, "max")
  m = np.array([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0]])
  feeds = [{ids: np.array([[2, 5, 6, 7, 3, 0, 0], [2, 8, 3, 0, 0, 0, 0]]), mask: m,
            types: np.zeros((2, 7))},
           {ids: np.array([[2, 5, 6, 7, 3, 9, 11], [2, 8, 3, 4, 4, 4, 4]]), mask: m,
            types: np.zeros((2, 7))}]
  with tf1.Session(graph=graph) as sess:
    sess.run(tf1.global_variables_initializer())
    runs = [sess.run([mean, cls, model.get_sequence_output(),
                      model.get_pooled_output()], feed) for feed in feeds]
  got, got_cls, seq, pooled = runs[0]
  assert got.shape == (2, 32)
  np.testing.assert_allclose(got[0], seq[0, :5].mean(axis=0), atol=1e-6)
  np.testing.assert_allclose(got[1], seq[1, :3].mean(axis=0), atol=1e-6)
  np.testing.assert_array_equal(got_cls, pooled)
  # Padded positions' ids do not move the mean.
  np.testing.assert_allclose(runs[1][0], got, atol=1e-5)


def test_config_json_round_trip(tmp_path):
  config = modeling.BertConfig.from_dict(tiny_config())
  path = tmp_path / "bert_config.json"
  path.write_text(config.to_json_string())
  again = modeling.BertConfig.from_json_file(str(path))
  assert again.to_dict() == config.to_dict()
  assert json.loads(again.to_json_string())["hidden_size"] == 32


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON"),
    ('{"hidden_size": 32}', "missing keys vocab_size"),
    (json.dumps(dict(tiny_config(), num_attention_heads=5)), "not a multiple"),
    (json.dumps(dict(tiny_config(), hidden_act="swish2")), "unsupported hidden_act"),
])
def test_config_errors_name_the_file(tmp_path, text, message):
  path = tmp_path / "bert_config.json"
  path.write_text(text)
  with pytest.raises(modeling.ConfigError, match=message) as info:
    modeling.BertConfig.from_json_file(str(path))
  assert str(path) in str(info.value)


def test_missing_config_file(tmp_path):
  with pytest.raises(modeling.ConfigError, match="cannot read"):
    modeling.BertConfig.from_json_file(str(tmp_path / "nope.json"))


def test_variable_names_match_google_checkpoints():
  config = modeling.BertConfig.from_dict(tiny_config())
  graph, _, _ = build(config)
  with graph.as_default():
    found = {v.name[:-2]: tuple(v.shape.as_list()) for v in tf1.global_variables()}
  expected = dict(modeling.expected_checkpoint_shapes(config))
  assert found == expected
  # Spot-check the literal names of Google's released checkpoints.
  for name in ("bert/embeddings/word_embeddings",
               "bert/embeddings/LayerNorm/gamma",
               "bert/encoder/layer_1/attention/self/query/kernel",
               "bert/encoder/layer_0/attention/output/LayerNorm/beta",
               "bert/encoder/layer_0/intermediate/dense/kernel",
               "bert/encoder/layer_1/output/dense/bias",
               "bert/pooler/dense/kernel"):
    assert name in found
  assert found["bert/encoder/layer_0/intermediate/dense/kernel"] == (32, 64)


def test_assignment_map_from_checkpoint(tmp_path):
  config = modeling.BertConfig.from_dict(tiny_config())
  graph, _, _ = build(config)
  with graph.as_default(), tf1.Session() as sess:
    sess.run(tf1.global_variables_initializer())
    path = tf1.train.Saver().save(sess, str(tmp_path / "model.ckpt"))
    extra = tf1.get_variable("extra_not_in_ckpt", [2])
    amap, names = modeling.get_assignment_map_from_checkpoint(
        tf1.global_variables(), path)
  assert "bert/pooler/dense/kernel" in amap and "bert/pooler/dense/kernel:0" in names
  assert extra.name[:-2] not in amap


def test_count_parameters():
  config = modeling.BertConfig.from_dict(tiny_config())
  graph, _, _ = build(config)
  with graph.as_default():
    total = sum(int(np.prod(v.shape.as_list())) for v in tf1.global_variables())
  assert modeling.count_parameters(config) == total


def test_dropout_threshold_rounds_to_16_bits():
  assert modeling.dropout_threshold(0.1) == (6554, 65536 / (65536 - 6554))
  assert modeling.dropout_threshold(0.5) == (32768, 2.0)
  assert modeling.dropout_threshold(1e-6)[0] == 0  # below 1/131072: no dropout
  assert modeling.dropout_threshold(0.999999)[0] == 65535


@pytest.mark.parametrize("shape,dtype", [([64, 4, 33, 31], tf.float32),  # odd size
                                         ([4096, 100], tf.bfloat16)])
def test_dropout_rate_scale_gradient_and_seeding(shape, dtype):
  rate = 0.1
  threshold, scale = modeling.dropout_threshold(rate)

  def run(graph_seed, steps):
    with tf.Graph().as_default():
      tf1.set_random_seed(graph_seed)
      x = tf.ones(shape, dtype)
      y = modeling.dropout(x, rate)
      grad = tf.gradients(tf.reduce_sum(tf.cast(y, tf.float32) * 3.0), x)[0]
      with tf1.Session() as sess:
        return [sess.run([y, grad]) for _ in range(steps)]

  (y1, g1), (y2, _) = run(7, 2)
  y1 = y1.astype(np.float32)
  kept = y1 != 0
  assert y1.shape == tuple(shape)
  # Kept elements are scaled so that the mean is unchanged; the rest are 0.
  np.testing.assert_allclose(y1[kept], scale, rtol=1e-2 if dtype == tf.bfloat16 else 1e-6)
  n = kept.size
  drop_frac = 1.0 - kept.mean()
  assert abs(drop_frac - threshold / 65536.0) < 5 * np.sqrt(rate * (1 - rate) / n)
  # The gradient flows through exactly the kept elements, with the same scale.
  np.testing.assert_array_equal(g1.astype(np.float32) != 0, kept)
  np.testing.assert_allclose(g1.astype(np.float32)[kept], 3.0 * scale, rtol=1e-2)
  # A new mask every step, the same masks under the same graph seed.
  assert (y2.astype(np.float32) != 0).mean() > 0.85 and not np.array_equal(y2 != 0, kept)
  (y1_again, _), _ = run(7, 2)
  np.testing.assert_array_equal(y1_again.astype(np.float32) != 0, kept)


def test_dropout_off():
  x = tf.constant([1.0, 2.0])
  assert modeling.dropout(x, 0.0) is x and modeling.dropout(x, None) is x
  assert modeling.dropout(x, 1e-7) is x


def reference_gelu(x):
  """Google BERT's formula, differentiated op by op."""
  return x * 0.5 * (1.0 + tf.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * tf.pow(x, 3))))


def reference_layer_norm(x, gamma, beta):
  mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
  return (x - mean) * tf.math.rsqrt(variance + 1e-12) * gamma + beta


def values_and_gradients(fn, inputs, seed=0):
  """fn(*inputs) and the gradients of sum(fn * w) for a random w, as numpy."""
  with tf.Graph().as_default():
    tensors = [tf.constant(v) for v in inputs]
    y = fn(*tensors)
    w = tf.constant(np.random.RandomState(seed).randn(*y.shape).astype(np.float32))
    grads = tf.gradients(tf.reduce_sum(y * w), tensors)
    with tf1.Session() as sess:
      return sess.run([y] + grads)


def test_gelu_and_layer_norm_gradients_match_the_formulas():
  """gelu and layer norm write their derivatives out (fewer passes on CPU): values and
  gradients equal those of the formulas differentiated op by op."""
  rng = np.random.RandomState(3)
  x = (3 * rng.randn(6, 5, 40)).astype(np.float32)
  for got, want in zip(values_and_gradients(modeling.gelu, [x]),
                       values_and_gradients(reference_gelu, [x])):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  gamma = (1 + 0.3 * rng.randn(40)).astype(np.float32)
  beta = (0.3 * rng.randn(40)).astype(np.float32)
  x = (2 + 5 * rng.randn(6, 5, 40)).astype(np.float32)
  for got, want in zip(values_and_gradients(modeling._normalize, [x, gamma, beta]),
                       values_and_gradients(reference_layer_norm, [x, gamma, beta])):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_teacher_probabilities_mix_into_the_training_loss():
  """With teacher_probs, each example's loss is (1 - w) x CE(label) + w x CE(teacher)."""
  config = modeling.BertConfig.from_dict(tiny_config(dropout=0.0))
  rng = np.random.RandomState(0)
  labels = np.array([0, 1, 1])
  teacher = np.array([[0.9, 0.1], [0.3, 0.7], [0.8, 0.2]], np.float32)
  for weight in (0.0, 0.3, 1.0):
    with tf.Graph().as_default():
      loss, per_example, _, probs = classifier_model.create_model(
          config, False, tf.constant(rng.randint(5, 20, (3, 7)), tf.int32),
          tf.ones([3, 7], tf.int32), tf.zeros([3, 7], tf.int32),
          tf.constant(labels, tf.int32), 2, teacher_probs=tf.constant(teacher),
          teacher_weight=weight)
      with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        loss, per_example, probs = sess.run([loss, per_example, probs])
    log_p = np.log(probs)
    expected = ((1.0 - weight) * -log_p[np.arange(3), labels] +
                weight * -(teacher * log_p).sum(axis=1))
    np.testing.assert_allclose(per_example, expected, rtol=1e-5)
    np.testing.assert_allclose(loss, expected.mean(), rtol=1e-5)
