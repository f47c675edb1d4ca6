"""Training progress logging and throughput accounting (examples/sec, step times)."""

import json
import logging
import os
import time

import numpy as np
import tensorflow as tf

LOG = logging.getLogger("bert_horovod")


def atomic_write_text(path, text):
  """Writes `text` to `path` through a temporary file and a rename.

  A reader never sees a half-written file: either the old one or the new one.
  """
  tmp = "%s.tmp-%d" % (path, os.getpid())
  with open(tmp, "w", encoding="utf-8") as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def write_eval_results(path, result, what):
  """Writes an Estimator's eval `result` as Google's `key = value` lines and logs them.

  Args:
    path: the eval_results.txt to write. result: dict of metric name -> value.
    what: a few words on what was evaluated, for the log line.
  """
  lines = ["%s = %s\n" % (key, result[key]) for key in sorted(result)]
  LOG.info("eval results (%s): %s", what, ", ".join(l.strip() for l in lines))
  atomic_write_text(path, "".join(lines))


class ThroughputHook(tf.compat.v1.train.SessionRunHook):
  """Logs progress and measures throughput on one process (rank 0 by convention).

  Every `log_every_secs` it logs step, loss, learning rate, examples/sec and an ETA.
  After `warmup_steps` steps it records each step's wall time; `summary()` gives
  examples/sec globally (all processes) and per process, and step time p50/p90.
  """

  def __init__(self, loss, learning_rate, num_train_steps, per_process_batch,
               num_processes, threads_per_process, log_every_secs=10.0,
               warmup_steps=5, metrics_path=None, summary_dir=None, unit="examples"):
    """Args:
      loss: float32 scalar Tensor, this process's batch loss.
      learning_rate: float32 scalar Tensor.
      num_train_steps: int, the step the run ends at.
      per_process_batch: int, examples per step on each process (after accumulation).
      num_processes: int, number of processes (Horovod size).
      threads_per_process: int, intra-op threads of each process (0 = GPU / unknown).
      log_every_secs: float, interval between progress lines.
      warmup_steps: int, steps excluded from timing (graph warm-up, caches).
      metrics_path: optional path of the JSON written at the end.
      summary_dir: optional folder for TensorBoard scalars `examples_per_sec_global`
        and `examples_per_sec_per_process` (written at each progress line).
      unit: the word for an example in the log lines ("sequences" for
        pretraining); the JSON and TensorBoard keys keep `examples_per_sec_*`.
    """
    self._loss = loss
    self._lr = learning_rate
    self._num_train_steps = num_train_steps
    self._per_process_batch = per_process_batch
    self._size = num_processes
    self._threads = threads_per_process
    self._log_every = log_every_secs
    self._warmup = warmup_steps
    self._metrics_path = metrics_path
    self._step_times = []
    self._timed_window = [None, None]  # Unix times: first timed step's start, last's end.
    self._steps_run = 0
    self._summary_dir = summary_dir
    self._unit = unit
    # Set once the graph and session exist: the step tensor, the step the session
    # started at, the summary writer, and the perf_counter() times of the start,
    # the last progress line and the current step's start.
    self._global_step_tensor = self._first_step = self._writer = None
    self._start = self._last_log = self._t0 = None

  @property
  def global_batch(self):
    return self._per_process_batch * self._size

  def begin(self):
    self._global_step_tensor = tf.compat.v1.train.get_global_step()
    if self._summary_dir:
      self._writer = tf.compat.v1.summary.FileWriterCache.get(self._summary_dir)

  def after_create_session(self, session, coord):
    # Read once here, then counted: every training run increments the global step
    # by one, and a read fetched beside the train op may come before or after
    # that run's increment (no order between them), which showed as "step 9/8".
    self._first_step = int(session.run(self._global_step_tensor))
    self._start = time.perf_counter()
    self._last_log = self._start

  def before_run(self, run_context):
    self._t0 = time.perf_counter()
    if self._steps_run == self._warmup:
      self._timed_window[0] = time.time()
    return tf.compat.v1.train.SessionRunArgs([self._loss, self._lr])

  def after_run(self, run_context, run_values):
    now = time.perf_counter()
    self._steps_run += 1
    if self._steps_run > self._warmup:
      self._step_times.append(now - self._t0)
      self._timed_window[1] = time.time()
    loss, lr = run_values.results
    step = self._first_step + self._steps_run
    if now - self._last_log >= self._log_every or step >= self._num_train_steps:
      self._last_log = now
      LOG.info("step %d/%d loss %.4f lr %.3g | %s", step, self._num_train_steps, loss,
               lr, self._rate_text(step))
      self._write_rate_summary(step)

  def _write_rate_summary(self, step):
    if self._writer is None or not self._step_times:
      return
    rate = self.global_batch / float(np.mean(self._step_times[-50:]))
    summary = tf.compat.v1.Summary(value=[
        tf.compat.v1.Summary.Value(tag="examples_per_sec_global", simple_value=rate),
        tf.compat.v1.Summary.Value(tag="examples_per_sec_per_process",
                                   simple_value=rate / self._size)])
    self._writer.add_summary(summary, step)

  def _rate_text(self, step):
    if not self._step_times:
      return "warming up"
    step_time = float(np.mean(self._step_times[-50:]))
    global_rate = self.global_batch / step_time
    eta = max(self._num_train_steps - step, 0) * step_time
    return "%.1f %s/sec global (%.1f per process) | ETA %s" % (
        global_rate, self._unit, global_rate / self._size, _format_secs(eta))

  def end(self, session):
    summary = self.summary()
    if summary is None:
      return
    if not summary["steps_timed"]:
      LOG.info("throughput: not measured (all %d steps were in the %d-step warm-up)",
               summary["steps_run"], self._warmup)
    else:
      LOG.info("throughput: %.1f %s/sec global, %.1f per process over %d timed "
               "steps (step p50 %.3fs, p90 %.3fs)", summary["examples_per_sec_global"],
               self._unit,
               summary["examples_per_sec_per_process"], summary["steps_timed"],
               summary["step_time_p50_s"], summary["step_time_p90_s"])
    if self._metrics_path:
      atomic_write_text(self._metrics_path, json.dumps(summary, indent=2) + "\n")

  def summary(self):
    """The throughput measurement as a dict, or None if no step was run."""
    if self._start is None or self._steps_run == 0:
      return None
    times = np.array(self._step_times if self._step_times else [np.nan])
    total_timed = float(np.sum(self._step_times)) if self._step_times else 0.0
    global_rate = (len(self._step_times) * self.global_batch / total_timed
                   if total_timed > 0 else 0.0)
    return {
        "processes": self._size,
        "threads_per_process": self._threads,
        "per_process_batch": self._per_process_batch,
        "global_batch": self.global_batch,
        "steps_run": self._steps_run,
        "warmup_steps_excluded": min(self._warmup, self._steps_run),
        "steps_timed": len(self._step_times),
        "examples_per_sec_global": global_rate,
        "examples_per_sec_per_process": global_rate / self._size,
        "step_time_p50_s": float(np.percentile(times, 50)),
        "step_time_p90_s": float(np.percentile(times, 90)),
        "total_train_time_s": time.perf_counter() - self._start,
        # When the timed steps ran (Unix seconds; None without timed steps), so that
        # runs meant to overlap (benchmark.py --independent) can be checked.
        "timed_start_unix": self._timed_window[0],
        "timed_end_unix": self._timed_window[1],
    }


def _format_secs(secs):
  secs = int(round(secs))
  if secs >= 3600:
    return "%dh%02dm" % (secs // 3600, secs % 3600 // 60)
  return "%dm%02ds" % (secs // 60, secs % 60)


class FinalStepHook(tf.compat.v1.train.SessionRunHook):
  """Records the global step a process ended training at in `path` (JSON).

  Every rank writes its own file, so a test or an operator can check that all
  ranks stopped at the same step.
  """

  def __init__(self, path, placement):
    """Args:
      path: the JSON file to write.
      placement: dict of this process's place in the job (rank, local_rank, ...).
    """
    self._path = path
    self._placement = dict(placement)
    self._global_step_tensor = None

  def begin(self):
    self._global_step_tensor = tf.compat.v1.train.get_global_step()

  def end(self, session):
    step = int(session.run(self._global_step_tensor))
    record = dict(self._placement, global_step=step)
    atomic_write_text(self._path, json.dumps(record, sort_keys=True))
