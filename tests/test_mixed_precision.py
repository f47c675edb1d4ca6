"""bfloat16 mixed precision on CPU: the executed graph's matmuls run in bfloat16
(oneDNN kernels) while the element-wise work stays float32, gradients included."""

import numpy as np
import pytest
import tensorflow as tf

import distributed
import modeling
from conftest import tiny_config

tf1 = tf.compat.v1

MATMULS = ("MatMul", "BatchMatMulV2", "FusedMatMul")
ELEMENTWISE = ("Mul", "Tanh", "TanhGrad", "Pow", "Softmax", "SquaredDifference", "Rsqrt",
               "SelectV2", "BiasAddGrad", "AddV2")


def executed_ops(compute_type):
  """(sequence output, its gradient wrt the embedding table, {op type: set of T}) of one run."""
  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(3)
    config = modeling.BertConfig.from_dict(tiny_config(dropout=0.0))
    ids = tf.constant(np.random.RandomState(0).randint(0, 20, (2, 8)), tf.int32)
    model = modeling.BertModel(config, True, ids, compute_type=compute_type)
    output = model.get_sequence_output()
    probe = tf.constant(np.random.RandomState(1).randn(2, 8, 32), tf.float32)
    grad = tf.gradients(tf.reduce_sum(output * probe), model.get_embedding_table())[0]
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      meta = tf1.RunMetadata()
      values = sess.run([output, tf.convert_to_tensor(grad)], run_metadata=meta,
                        options=tf1.RunOptions(output_partition_graphs=True))
  types = {}
  for partition in meta.partition_graphs:
    for node in partition.node:
      op = node.op.replace("_MklNative", "").replace("_Mkl", "").lstrip("_")
      if "T" in node.attr:
        types.setdefault(op, set()).add(tf.dtypes.as_dtype(node.attr["T"].type))
  return values[0], values[1], types


@pytest.mark.skipif(not distributed.cpu_supports_bfloat16(),
                    reason="this CPU has no bfloat16 instructions")
def test_bfloat16_runs_matmuls_in_bfloat16_and_the_rest_in_float32():
  out32, grad32, types32 = executed_ops(tf.float32)
  out16, grad16, types16 = executed_ops(tf.bfloat16)
  matmul_types = set().union(*(types16.get(op, set()) for op in MATMULS))
  assert tf.bfloat16 in matmul_types, types16
  assert all(tf.bfloat16 not in types32.get(op, set()) for op in MATMULS)
  for op in ELEMENTWISE:
    assert tf.bfloat16 not in types16.get(op, set()), (op, types16.get(op))
  # bfloat16 keeps 8 bits of mantissa: close to float32, not equal.
  assert out16.dtype == np.float32
  np.testing.assert_allclose(out16, out32, atol=0.1)
  assert not np.array_equal(out16, out32)
  np.testing.assert_allclose(grad16, grad32, atol=0.05 * np.max(np.abs(grad32)))
