"""Distributed correctness (issue 12): each test fails on the code before its fix.

Multi-process tests really launch horovodrun on a tiny BERT (or a tiny linear
model); the timeouts only guard against hangs.
"""

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from conftest import (ROOT, classifier_args, launcher_prefix, requires, run_job,
                      tiny_config, write_task)
from test_distributed import assert_ok, make_init_checkpoint, trained_weights
from test_speed_options import setup_dir  # pylint: disable=unused-import (a fixture)

tf1 = tf.compat.v1
TESTS = os.path.dirname(os.path.abspath(__file__))


def run_script(args, timeout=240, env=None):
  """Runs `python args...` in the repository root; returns the CompletedProcess."""
  return subprocess.run([sys.executable] + list(args), cwd=ROOT, capture_output=True,
                        text=True, timeout=timeout,
                        env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))


def assert_bad_input_on_every_rank(proc, message, elapsed):
  """Both ranks print `message` in one line, exit 2 (not a traceback), promptly."""
  output = proc.stdout + proc.stderr
  assert proc.returncode != 0, output[-3000:]
  lines = [l for l in output.splitlines() if message in l]
  assert {l[:3] for l in lines} >= {"[0]", "[1]"}, output[-4000:]
  # horovodrun exits 1 and names the exit status of the first rank to end.
  assert "Exit code: 2" in output, output[-4000:]
  # No rank dies with a traceback (horovodrun prints its own after any failure).
  assert not [l for l in output.splitlines() if l[3:].startswith("<stderr>:Traceback")], (
      output[-4000:])
  assert elapsed < 90, elapsed


# --- 1. GPU pinning -----------------------------------------------------------

PINNING_DRIVER = r"""
import json, sys
import tensorflow as tf
from tensorflow.python.eager import context
from distributed import hvd

events = []
gpus = [tf.config.PhysicalDevice("/physical_device:GPU:%d" % i, "GPU") for i in range(4)]
real_list = tf.config.list_physical_devices


def list_devices(device_type=None):
  return list(gpus) if device_type == "GPU" else real_list(device_type)


def set_visible(devices, device_type=None):
  if isinstance(devices, tf.config.PhysicalDevice):
    devices = [devices]
  events.append(["visible", [d.name for d in devices], device_type,
                 context.context()._context_handle is not None])


def set_growth(device, enable):
  events.append(["memory_growth", device.name, enable])


class Stop(Exception):
  pass


def collective(name):
  def call(*args, **kwargs):
    events.append([name])
    raise Stop()
  return call


for module in (tf.config, tf.config.experimental):
  module.list_physical_devices = list_devices
  module.set_visible_devices = set_visible
tf.config.experimental.set_memory_growth = set_growth
# Process 2 of 4 on this host (4 fake GPUs): it must take GPU 2.
# Horovod: stand-ins that record the order of init, pinning and collectives.
hvd.init = lambda *a, **k: events.append(["init"])
hvd.rank = hvd.local_rank = lambda: 2  # Horovod: stand-in
hvd.size = hvd.local_size = lambda: 4  # Horovod: stand-in
hvd.cross_rank = lambda: 0  # Horovod: stand-in
hvd.cross_size = lambda: 1  # Horovod: stand-in
for name in ("allgather_object", "broadcast_object", "allgather", "allreduce",
             "broadcast", "broadcast_variables", "join"):
  setattr(hvd, name, collective(name))

import run_classifier
run_classifier.FLAGS(sys.argv)
try:
  run_classifier.main([sys.argv[0]])
except (Stop, SystemExit):
  pass
print("EVENTS " + json.dumps(events))
"""


def test_gpu_is_pinned_to_local_rank_before_the_first_collective(tiny_task, tmp_path):
  """Bug 1: pinning only through the session config came after eager collectives."""
  proc = run_script(["-c", PINNING_DRIVER] + classifier_args(
      tiny_task, str(tmp_path / "out"), "--do_train", "--train_batch_size=4"))
  lines = [l for l in proc.stdout.splitlines() if l.startswith("EVENTS ")]
  assert lines, proc.stdout[-2000:] + proc.stderr[-4000:]
  events = json.loads(lines[0][len("EVENTS "):])
  names = [e[0] for e in events]
  assert "visible" in names, "no tf.config.set_visible_devices call: %s" % events
  first_collective = min(i for i, n in enumerate(names)
                         if n not in ("init", "visible", "memory_growth"))
  visible = names.index("visible")
  assert names.index("init") < visible < first_collective, events
  assert events[visible][1:] == [["/physical_device:GPU:2"], "GPU", False], events
  assert ["memory_growth", "/physical_device:GPU:2", True] in events[:first_collective]


# --- 2. Dynamic loss scaling with gradient accumulation -----------------------

@requires("horovodrun")
def test_loss_scale_changes_only_on_apply_steps_and_alike_on_all_ranks(tmp_path):
  """Bug 2: an overflow on one rank's micro-step halved only that rank's scale."""
  out = str(tmp_path)
  # Micro-steps 0..5 with k = 2: updates after steps 1, 3, 5. Rank 1 overflows on
  # step 2 (a step that only accumulates).
  proc = subprocess.run(
      launcher_prefix("horovodrun", 2) + [os.path.join(TESTS, "loss_scale_worker.py"),
                                          out, "2", "1"],
      cwd=ROOT, capture_output=True, text=True, timeout=240)
  assert_ok(proc)
  ranks = [json.load(open(os.path.join(out, "%d.json" % r))) for r in (0, 1)]
  scales = [[h["scale"] for h in hist] for hist in ranks]
  assert scales[0] == scales[1], "ranks' loss scales drifted apart: %s" % scales
  s = 2.0 ** 15
  assert scales[0] == [s, s, s, s / 2, s / 2, s / 2], scales
  # The good-step counter counts optimizer updates, not micro-steps.
  assert [h["good_steps"] for h in ranks[0]] == [0, 1, 1, 0, 0, 1]
  for r in (0, 1):
    w = [h["w"] for h in ranks[r]]
    assert w[1] != w[0]                  # updated at the first apply step
    assert w[2] == w[1] and w[3] == w[1]  # the window with inf was skipped
    assert w[4] == w[3] and w[5] != w[3]  # and training went on
    assert [h["global_step"] for h in ranks[r]] == [1, 2, 3, 4, 5, 6]
  assert [h["w"] for h in ranks[0]] == [h["w"] for h in ranks[1]]


# --- 3 and the options that must act: XLA and mixed precision ------------------

def train_once(setup_dir, name, *extra, env=None):
  """Trains 6 steps of batch 8 from the shared initial checkpoint; returns (dir, proc)."""
  base, task, init = setup_dir
  out = os.path.join(base, name)
  proc = run_script([os.path.join(ROOT, "run_classifier.py")] + classifier_args(
      task, out, "--do_train", "--train_shuffle_buffer=0", "--train_batch_size=8",
      "--max_train_steps=6", "--init_checkpoint=" + init, *extra), env=env)
  assert_ok(proc)
  return out, proc


def max_weight_difference(a, b):
  wa, wb = trained_weights(a), trained_weights(b)
  assert sorted(wa) == sorted(wb)
  return max(float(np.max(np.abs(wa[n] - wb[n]))) for n in wa)


def test_use_xla_compiles_on_cpu(setup_dir, monkeypatch):
  """Bug 3: TF_XLA_FLAGS was set after TensorFlow had read it: XLA never ran."""
  monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
  plain, _ = train_once(setup_dir, "plain6")
  xla, proc = train_once(setup_dir, "xla_on", "--use_xla",
                         env={"TF_CPP_MIN_LOG_LEVEL": "0"})
  assert "Compiled cluster using XLA" in proc.stderr, proc.stderr[-3000:]
  # XLA's fused kernels round differently: the same training, not the same bits.
  diff = max_weight_difference(plain, xla)
  assert 0.0 < diff < 1e-3, diff


def graph_dtypes(out_dir, op_types):
  """dtype attributes (`T`) of the ops of `op_types` in the Estimator's graph.pbtxt."""
  from google.protobuf import text_format
  graph = tf1.GraphDef()
  with open(os.path.join(out_dir, "graph.pbtxt")) as f:
    text_format.Parse(f.read(), graph)
  return {tf.as_dtype(n.attr["T"].type).name for n in graph.node if n.op in op_types}


def test_amp_computes_matmuls_in_bfloat16_on_cpu(setup_dir):
  """The AMP test passed when --use_amp left every matmul in float32."""
  import distributed
  if not distributed.cpu_supports_bfloat16():
    pytest.skip("this CPU has no bfloat16 instructions (the refusal is tested elsewhere)")
  plain, _ = train_once(setup_dir, "plain6")
  amp, _ = train_once(setup_dir, "amp_on", "--use_amp")
  assert graph_dtypes(plain, ("MatMul", "BatchMatMulV2")) == {"float32"}
  assert "bfloat16" in graph_dtypes(amp, ("MatMul", "BatchMatMulV2"))
  diff = max_weight_difference(plain, amp)
  assert 0.0 < diff < 2e-2, diff


# --- 4 and 5. Resume continues the data where the checkpoint left it ----------

def checkpoint_steps(out):
  return sorted(int(n[len("model.ckpt-"):-len(".index")]) for n in os.listdir(out)
                if n.startswith("model.ckpt-") and n.endswith(".index"))


def cut_back_to_checkpoint(out, step):
  """Makes `out` look like a job that died right after saving checkpoint `step`."""
  for s in checkpoint_steps(out):
    if s > step:
      for name in os.listdir(out):
        if name.startswith("model.ckpt-%d." % s):
          os.remove(os.path.join(out, name))
  with open(os.path.join(out, "checkpoint"), "w") as f:
    f.write('model_checkpoint_path: "model.ckpt-%d"\n' % step)


@requires("horovodrun")
@pytest.mark.parametrize("accumulation, save_every", [(1, 5), (2, 3)],
                         ids=["no_accumulation", "accumulation_2"])
def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(
    tmp_path, accumulation, save_every):
  """Bug 4: a restart replayed each shard from its start. Bug 5: with k = 2 a
  checkpoint at an odd step shifted Horovod's accumulation windows."""
  # 42 examples, shards of 21, batch 2 per process: an epoch is not a whole number
  # of batches, so replaying the data changes what the remaining steps see.
  task = write_task(str(tmp_path / "task"), n_train=42, dropout=0.0)
  init = make_init_checkpoint(str(tmp_path / "init"), tiny_config(dropout=0.0))
  whole = str(tmp_path / "whole")
  args = ["--do_train", "--train_shuffle_buffer=0", "--seed=3", "--train_batch_size=2",
          "--num_train_epochs=3", "--init_checkpoint=" + init, "--keep_checkpoint_max=50",
          "--save_checkpoints_steps=%d" % save_every,
          "--gradient_accumulation_steps=%d" % accumulation]
  first = run_job("horovodrun", 2, classifier_args(task, whole, *args))
  assert_ok(first)
  total = 31 - 31 % accumulation  # int(42 / (2 x 2) x 3) micro-steps
  steps = checkpoint_steps(whole)
  assert steps[-1] == total
  if accumulation > 1:
    off = [s for s in steps if s % accumulation]
    assert not off, ("checkpoints at steps %s, not multiples of "
                     "--gradient_accumulation_steps=%d" % (off, accumulation))
    assert "--save_checkpoints_steps=%d" % save_every in first.stderr
  resume_at = [s for s in steps if 0 < s < total][0]
  cut = str(tmp_path / "cut")
  shutil.copytree(whole, cut)
  cut_back_to_checkpoint(cut, resume_at)
  second = run_job("horovodrun", 2, classifier_args(task, cut, *args))
  assert_ok(second)
  assert "starting at step %d" % resume_at in second.stderr
  w_whole, w_cut = trained_weights(whole), trained_weights(cut)
  for name in w_whole:
    np.testing.assert_allclose(w_cut[name], w_whole[name], rtol=1e-5, atol=1e-7,
                               err_msg="%s after resuming at step %d" % (name, resume_at))


@requires("horovodrun")
def test_resume_from_checkpoint_inside_an_accumulation_window_is_refused(tmp_path):
  """Bug 5: a checkpoint whose step is not a multiple of k (saved by a run with
  another k) would silently shift every later update window."""
  task = write_task(str(tmp_path / "task"), n_train=42, dropout=0.0)
  out = str(tmp_path / "out")
  common = ["--do_train", "--train_batch_size=2", "--num_train_epochs=1"]
  assert_ok(run_job("horovodrun", 2, classifier_args(task, out, "--max_train_steps=3",
                                                     *common)))
  start = time.time()
  proc = run_job("horovodrun", 2, classifier_args(
      task, out, "--gradient_accumulation_steps=2", *common), timeout=120)
  assert_bad_input_on_every_rank(
      proc, "checkpoint at step 3 is not a multiple of --gradient_accumulation_steps=2",
      time.time() - start)


# --- 6 and 7. Bad inputs found before any collective --------------------------

def write_cola_task(folder, bad_train_label=None):
  """A CoLA-format task (source, label, mark, sentence; no header) in `folder`."""
  write_task(folder, n_train=0, n_dev=0, n_test=0)
  rows = [("1", "good movie"), ("0", "bad food"), ("1", "nice the movie"),
          ("0", "awful sad food")] * 5
  with open(os.path.join(folder, "train.tsv"), "w") as f:
    for i, (label, text) in enumerate(rows):
      if bad_train_label is not None and i == 13:
        label = bad_train_label
      f.write("src\t%s\t\t%s\n" % (label, text))
  with open(os.path.join(folder, "dev.tsv"), "w") as f:
    f.writelines("src\t%s\t\t%s\n" % r for r in rows[:4])
  with open(os.path.join(folder, "test.tsv"), "w") as f:
    f.write("index\tsentence\n")
    f.writelines("%d\t%s\n" % (i, r[1]) for i, r in enumerate(rows[:4]))
  return folder


@requires("horovodrun")
def test_unknown_training_label_fails_fast_on_every_rank(tmp_path):
  """Bug 6: only dev/test labels were checked up front; a bad training label
  raised inside train() on one rank (traceback, exit 1, the other rank waited)."""
  task = write_cola_task(str(tmp_path / "task"), bad_train_label="2")
  args = classifier_args(task, str(tmp_path / "out"), "--do_train", "--do_eval",
                         "--train_batch_size=2")
  args[args.index("--task_name=tsv")] = "--task_name=cola"
  start = time.time()
  proc = run_job("horovodrun", 2, args, timeout=120)
  assert_bad_input_on_every_rank(proc, "label '2' is not among", time.time() - start)
  assert "train.tsv" in [l for l in (proc.stdout + proc.stderr).splitlines()
                         if "label '2' is not among" in l][0]


@requires("horovodrun")
def test_fewer_training_examples_than_processes_fails_fast(tmp_path):
  """Bug 7: a rank with an empty shard stopped at once; the other died with
  'Horovod has been shut down'."""
  task = write_task(str(tmp_path / "task"), n_train=1)
  start = time.time()
  proc = run_job("horovodrun", 2, classifier_args(
      task, str(tmp_path / "out"), "--do_train", "--train_batch_size=1",
      "--num_train_epochs=4"), timeout=120)
  assert_bad_input_on_every_rank(proc, "1 training example for 2 processes",
                                 time.time() - start)


# --- Sum or average: a scale-sensitive equivalence -----------------------------

def first_summaries(out_dir):
  """{tag: value} of the first step rank 0 wrote TensorBoard scalars for."""
  values = {}
  for name in sorted(os.listdir(out_dir)):
    if name.startswith("events.out.tfevents"):
      for event in tf1.train.summary_iterator(os.path.join(out_dir, name)):
        for v in event.summary.value:
          values.setdefault((event.step, v.tag), v.simple_value)
  first = min(step for step, _ in values)
  return {tag: value for (step, tag), value in values.items() if step == first}


@requires("horovodrun")
@pytest.mark.parametrize("accumulation", [1, 2])
def test_two_processes_average_gradients_with_learning_rate_scaling(tmp_path,
                                                                   accumulation):
  """2 x batch 4 (or 2 x 2 micro-batches of 2) at rate r/2, scaled x2 = 1 x batch 8 at
  rate r: the same weights and, where the first logged step is an update, the same
  gradient norm: Adam and clipping hide a sum of gradients, the norm does not."""
  task = write_task(str(tmp_path / "task"), n_train=96, dropout=0.0)
  init = make_init_checkpoint(str(tmp_path / "init"), tiny_config(dropout=0.0))
  common = ["--do_train", "--train_shuffle_buffer=0", "--seed=3", "--num_train_epochs=1",
            "--init_checkpoint=" + init, "--scale_learning_rate=true"]
  one, two = str(tmp_path / "one"), str(tmp_path / "two")
  assert_ok(run_job("python", 1, classifier_args(
      task, one, "--train_batch_size=8", "--learning_rate=1e-3", *common)))
  assert_ok(run_job("horovodrun", 2, classifier_args(
      task, two, "--train_batch_size=%d" % (4 // accumulation), "--learning_rate=5e-4",
      "--gradient_accumulation_steps=%d" % accumulation, *common)))
  s1, s2 = first_summaries(one), first_summaries(two)
  np.testing.assert_allclose(s2["learning_rate"], s1["learning_rate"], rtol=1e-6)
  if accumulation == 1:  # (the first micro-step of a window only accumulates)
    np.testing.assert_allclose(s2["grad_global_norm"], s1["grad_global_norm"], rtol=1e-4)
  w1, w2 = trained_weights(one), trained_weights(two)
  for name in w1:
    np.testing.assert_allclose(w2[name], w1[name], rtol=1e-4, atol=2e-5, err_msg=name)


@requires("horovodrun")
def test_accumulated_gradients_are_averaged_over_micro_batches_and_ranks(tmp_path):
  """2 processes x k = 2 micro-batches of 2: the norm at each update is the norm of
  the mean gradient of all 8 examples, and the rate is scaled by the processes."""
  out = str(tmp_path)
  proc = subprocess.run(
      launcher_prefix("horovodrun", 2) + [os.path.join(TESTS, "grad_scale_worker.py"),
                                          out],
      cwd=ROOT, capture_output=True, text=True, timeout=240)
  assert_ok(proc)
  for rank in (0, 1):
    got = json.load(open(os.path.join(out, "%d.json" % rank)))
    for update in got["updates"]:
      np.testing.assert_allclose(update["grad_norm"], update["expected_norm"], rtol=1e-5)
      np.testing.assert_allclose(update["learning_rate"], 2 * update["schedule_rate"],
                                 rtol=1e-6)
    assert len(got["updates"]) == 2


@requires("horovodrun")
def test_fp16_allreduce_of_large_gradients_does_not_overflow(tmp_path):
  """A float16 sum over processes overflowed where the average fits: divide first."""
  out = str(tmp_path)
  proc = subprocess.run(
      launcher_prefix("horovodrun", 2) + [os.path.join(TESTS, "grad_scale_worker.py"),
                                          out, "fp16_overflow"],
      cwd=ROOT, capture_output=True, text=True, timeout=240)
  assert_ok(proc)
  for rank in (0, 1):
    got = json.load(open(os.path.join(out, "%d.json" % rank)))
    np.testing.assert_allclose(got["grad_norm"], got["expected_norm"], rtol=1e-3)


# --- Risks: the embedding exchange, threads under a binding, dropout seeds -----

def test_sparse_embedding_exchange_only_on_cpus_without_fp16_allreduce():
  import distributed
  rule = distributed.use_sparse_embedding_allreduce
  assert rule("auto", 2, 16, 128, 30522, 1)
  # GPU scatter-adds of the gathered rows vary in order: ranks could drift apart.
  assert not rule("auto", 2, 16, 128, 30522, 1, gpu_available=True)
  # fp16 allreduce divides before the sum, which gathered rows cannot.
  assert not rule("auto", 2, 16, 128, 30522, 1, fp16_allreduce=True)
  with pytest.raises(distributed.InputError, match="on GPUs each rank"):
    rule("sparse", 2, 16, 128, 30522, 1, gpu_available=True)
  with pytest.raises(distributed.InputError, match="--fp16_allreduce"):
    rule("sparse", 2, 16, 128, 30522, 1, fp16_allreduce=True)


def test_cpu_threads_follow_a_launchers_binding():
  import distributed
  threads = distributed.cpu_threads_per_process
  # Unbound: the local processes divide the host's CPUs (as before).
  assert threads(4, affinity=32, host_cpus=32) == 8
  assert threads(1, affinity=32, host_cpus=32) == 32
  # srun --cpus-per-task=4 / mpirun --bind-to core: each process has its own 4.
  assert threads(4, affinity=4, host_cpus=32) == 4
  assert threads(8, affinity=1, host_cpus=8) == 1
  # --bind-to socket, 4 processes on 2 sockets of 16: two share each socket.
  assert threads(4, affinity=16, host_cpus=32) == 8
  assert threads(2, affinity=16, host_cpus=32) == 16
  assert threads(2, requested=3, affinity=1, host_cpus=2) == 3


def test_each_rank_has_its_own_dropout_seed():
  import distributed
  runtimes = [distributed.Runtime(rank=r, size=2, local_rank=r, local_size=2,
                                  cross_rank=0, gpu_available=False, threads=1,
                                  session_config=None) for r in (0, 1)]
  seeds = [distributed.make_run_config(rt, "o", "o/%d" % rt.rank, 7, 10, 2).tf_random_seed
           for rt in runtimes]
  assert seeds == [7, 8]  # rank 0 keeps --seed: one process trains as before


def test_checkpoints_between_updates_and_the_resume_position():
  import distributed
  assert [distributed.checkpoint_interval(s, 2) for s in (1, 3, 4)] == [2, 4, 4]
  assert distributed.checkpoint_interval(1000, 3) == 1002
  assert distributed.checkpoint_interval(7, 1) == 7
  # Step 5 of batch 2 used 10 examples: a shard of 21 in a loop is at 10; with a
  # shuffle buffer the stream is not a loop, so all 10 are skipped too.
  assert distributed.resume_position(5, 2, 21, shuffle_buffer=0) == 10
  assert distributed.resume_position(15, 2, 21, shuffle_buffer=0) == 9
  assert distributed.resume_position(15, 2, 21, shuffle_buffer=100) == 30
