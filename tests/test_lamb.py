"""Tests of optimization.LambOptimizer against a numpy reference of LAMB."""

import numpy as np
import pytest
import tensorflow as tf

from distributed import hvd
import optimization

tf1 = tf.compat.v1

EXCLUDE = ["LayerNorm", "layer_norm", "bias"]
INITIAL = {
    "layer/dense/kernel": np.array([[0.5, -1.0, 0.25], [2.0, 0.1, -0.3]], np.float32),
    "layer/dense/bias": np.array([0.2, -0.4, 0.1], np.float32),
    "layer/LayerNorm/gamma": np.array([1.0, 0.9, 1.1], np.float32),
    "zero/kernel": np.zeros([3], np.float32),  # ||w|| = 0: trust ratio 1
}
GRADIENTS = [  # one gradient per variable per step
    {"layer/dense/kernel": np.array([[0.1, 0.2, -0.3], [0.05, -0.5, 0.4]], np.float32),
     "layer/dense/bias": np.array([1.0, -2.0, 0.5], np.float32),
     "layer/LayerNorm/gamma": np.array([0.3, 0.0, -0.1], np.float32),
     "zero/kernel": np.array([0.2, -0.1, 0.0], np.float32)},
    {"layer/dense/kernel": np.array([[-0.2, 0.1, 0.3], [0.5, 0.5, -0.1]], np.float32),
     "layer/dense/bias": np.array([0.5, 0.5, -1.5], np.float32),
     "layer/LayerNorm/gamma": np.array([-0.2, 0.4, 0.1], np.float32),
     "zero/kernel": np.array([-0.3, 0.2, 0.1], np.float32)},
]


def setup_module():
  hvd.init()  # Horovod: a single process (size 1).


def numpy_lamb(weights, gradients, lr, weight_decay_rate, beta_1=0.9,
               beta_2=0.999, epsilon=1e-6):
  """LAMB written out in float64 numpy; returns the weights after each step."""
  w = {k: v.astype(np.float64) for k, v in weights.items()}
  m = {k: np.zeros_like(v) for k, v in w.items()}
  v = {k: np.zeros_like(x) for k, x in w.items()}
  history = []
  for t, grads in enumerate(gradients, 1):
    new_w = {}
    for name in w:
      g = grads[name].astype(np.float64)
      m[name] = beta_1 * m[name] + (1 - beta_1) * g
      v[name] = beta_2 * v[name] + (1 - beta_2) * g * g
      u = (m[name] / (1 - beta_1 ** t)) / (np.sqrt(v[name] / (1 - beta_2 ** t)) + epsilon)
      ratio = 1.0
      if not any(e in name for e in EXCLUDE):
        u = u + weight_decay_rate * w[name]
        w_norm, u_norm = np.linalg.norm(w[name]), np.linalg.norm(u)
        ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
      new_w[name] = w[name] - lr * ratio * u
    w = new_w
    history.append({k: x.copy() for k, x in w.items()})
  return history


def run_lamb(num_steps, lr, weight_decay_rate, wrap_with_horovod=False):
  """Runs LambOptimizer on fixed gradients; returns (weights per step, step)."""
  with tf.Graph().as_default():
    variables = {name: tf1.get_variable(name, initializer=value)
                 for name, value in INITIAL.items()}
    placeholders = {name: tf1.placeholder(tf.float32, value.shape)
                    for name, value in INITIAL.items()}
    optimizer = optimization.LambOptimizer(
        learning_rate=lr, weight_decay_rate=weight_decay_rate,
        exclude_from_weight_decay=EXCLUDE)
    global_step = tf1.train.get_or_create_global_step()
    grads_and_vars = [(placeholders[n], variables[n]) for n in INITIAL]
    if wrap_with_horovod:
      # Horovod: the optimizer must work inside hvd.DistributedOptimizer.
      optimizer = hvd.DistributedOptimizer(optimizer)
    train_op = optimizer.apply_gradients(grads_and_vars, global_step=global_step)
    history = []
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      for step in range(num_steps):
        sess.run(train_op, {placeholders[n]: GRADIENTS[step][n] for n in INITIAL})
        history.append(sess.run(variables))
      return history, sess.run(global_step)


@pytest.mark.parametrize("num_steps", [1, 2])
def test_lamb_matches_numpy_reference(num_steps):
  history, step = run_lamb(num_steps, lr=0.1, weight_decay_rate=0.01)
  expected = numpy_lamb(INITIAL, GRADIENTS[:num_steps], lr=0.1, weight_decay_rate=0.01)
  assert step == num_steps
  for got, want in zip(history, expected):
    for name in INITIAL:
      np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-7,
                                 err_msg=name)


def test_trust_ratio_scales_the_kernel_step_only():
  history, _ = run_lamb(1, lr=0.1, weight_decay_rate=0.0)
  (after,) = history
  # Excluded variables take a plain bias-corrected Adam step: lr * sign(g).
  step = INITIAL["layer/dense/bias"] - after["layer/dense/bias"]
  np.testing.assert_allclose(step, 0.1 * np.sign(GRADIENTS[0]["layer/dense/bias"]),
                             rtol=1e-4)
  # The kernel's step has norm lr * ||w|| whatever the gradient's scale.
  step = INITIAL["layer/dense/kernel"] - after["layer/dense/kernel"]
  np.testing.assert_allclose(np.linalg.norm(step),
                             0.1 * np.linalg.norm(INITIAL["layer/dense/kernel"]),
                             rtol=1e-5)


def test_inside_horovod_distributed_optimizer():
  plain, _ = run_lamb(2, lr=0.1, weight_decay_rate=0.01)
  wrapped, step = run_lamb(2, lr=0.1, weight_decay_rate=0.01, wrap_with_horovod=True)
  assert step == 2
  for name in INITIAL:
    np.testing.assert_allclose(wrapped[-1][name], plain[-1][name], rtol=1e-6)
