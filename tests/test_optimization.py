"""Tests of optimization.py: convergence, schedule, global step, weight-decay exclusion."""

import numpy as np
import pytest
import tensorflow as tf

from distributed import hvd
import optimization

tf1 = tf.compat.v1


def setup_module():
  hvd.init()  # Horovod: a single process, size 1.


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


def _reference_adam_weight_decay(param, grads, lr, weight_decay_rate, beta_1=0.9,
                                 beta_2=0.999, epsilon=1e-6):
  """Google BERT's AdamWeightDecay update, in float64 numpy, over a list of gradients."""
  p = param.astype(np.float64)
  m = np.zeros_like(p)
  v = np.zeros_like(p)
  for g in grads:
    m = beta_1 * m + (1.0 - beta_1) * g
    v = beta_2 * v + (1.0 - beta_2) * g * g
    p = p - lr * (m / (np.sqrt(v) + epsilon) + weight_decay_rate * p)
  return p, m, v


def test_fused_update_matches_google_adam_weight_decay_formula():
  rng = np.random.RandomState(3)
  init = rng.normal(size=[4, 5]).astype(np.float32)
  grads = [rng.normal(scale=s, size=[4, 5]).astype(np.float32) for s in (1.0, 0.01, 3.0, 0.5)]
  lr, wd = 0.05, 0.3  # a large decay, so that a wrong decay term shows
  with tf.Graph().as_default():
    kernel = tf1.get_variable("dense/kernel", initializer=init)
    bias = tf1.get_variable("dense/bias", initializer=init)  # excluded from decay
    g = tf1.placeholder(tf.float32, [4, 5])
    opt = optimization.AdamWeightDecayOptimizer(
        learning_rate=lr, weight_decay_rate=wd, exclude_from_weight_decay=["bias"])
    step = tf1.train.get_or_create_global_step()
    train_op = opt.apply_gradients([(g, kernel), (g, bias)], global_step=step)
    slots = [v for v in tf1.global_variables() if "adam_" in v.name]
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      for grad in grads:
        sess.run(train_op, {g: grad})
      got = sess.run({"kernel": kernel, "bias": bias, "step": step,
                      **{v.op.name: v for v in slots}})
  for name, decay in (("dense/kernel", wd), ("dense/bias", 0.0)):
    p, m, v = _reference_adam_weight_decay(init, grads, lr, decay)
    # The fused kernel computes 1 - beta_2 in float32 (0.00099998713, not 0.001):
    # v is off by 1.3e-5 relative, the summed steps here by up to 3e-5.
    np.testing.assert_allclose(got[name.split("/")[1]] - init, p - init, rtol=1e-4, atol=1e-8)
    np.testing.assert_allclose(got[name + "/adam_m"], m, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(got[name + "/adam_v"], v, rtol=3e-5, atol=1e-10)
  assert got["step"] == len(grads)


def test_weight_decay_waits_for_the_gradient():
  """The decay writes the weights, so it must not run before the backward pass is done.

  Without the dependency it raced the forward pass (training became
  non-deterministic run to run).
  """
  with tf.Graph().as_default():
    w = tf1.get_variable("dense/kernel", initializer=[1.0, 2.0])
    loss = tf.reduce_sum(tf.square(w))
    train_op, _, _ = optimization.create_optimizer(
        loss=loss, init_lr=0.1, num_train_steps=10, num_warmup_steps=0)
    del train_op
    graph = tf1.get_default_graph()
    decays = [op for op in graph.get_operations() if op.type == "AssignSubVariableOp"]
    assert decays

    def depends_on_loss_gradient(op, seen):
      if op.name in seen:
        return False
      seen.add(op.name)
      if op.name.startswith("gradients/"):
        return True
      return any(depends_on_loss_gradient(i.op, seen) for i in op.inputs) or any(
          depends_on_loss_gradient(c, seen) for c in op.control_inputs)

    for op in decays:
      assert depends_on_loss_gradient(op, set()), op.name


def test_create_optimizer_lamb_with_accumulation_updates_once_per_k_steps():
  """--optimizer=lamb through create_optimizer: LAMB's slots and update counter are
  made outside Horovod's accumulation cond, and it updates once per k micro-batches."""
  with tf.Graph().as_default():
    w = tf1.get_variable("w", shape=[3], initializer=tf1.constant_initializer([0.1, -0.2, -0.1]))
    x = tf.constant([0.4, 0.2, -0.5])
    loss = tf.reduce_mean(tf.square(x - w))
    train_op, _, _ = optimization.create_optimizer(
        loss=loss, init_lr=0.05, num_train_steps=200, num_warmup_steps=0,
        gradient_accumulation_steps=2, optimizer_name="lamb")
    global_step = tf1.train.get_global_step()
    counter = [v for v in tf1.global_variables() if v.name == "LambOptimizer/step:0"]
    assert len(counter) == 1
    with tf1.Session() as sess:
      # Horovod's accumulation counters are local variables.
      sess.run([tf1.global_variables_initializer(), tf1.local_variables_initializer()])
      for _ in range(200):
        sess.run(train_op)
      w_np, step, updates = sess.run([w, global_step, counter[0]])
  np.testing.assert_allclose(w_np, [0.4, 0.2, -0.5], rtol=5e-2, atol=5e-2)
  assert step == 200 and updates == 100


def test_layer_lr_multipliers_by_depth():
  """Embeddings at depth 0, encoder layer i at i + 1, the rest (pooler, heads) on
  top: a variable at depth k of L layers gets decay ** (L + 1 - k)."""
  names = ["bert/embeddings/word_embeddings", "bert/embeddings/LayerNorm/beta",
           "bert/encoder/layer_0/attention/self/query/kernel",
           "bert/encoder/layer_1/output/LayerNorm/gamma",
           "bert/encoder/layer_10/output/dense/bias",
           "bert/pooler/dense/kernel", "output_weights", "cls/predictions/output_bias"]
  got = optimization.layer_lr_multipliers(names, 0.5)
  # 11 layers (layer_10 is the last), so the top depth is 12.
  want = [0.5 ** 12, 0.5 ** 12, 0.5 ** 11, 0.5 ** 10, 0.5, 1.0, 1.0, 1.0]
  assert [got[n] for n in names] == want
  assert set(optimization.layer_lr_multipliers(names, 1.0).values()) == {1.0}
  # Without encoder layers everything is on top.
  assert optimization.layer_lr_multipliers(["w", "bert/embeddings/x"], 0.5) == {
      "w": 1.0, "bert/embeddings/x": 0.5}


@pytest.mark.parametrize("optimizer_name", ["adamw", "lamb"])
def test_layer_lr_decay_scales_each_variables_update(optimizer_name):
  """One update with decay 0.5 moves each variable by its multiplier times the
  move of the same update without decay (both optimizers' steps are linear in
  the rate), weight decay included."""
  names = ["bert/embeddings/word_embeddings", "bert/encoder/layer_0/dense/kernel",
           "bert/encoder/layer_1/dense/kernel", "output_weights"]
  rng = np.random.RandomState(5)
  inits = [rng.normal(size=[3, 4]).astype(np.float32) for _ in names]
  grads = [rng.normal(size=[3, 4]).astype(np.float32) for _ in names]

  def one_step(layer_lr_decay):
    with tf.Graph().as_default():
      params = [tf1.get_variable(n, initializer=i) for n, i in zip(names, inits)]
      opt = optimization.make_base_optimizer(optimizer_name, 0.01,
                                             layer_lr_decay=layer_lr_decay)
      train_op = opt.apply_gradients(
          [(tf.constant(g), p) for g, p in zip(grads, params)])
      with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(train_op)
        return [v - i for v, i in zip(sess.run(params), inits)]

  plain, decayed = one_step(1.0), one_step(0.5)
  for name, p, d, mult in zip(names, plain, decayed, [0.125, 0.25, 0.5, 1.0]):
    assert np.all(np.abs(p) > 1e-4), name
    # Deltas of float32 weights near 1: resolution ~1e-7.
    np.testing.assert_allclose(d, mult * p, rtol=1e-4, atol=2e-7, err_msg=name)
