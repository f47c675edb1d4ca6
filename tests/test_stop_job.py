"""Stopping a job: SIGINT, SIGTERM and SIGKILL of the launcher, then resuming.

One 2-process job on the tiny task is started through scripts/run_horovodrun.sh
(--gloo or --mpi) or scripts/run_mpirun.sh and stopped by a signal sent to the
process we started alone: SIGINT (Ctrl-C), SIGTERM (`kill`) and, where the
script is the launcher itself, SIGKILL (`kill -9`). Each time every rank must be
gone within seconds; each restart must resume from the last checkpoint, and the
last one must finish the planned steps.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

import distributed
from conftest import JOB_TIMEOUT, ROOT, classifier_args, requires, write_task
from test_reliability import checkpoint_steps

# The step of the checkpoint that out/checkpoint records (0 if none): the one a
# re-run resumes from, found as the runner finds it. A checkpoint's files appear
# before this record, so a SIGKILL between the two leaves the previous step recorded.
# Only while no job runs: the runner opens the checkpoint's files.
recorded_step = distributed.latest_global_step


def recorded_step_while_running(out):
  """The step that out/checkpoint names, read from that text file alone.

  While a job runs, it writes checkpoint files (a restarted one first saves the
  step it resumed from again, over the same files). Opening them from here once
  ended this (test) process with a segmentation fault inside TensorFlow's
  checkpoint reader, taking the whole suite with it (CI, 2026-12-07). The record
  itself is replaced in one step (written aside, then renamed).
  """
  state = tf.train.get_checkpoint_state(out) if os.path.isdir(out) else None
  if not state or not state.model_checkpoint_path:
    return 0
  return int(re.search(r"model\.ckpt-(\d+)$", state.model_checkpoint_path).group(1))


SCRIPTS = os.path.join(ROOT, "scripts")
STOP_SECS = 20   # every rank gone this long after the signal (a few s when idle)
# 101 examples, batch 1 x 2 processes, 12 epochs: 606 tiny steps; checkpoints every
# 100, the stops come after the first three.
EPOCHS = 12
TOTAL_STEPS = int(101 * EPOCHS / 2)


def ranks_of(out):
  """PIDs of the run_classifier.py processes writing to `out`."""
  pids = []
  for pid in os.listdir("/proc"):
    if not pid.isdigit():
      continue
    try:
      with open("/proc/%s/cmdline" % pid, "rb") as f:
        cmdline = f.read().split(b"\0")
    except OSError:
      continue
    # `python run_classifier.py ...`, not the launcher (whose arguments name it too).
    if (len(cmdline) > 1 and b"python" in cmdline[0] and
        cmdline[1].endswith(b"run_classifier.py") and
        ("--output_dir=" + out).encode() in cmdline):
      pids.append(int(pid))
  return pids


def launcher_command(launcher, task, out):
  args = classifier_args(task, out, "--do_train", "--do_eval", "--train_batch_size=1",
                         "--num_train_epochs=%d" % EPOCHS, "--save_checkpoints_steps=100")
  if launcher.startswith("horovodrun"):
    head = [os.path.join(SCRIPTS, "run_horovodrun.sh"), "--np", "2",
            "--" + launcher.split("-")[1]]
  else:
    head = [os.path.join(SCRIPTS, "run_mpirun.sh"), "--np", "2", "--oversubscribe"]
  return ["bash"] + head + ["--python", sys.executable, "--"] + args


def start(cmd, log_path):
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
  log = open(log_path, "w")
  # A session of its own: the signal goes to the launcher only, and the hang guard
  # can kill whatever is left.
  return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                          start_new_session=True), log


def read(path):
  with open(path) as f:
    return f.read()


def stop_after_a_new_checkpoint(cmd, out, sig, log_path):
  """Starts `cmd`, waits for a checkpoint newer than the last, sends `sig` to the
  launcher; returns (resumed-from step or None, seconds until every rank ended)."""
  before = recorded_step(out)
  proc, log = start(cmd, log_path)
  try:
    deadline = time.time() + JOB_TIMEOUT
    while recorded_step_while_running(out) <= before:
      assert proc.poll() is None, read(log_path)[-3000:]
      assert time.time() < deadline, "no new checkpoint\n" + read(log_path)[-3000:]
      time.sleep(0.2)
    assert len(ranks_of(out)) == 2, ranks_of(out)
    os.kill(proc.pid, sig)
    sent = time.time()
    while ranks_of(out) and time.time() - sent < STOP_SECS:
      time.sleep(0.1)
    stop_secs = time.time() - sent
    left = ranks_of(out)
    assert not left, "%s: ranks %s still running after %d s\n%s" % (
        signal.Signals(sig).name, left, STOP_SECS, read(log_path)[-3000:])
    proc.wait(timeout=30)
  finally:
    for pid in ranks_of(out):
      os.kill(pid, signal.SIGKILL)
    try:
      os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
    proc.wait()
    log.close()
  assert proc.returncode != 0, read(log_path)[-3000:]
  assert not os.path.exists(os.path.join(out, "eval_results.txt"))
  output = read(log_path)
  resumed = re.search(r"starting at step (\d+)", output)
  return (int(resumed.group(1)) if resumed else None), stop_secs


WITH_MPI = [requires("horovodrun"), requires("mpirun")]


# horovodrun over MPI execs `/bin/sh -c "mpirun ..."`: SIGKILL of that shell cannot
# reach mpirun, so only SIGINT and SIGTERM are promised there (README says so).
@pytest.mark.parametrize("launcher,signals", [
    pytest.param("horovodrun-gloo", ("SIGINT", "SIGTERM", "SIGKILL"),
                 marks=requires("horovodrun")),
    pytest.param("horovodrun-mpi", ("SIGINT", "SIGTERM"), marks=WITH_MPI),
    pytest.param("mpirun", ("SIGINT", "SIGTERM", "SIGKILL"), marks=WITH_MPI)])
def test_signals_end_every_rank_and_the_job_resumes(tmp_path, launcher, signals):
  task = write_task(str(tmp_path / "task"))
  out = str(tmp_path / "out")
  cmd = launcher_command(launcher, task, out)
  report = []
  for n, sig in enumerate(getattr(signal, name) for name in signals):
    saved = recorded_step(out)
    resumed, secs = stop_after_a_new_checkpoint(cmd, out, sig, str(tmp_path / ("log%d" % n)))
    if n:  # the restart resumed from the checkpoint the stopped run left
      assert resumed == saved, (resumed, saved)
    assert max(checkpoint_steps(out)) < TOTAL_STEPS
    report.append("%s after step %d: ranks gone in %.1f s" % (
        signal.Signals(sig).name, max(checkpoint_steps(out)), secs))

  # The same command once more resumes from the last checkpoint and finishes.
  saved = recorded_step(out)
  proc, log = start(cmd, str(tmp_path / "log_final"))
  try:
    proc.wait(timeout=JOB_TIMEOUT)
  finally:
    if proc.poll() is None:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()
    log.close()
  output = read(str(tmp_path / "log_final"))
  assert proc.returncode == 0, output[-3000:]
  assert "starting at step %d" % saved in output, output[-3000:]
  for folder in (out, os.path.join(out, "1")):
    with open(os.path.join(folder, "train_state.json")) as f:
      assert json.load(f)["global_step"] == TOTAL_STEPS
  assert "global_step = %d" % TOTAL_STEPS in read(os.path.join(out, "eval_results.txt"))
  print("%s: %s; resumed at %d and finished" % (launcher, "; ".join(report), saved))
