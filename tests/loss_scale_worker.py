"""One rank of the loss-scaling test: float16-style dynamic loss scaling, k = 2.

  horovodrun -np 2 python tests/loss_scale_worker.py OUT_DIR INF_STEP INF_RANK

Trains w (2 values) on loss = sum(w * x) with optimization.create_optimizer
(dynamic_loss_scale=True, gradient_accumulation_steps=2) for 6 micro-steps. On
micro-step INF_STEP, rank INF_RANK feeds x = [inf, 1]: an overflow on one rank
only. After every micro-step it records the loss scale, its good-step counter,
w and the global step, and writes them to OUT_DIR/<rank>.json.
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
MICRO_STEPS = 6


def main(out_dir, inf_step, inf_rank):
  # Horovod: one process per rank; ranks compare their loss scales afterwards.
  hvd.init()
  rank = hvd.rank()  # Horovod: which rank feeds the overflow.
  with tf.Graph().as_default():
    w = tf1.get_variable("w", initializer=[0.5, -0.25])
    x = tf1.placeholder(tf.float32, [2])
    loss = tf.reduce_sum(w * x)
    train_op, _, _ = optimization.create_optimizer(
        loss, init_lr=0.01, num_train_steps=100, num_warmup_steps=0,
        scale_learning_rate=False, gradient_accumulation_steps=2,
        dynamic_loss_scale=True)
    by_name = {v.op.name: v for v in tf1.global_variables()}
    watched = {"scale": by_name["loss_scale"],
               "good_steps": by_name["loss_scale_good_steps"],
               "w": w, "global_step": tf1.train.get_global_step()}
    # Horovod: every rank starts from rank 0's variables, as the Estimator hook does.
    sync = hvd.broadcast_global_variables(0)
    history = []
    with tf1.Session() as sess:
      sess.run([tf1.global_variables_initializer(), tf1.local_variables_initializer()])
      sess.run(sync)
      for step in range(MICRO_STEPS):
        value = [np.inf, 1.0] if (step, rank) == (inf_step, inf_rank) else [1.0, 1.0]
        sess.run(train_op, {x: np.array(value, np.float32) * (rank + 1)})
        got = sess.run(watched)
        history.append({k: np.asarray(v).tolist() for k, v in got.items()})
  with open(os.path.join(out_dir, "%d.json" % rank), "w") as f:
    json.dump(history, f)


if __name__ == "__main__":
  main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
