"""Tests of optimization.py: convergence, schedule, global step, weight-decay exclusion."""

import numpy as np
import tensorflow as tf

from distributed import hvd
import optimization

tf1 = tf.compat.v1


def setup_module():
  hvd.init()  # A single process: size 1.


def test_adam_converges_and_steps_once_per_update():
  with tf.Graph().as_default():
    w = tf1.get_variable("w", shape=[3], initializer=tf1.constant_initializer([0.1, -0.2, -0.1]))
    x = tf.constant([0.4, 0.2, -0.5])
    loss = tf.reduce_mean(tf.square(x - w))
    train_op, lr, grad_norm = optimization.create_optimizer(
        loss=loss, init_lr=0.2, num_train_steps=100, num_warmup_steps=10)
    global_step = tf1.train.get_global_step()
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      for _ in range(100):
        sess.run(train_op)
      w_np, step = sess.run([w, global_step])
  np.testing.assert_allclose(w_np, [0.4, 0.2, -0.5], rtol=1e-2, atol=1e-2)
  assert step == 100


def test_learning_rate_schedule_warmup_then_linear_decay():
  with tf.Graph().as_default():
    step = tf1.placeholder(tf.int64, [])
    lr = optimization.learning_rate_schedule(1.0, step, num_train_steps=100,
                                             num_warmup_steps=10)
    with tf1.Session() as sess:
      values = [sess.run(lr, {step: s}) for s in (0, 5, 10, 55, 100, 150)]
  np.testing.assert_allclose(values, [0.0, 0.5, 0.9, 0.45, 0.0, 0.0], atol=1e-6)


def test_no_weight_decay_on_layer_norm_and_bias():
  opt = optimization.AdamWeightDecayOptimizer(
      learning_rate=0.1, weight_decay_rate=0.01,
      exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])
  assert opt._do_use_weight_decay("bert/encoder/layer_0/output/dense/kernel")
  assert not opt._do_use_weight_decay("bert/encoder/layer_0/output/dense/bias")
  assert not opt._do_use_weight_decay("bert/embeddings/LayerNorm/gamma")


def test_gradients_are_clipped_to_global_norm_one():
  with tf.Graph().as_default():
    w = tf1.get_variable("w", shape=[2], initializer=tf1.zeros_initializer())
    loss = tf.reduce_sum(100.0 * w)  # gradient norm 141
    train_op, _, grad_norm = optimization.create_optimizer(
        loss=loss, init_lr=1.0, num_train_steps=10, num_warmup_steps=0)
    m = [v for v in tf1.global_variables() if v.name == "w/adam_m:0"][0]
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      _, norm = sess.run([train_op, grad_norm])
      m_val = sess.run(m)
  assert abs(norm - 100.0 * np.sqrt(2)) < 1e-3
  # adam_m = (1 - beta_1) * clipped gradient, clipped to norm 1.
  np.testing.assert_allclose(m_val, 0.1 * np.array([1, 1]) / np.sqrt(2), rtol=1e-5)
