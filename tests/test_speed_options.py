"""Speed options on CPU: each runs, the loss falls, and results stay close to plain.

Dropout is off and every run starts from the same initial checkpoint, so runs
differ only by the option under test.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

import distributed
from conftest import classifier_args, requires, run_job, tiny_config, write_task
from test_distributed import assert_ok, make_init_checkpoint, trained_weights


@pytest.fixture(scope="module")
def setup_dir(tmp_path_factory):
  base = tmp_path_factory.mktemp("speed")
  task = write_task(str(base / "task"), n_train=96, dropout=0.0)
  init = make_init_checkpoint(str(base / "init"), tiny_config(dropout=0.0))
  return str(base), task, init


def run(setup_dir, name, *extra, launcher="python", np_=1, batch=8):
  base, task, init = setup_dir
  out = os.path.join(base, name)
  if not os.path.exists(os.path.join(out, "eval_results.txt")):
    proc = run_job(launcher, np_, classifier_args(
        task, out, "--do_train", "--do_eval", "--train_shuffle_buffer=0",
        "--scale_learning_rate=false", "--num_train_epochs=6", "--learning_rate=1e-3",
        "--init_checkpoint=" + init, "--train_batch_size=%d" % batch, *extra))
    assert_ok(proc)
  with open(os.path.join(out, "eval_results.txt")) as f:
    results = dict(l.strip().split(" = ") for l in f)
  return out, {k: float(v) for k, v in results.items()}


def initial_eval_loss(setup_dir):
  _, results = run(setup_dir, "untrained", "--max_train_steps=1", "--learning_rate=1e-9")
  return results["eval_loss"]


def test_plain_run_learns(setup_dir):
  _, results = run(setup_dir, "plain")
  assert results["eval_loss"] < initial_eval_loss(setup_dir) - 0.05


def test_gradient_accumulation_matches_larger_batch(setup_dir):
  """k=2 micro-batches of 4 end with the weights of batch 8 (one process)."""
  plain, _ = run(setup_dir, "plain")
  accum, results = run(setup_dir, "accum", "--gradient_accumulation_steps=2", batch=4)
  w1, w2 = trained_weights(plain), trained_weights(accum)
  for name in w1:
    np.testing.assert_allclose(w2[name], w1[name], rtol=1e-4, atol=2e-5, err_msg=name)
  assert results["global_step"] == 2 * 72  # micro-batches: 96 / 4 x 6 epochs


def test_xla_runs_and_stays_close(setup_dir):
  _, plain = run(setup_dir, "plain")
  _, xla = run(setup_dir, "xla", "--use_xla")
  assert xla["eval_loss"] < initial_eval_loss(setup_dir) - 0.05
  assert abs(xla["eval_loss"] - plain["eval_loss"]) < 0.01


def test_amp_uses_bfloat16_on_cpu_or_says_why_not(setup_dir):
  if not distributed.cpu_supports_bfloat16():
    base, task, _ = setup_dir
    proc = run_job("python", 1, classifier_args(task, os.path.join(base, "amp_no"),
                                                "--do_train", "--use_amp"))
    assert proc.returncode == 2 and "no bfloat16 instructions" in proc.stderr
    return
  out, plain = run(setup_dir, "plain")
  amp_out, amp = run(setup_dir, "amp", "--use_amp")
  assert amp["eval_loss"] < initial_eval_loss(setup_dir) - 0.05
  assert abs(amp["eval_loss"] - plain["eval_loss"]) < 0.05
  # Variables (and so checkpoints) stay float32.
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(amp_out))
  assert reader.get_variable_to_dtype_map()["bert/pooler/dense/kernel"] == tf.float32


@requires("horovodrun")
def test_fp16_allreduce_stays_close_to_fp32_allreduce(setup_dir):
  two, _ = run(setup_dir, "two", launcher="horovodrun", np_=2, batch=4)
  fp16, results = run(setup_dir, "two_fp16", "--fp16_allreduce", launcher="horovodrun",
                      np_=2, batch=4)
  assert results["eval_loss"] < initial_eval_loss(setup_dir) - 0.05
  w1, w2 = trained_weights(two), trained_weights(fp16)
  diffs = [np.max(np.abs(w1[n] - w2[n])) for n in w1]
  assert max(diffs) < 5e-3  # float16 rounding of the gradients only
  assert max(diffs) > 0.0   # and the compression really happened


def test_tfrecords_are_cached_across_runs(setup_dir):
  base, task, init = setup_dir
  out = os.path.join(base, "cache")
  args = classifier_args(task, out, "--do_train", "--train_batch_size=8",
                         "--max_train_steps=2", "--init_checkpoint=" + init)
  first = run_job("python", 1, args)
  assert_ok(first)
  assert "converted 96 examples" in first.stderr
  second = run_job("python", 1, args[:-2] + ["--max_train_steps=4",
                                             "--init_checkpoint=" + init])
  assert_ok(second)
  assert "reusing" in second.stderr and "converted 96" not in second.stderr
  # Different inputs (another sequence length) are converted again.
  third = run_job("python", 1, [a for a in args if "max_seq_length" not in a] +
                  ["--max_seq_length=12", "--max_train_steps=6"])
  assert_ok(third)
  assert "converted 96 examples" in third.stderr
