"""Per-op-class time of one classifier training step, float32 against bfloat16.

  python scripts/profile_step.py --precision fp32,bf16          # op-class tables
  python scripts/profile_step.py --precision fp32,bf16,amp --rounds 4 --no_trace

Builds run_classifier's training graph (classifier_model.create_model and
optimization.create_optimizer, one process) once per precision, each in its own
graph and session of this process, on random ids (no padding):
  fp32  the float32 graph;
  bf16  what --use_amp builds on CPU (compute_type=tf.bfloat16: bfloat16 matmuls);
  amp   the float32 graph with grappler's oneDNN bfloat16 auto-mixed-precision
        rewrite (auto_mixed_precision_onednn_bfloat16).
Timing runs the precisions interleaved (--steps steps each, --rounds times) and
prints min/median step time per precision. With tracing on, the last round of
each precision runs under FULL_TRACE and the step stats are summed per op class
(op time as the executor records it, 1 intra-op and 1 inter-op thread by default
so the classes add up to the step).
"""

import argparse
import os
import re
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.core.protobuf import rewriter_config_pb2  # pylint: disable=g-import-not-at-top

import classifier_model  # pylint: disable=g-import-not-at-top
import distributed  # pylint: disable=g-import-not-at-top
import modeling  # pylint: disable=g-import-not-at-top
import optimization  # pylint: disable=g-import-not-at-top

tf1 = tf.compat.v1

# (class, regex on the op type with any oneDNN "_Mkl"/"_MklNative"/"_Fused" prefix removed).
OP_CLASSES = [
    ("matmul", r"(Fused)?(Batch)?MatMul(V\d)?|Einsum"),
    ("cast", r"Cast"),
    ("gelu/tanh/pow", r"Tanh(Grad)?|Pow|Erf|Gelu(Grad)?"),
    ("layernorm stats", r"Mean|Sum|SquaredDifference|Rsqrt(Grad)?|Sub|"
                        r"FusedBatchNorm.*|LayerNorm.*|BroadcastGradientArgs"),
    ("softmax", r"Softmax|LogSoftmax|SoftmaxCrossEntropyWithLogits|Exp|Max"),
    ("dropout rng", r"StatelessRandom.*|RandomUniform.*|Bitcast|GreaterEqual|"
                    r"StridedSlice|Select(V2)?|ZerosLike"),
    ("embedding", r"(Resource)?Gather(V2)?|UnsortedSegmentSum|ScatterAdd|OneHot"),
    ("optimizer", r"ResourceApply.*|Assign.*|Sqrt|RealDiv|Maximum|Minimum|L2Loss|"
                  r"AddN|IsFinite|All|HorovodAllreduce|ClipByValue"),
    ("elementwise", r"Add(V2)?|Mul|BiasAdd(Grad)?|Neg|Square|Sign|Relu|Div.*|"
                    r"AddN|Identity"),
    ("layout", r"Transpose|Reshape|ConcatV2|Slice|Pack|Unpack|Tile|ExpandDims|"
               r"Squeeze|Fill|Shape.*|Range|Const|_MklToTf|_ToTf"),
]

PRECISIONS = ("fp32", "bf16", "amp")


def op_class(op_type):
  """Maps a (possibly oneDNN-rewritten) op type to one of OP_CLASSES, or "other"."""
  name = re.sub(r"^_(Mkl)?(Native)?", "", op_type)
  for cls, pattern in OP_CLASSES:
    if re.fullmatch(pattern, name):
      return cls
  return "other"


def session_config(precision, intra, inter):
  """ConfigProto with the thread counts; `amp` turns the oneDNN bf16 rewrite on."""
  config = tf1.ConfigProto(intra_op_parallelism_threads=intra,
                           inter_op_parallelism_threads=inter)
  if precision == "amp":
    config.graph_options.rewrite_options.auto_mixed_precision_onednn_bfloat16 = (
        rewriter_config_pb2.RewriterConfig.ON)
  return config


def build(precision, args):
  """Returns (graph, feeds, train_op) of one training step at `precision`."""
  bert_config = modeling.BertConfig(
      vocab_size=args.vocab_size, hidden_size=args.hidden_size,
      num_hidden_layers=args.num_layers, num_attention_heads=args.num_heads,
      intermediate_size=args.intermediate_size, hidden_act=args.hidden_act)
  compute_type = tf.bfloat16 if precision == "bf16" else tf.float32
  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(1)
    shape = [args.batch_size, args.seq_length]
    input_ids = tf1.placeholder(tf.int32, shape)
    input_mask = tf1.placeholder(tf.int32, shape)
    segment_ids = tf1.placeholder(tf.int32, shape)
    labels = tf1.placeholder(tf.int32, [args.batch_size])
    loss, _, _, _ = classifier_model.create_model(
        bert_config, True, input_ids, input_mask, segment_ids, labels, 2,
        compute_type=compute_type)
    train_op, _, _ = optimization.create_optimizer(
        loss, 2e-5, num_train_steps=10000, num_warmup_steps=100)
    init = tf1.global_variables_initializer()
  rng = np.random.RandomState(0)
  feeds = {input_ids: rng.randint(5, args.vocab_size, shape),
           input_mask: np.ones(shape, np.int32),
           segment_ids: np.zeros(shape, np.int32),
           labels: rng.randint(0, 2, [args.batch_size])}
  return graph, feeds, train_op, init


def class_table(step_stats):
  """Op time (ms per step) and op count per op class and per op type, all devices.

  Args:
    step_stats: list of StepStats protos, one per traced step; times are averaged.
  """
  by_class, by_type = {}, {}
  nodes = [(node, len(step_stats)) for stats in step_stats for dev in stats.dev_stats
           for node in dev.node_stats]
  for node, steps in nodes:
    if node.node_name == "_SOURCE" or not node.timeline_label:
      continue
    op_type = re.search(r"= (\S+?)\(", node.timeline_label)
    op_type = op_type.group(1) if op_type else node.node_name
    ms = node.op_end_rel_micros / 1000.0 / steps
    cls = op_class(op_type)
    total, count = by_class.get(cls, (0.0, 0))
    by_class[cls] = (total + ms, count + 1.0 / steps)
    total, count = by_type.get(op_type, (0.0, 0))
    by_type[op_type] = (total + ms, count + 1.0 / steps)
  return by_class, by_type


def print_tables(tables, top):
  """Markdown: ms per step and op count of each class for every precision."""
  names = list(tables)
  classes = sorted({c for n in names for c in tables[n][0]},
                   key=lambda c: -max(tables[n][0].get(c, (0, 0))[0] for n in names))
  print("| op class | " + " | ".join("%s ms (ops)" % n for n in names) + " |")
  print("|---|" + "---|" * len(names))
  for cls in classes + ["total"]:
    cells = []
    for n in names:
      if cls == "total":
        ms = sum(v[0] for v in tables[n][0].values())
        count = sum(v[1] for v in tables[n][0].values())
      else:
        ms, count = tables[n][0].get(cls, (0.0, 0))
      cells.append("%.1f (%d)" % (ms, round(count)))
    print("| %s | %s |" % (cls, " | ".join(cells)))
  for n in names:
    by_type = sorted(tables[n][1].items(), key=lambda kv: -kv[1][0])[:top]
    print("\n%s, top op types: %s" % (n, ", ".join(
        "%s %.1f ms/%d" % (t, ms, round(c)) for t, (ms, c) in by_type)))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--precision", default="fp32,bf16",
                      help="comma list of fp32, bf16, amp")
  parser.add_argument("--steps", type=int, default=4, help="timed steps per round")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--no_trace", action="store_true")
  parser.add_argument("--trace_steps", type=int, default=3, help="traced steps averaged")
  parser.add_argument("--intra_op_threads", type=int, default=1)
  parser.add_argument("--inter_op_threads", type=int, default=1)
  parser.add_argument("--top", type=int, default=12, help="op types listed per precision")
  # The model and its batch (type: the default's).
  for name, default in (("batch_size", 16), ("seq_length", 128), ("vocab_size", 5000),
                        ("hidden_size", 384), ("num_layers", 6), ("num_heads", 12),
                        ("intermediate_size", 1536), ("hidden_act", "gelu")):
    parser.add_argument("--" + name, type=type(default), default=default)
  args = parser.parse_args()
  precisions = args.precision.split(",")
  for p in precisions:
    if p not in PRECISIONS:
      parser.error("--precision: %r is not one of %s" % (p, ", ".join(PRECISIONS)))

  tf1.disable_eager_execution()
  # Horovod: one process; create_optimizer wraps hvd.DistributedOptimizer (size 1).
  distributed.hvd.init()
  runs = {}
  for p in precisions:
    graph, feeds, train_op, init = build(p, args)
    sess = tf1.Session(graph=graph, config=session_config(
        p, args.intra_op_threads, args.inter_op_threads))
    sess.run(init)
    for _ in range(args.warmup):
      sess.run(train_op, feed_dict=feeds)
    runs[p] = (sess, feeds, train_op, [])

  for _ in range(args.rounds):
    for p in precisions:
      sess, feeds, train_op, times = runs[p]
      for _ in range(args.steps):
        start = time.time()
        sess.run(train_op, feed_dict=feeds)
        times.append(time.time() - start)

  print("step time (s), %d x %d steps interleaved, batch %d, %d intra x %d inter threads:"
        % (args.rounds, args.steps, args.batch_size, args.intra_op_threads,
           args.inter_op_threads))
  for p in precisions:
    times = runs[p][3]
    print("  %-5s min %.3f  median %.3f  (%.2f examples/sec at the median)"
          % (p, min(times), statistics.median(times), args.batch_size / statistics.median(times)))
  if args.no_trace:
    return
  tables = {}
  options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
  for p in precisions:
    sess, feeds, train_op, _ = runs[p]
    step_stats = []
    for _ in range(args.trace_steps):
      meta = tf1.RunMetadata()
      sess.run(train_op, feed_dict=feeds, run_metadata=meta, options=options)
      step_stats.append(meta.step_stats)
    tables[p] = class_table(step_stats)
  print()
  print_tables(tables, args.top)


if __name__ == "__main__":
  main()
