"""Unit tests of train_metrics.py: atomic writes, ThroughputHook, FinalStepHook."""

import json
import logging
import os

import tensorflow as tf

import train_metrics

tf1 = tf.compat.v1


def run_steps(hooks, num_steps):
  """Runs `num_steps` of a graph whose train op increments the global step."""
  with tf.Graph().as_default():
    global_step = tf1.train.get_or_create_global_step()
    loss = tf.constant(0.25)
    learning_rate = tf.constant(1e-3)
    train_op = tf1.assign_add(global_step, 1)
    built = hooks(loss, learning_rate)
    with tf1.train.MonitoredSession(hooks=built) as sess:
      for _ in range(num_steps):
        sess.run(train_op)
  return built


def test_atomic_write_text_replaces_whole_file_and_leaves_no_temporary(tmp_path):
  path = str(tmp_path / "out.txt")
  train_metrics.atomic_write_text(path, "old\n")
  train_metrics.atomic_write_text(path, "new text\n")
  assert open(path).read() == "new text\n"
  assert os.listdir(str(tmp_path)) == ["out.txt"]


def test_format_secs():
  format_secs = train_metrics._format_secs  # pylint: disable=protected-access
  assert format_secs(59.6) == "1m00s"
  assert format_secs(3599) == "59m59s"
  assert format_secs(3 * 3600 + 125) == "3h02m"


def test_throughput_hook_times_steps_after_warmup_and_writes_metrics(tmp_path, caplog):
  metrics_path = str(tmp_path / "train_metrics.json")

  def hooks(loss, lr):
    return [train_metrics.ThroughputHook(
        loss, lr, num_train_steps=8, per_process_batch=4, num_processes=3,
        threads_per_process=2, log_every_secs=0.0, warmup_steps=5,
        metrics_path=metrics_path, summary_dir=str(tmp_path))]

  with caplog.at_level(logging.INFO, logger=train_metrics.LOG.name):
    (hook,) = run_steps(hooks, 8)
  summary = json.load(open(metrics_path))
  assert summary["total_train_time_s"] >= 0 and hook.summary()["steps_run"] == 8
  assert summary["processes"] == 3 and summary["threads_per_process"] == 2
  assert summary["per_process_batch"] == 4 and summary["global_batch"] == 12
  assert summary["steps_run"] == 8 and summary["warmup_steps_excluded"] == 5
  assert summary["steps_timed"] == 3
  assert summary["examples_per_sec_global"] > 0
  assert abs(summary["examples_per_sec_per_process"] * 3 -
             summary["examples_per_sec_global"]) < 1e-6
  assert 0 < summary["step_time_p50_s"] <= summary["step_time_p90_s"]
  assert summary["timed_start_unix"] <= summary["timed_end_unix"]
  # A progress line per step (log_every_secs=0): warming up, then rates.
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
  assert len(lines) == 8
  assert lines[0].startswith("step 1/8 loss 0.2500 lr 0.001") and "warming up" in lines[0]
  assert "examples/sec global" in lines[-1] and lines[-1].startswith("step 8/8")
  # TensorBoard scalars beside the checkpoints (the cached writer flushes later).
  tf1.summary.FileWriterCache.get(str(tmp_path)).flush()
  events = [f for f in os.listdir(str(tmp_path)) if f.startswith("events.out")]
  assert events
  tags = set()
  for event in tf1.train.summary_iterator(os.path.join(str(tmp_path), events[0])):
    tags.update(v.tag for v in event.summary.value)
  assert {"examples_per_sec_global", "examples_per_sec_per_process"} <= tags


def test_throughput_hook_without_timed_steps(caplog):
  def hooks(loss, lr):
    return [train_metrics.ThroughputHook(loss, lr, 2, 8, 1, 1, log_every_secs=1e9,
                                         warmup_steps=5)]

  with caplog.at_level(logging.INFO, logger=train_metrics.LOG.name):
    (hook,) = run_steps(hooks, 2)
  (line,) = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("throughput")]
  assert line == "throughput: not measured (all 2 steps were in the 5-step warm-up)"
  summary = hook.summary()
  assert summary["steps_run"] == 2 and summary["steps_timed"] == 0
  assert summary["warmup_steps_excluded"] == 2
  assert summary["examples_per_sec_global"] == 0.0
  assert summary["timed_start_unix"] is None


def test_throughput_hook_summary_is_none_before_any_step():
  with tf.Graph().as_default():
    hook = train_metrics.ThroughputHook(tf.constant(0.0), tf.constant(0.0), 1, 1, 1, 1)
    assert hook.summary() is None
    assert hook.global_batch == 1


def test_final_step_hook_records_the_step_and_placement(tmp_path):
  path = str(tmp_path / "train_state.json")
  placement = {"rank": 1, "size": 2, "local_rank": 1, "local_size": 2, "cross_rank": 0}
  run_steps(lambda loss, lr: [train_metrics.FinalStepHook(path, placement)], 3)
  assert json.load(open(path)) == dict(placement, global_step=3)
