"""One rank of the averaging test: 2 processes x 2 accumulated micro-batches of 2.

  horovodrun -np 2 python tests/grad_scale_worker.py OUT_DIR [fp16_overflow]

A linear model, loss = mean((x . w - y)^2) over a micro-batch, trained with
optimization.create_optimizer (gradient_accumulation_steps=2, learning-rate
scaling on) for two updates. At each update it records the reported gradient
norm and learning rate beside the norm of the mean gradient of all 8 examples of
the global batch (numpy, float64), in OUT_DIR/<rank>.json.

With `fp16_overflow` it instead allreduces, as float16 (--fp16_allreduce), a
gradient of 40000 per element on each rank: a float16 sum of two of them
overflows (the largest float16 is 65504), their average does not.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from distributed import hvd  # pylint: disable=g-import-not-at-top
import optimization  # pylint: disable=g-import-not-at-top

tf1 = tf.compat.v1
K = 2
MICRO_BATCH = 2
INIT_LR = 0.01


def global_batch(update):
  """x [8, 3] and y [8] of update `update`: every rank builds the same arrays."""
  rng = np.random.RandomState(100 + update)
  return rng.normal(size=[8, 3]), rng.normal(size=[8])


def main(out_dir):
  # Horovod: two ranks, each with its own micro-batches of the global batch.
  hvd.init()
  rank = hvd.rank()  # Horovod: selects this rank's rows.
  with tf.Graph().as_default():
    w = tf1.get_variable("w", initializer=[0.3, -0.2, 0.1], dtype=tf.float32)
    x = tf1.placeholder(tf.float32, [MICRO_BATCH, 3])
    y = tf1.placeholder(tf.float32, [MICRO_BATCH])
    loss = tf.reduce_mean(tf.square(tf.linalg.matvec(x, w) - y))
    train_op, learning_rate, grad_norm = optimization.create_optimizer(
        loss, init_lr=INIT_LR, num_train_steps=10 ** 7, num_warmup_steps=0,
        gradient_accumulation_steps=K)
    # Horovod: every rank starts from rank 0's weights.
    sync = hvd.broadcast_global_variables(0)
    updates = []
    with tf1.Session() as sess:
      sess.run([tf1.global_variables_initializer(), tf1.local_variables_initializer()])
      sess.run(sync)
      for update in range(2):
        xs, ys = global_batch(update)
        w_now = sess.run(w).astype(np.float64)
        mean_grad = 2.0 * xs.T.dot(xs.dot(w_now) - ys) / len(ys)
        for micro in range(K):
          first = (rank * K + micro) * MICRO_BATCH
          rows = slice(first, first + MICRO_BATCH)
          _, lr, norm = sess.run([train_op, learning_rate, grad_norm],
                                 {x: xs[rows], y: ys[rows]})
        updates.append({"grad_norm": float(norm), "learning_rate": float(lr),
                        "expected_norm": float(np.linalg.norm(mean_grad)),
                        "schedule_rate": INIT_LR})
  with open(os.path.join(out_dir, "%d.json" % rank), "w") as f:
    json.dump({"updates": updates}, f)


def fp16_overflow(out_dir):
  # Horovod: two ranks allreduce one large gradient in float16.
  hvd.init()
  with tf.Graph().as_default():
    w = tf1.get_variable("w", initializer=[0.0, 0.0, 0.0])
    loss = tf.reduce_sum(40000.0 * w)
    _, _, grad_norm = optimization.create_optimizer(
        loss, init_lr=0.01, num_train_steps=10, num_warmup_steps=0, fp16_allreduce=True)
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      norm = sess.run(grad_norm)
  # Horovod: each rank reports what it received.
  with open(os.path.join(out_dir, "%d.json" % hvd.rank()), "w") as f:
    json.dump({"grad_norm": float(norm), "expected_norm": 40000.0 * np.sqrt(3.0)}, f)


if __name__ == "__main__":
  if sys.argv[2:] == ["fp16_overflow"]:
    fp16_overflow(sys.argv[1])
  else:
    main(sys.argv[1])
