"""The subprocesses of scripts/benchmark.py: training jobs and matmul-peak workers.

Each is started in a session of its own (killed as a group on failure or timeout),
logs to files rather than pipes nobody reads, and a failure becomes one
BenchmarkError with the exit code and the last lines of stderr.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class BenchmarkError(RuntimeError):
  """A problem that ends the benchmark with one clear message."""


STDERR_TAIL_LINES = 20


MATMUL_WORKER = r"""
import json, os, sys, time
spec = json.loads(sys.argv[1])
import tensorflow as tf
if spec["threads"]:
  tf.config.threading.set_intra_op_parallelism_threads(spec["threads"])
  tf.config.threading.set_inter_op_parallelism_threads(1)
dtype = getattr(tf, spec["dtype"])
n = spec["n"]
with tf.device(spec["device"]):
  a = tf.cast(tf.random.normal((n, n), seed=1), dtype)
  b = tf.cast(tf.random.normal((n, n), seed=2), dtype)
  def batch(k):
    c = None
    for _ in range(k):
      c = tf.matmul(a, b)
    return float(tf.cast(c[0, 0], tf.float32).numpy())  # waits for the device
  batch(2)
  t0 = time.perf_counter()
  batch(1)
  one = max(time.perf_counter() - t0, 1e-6)
  k = max(1, int(0.05 / one))  # about 50 ms between synchronizations
  open(os.path.join(spec["sync_dir"], "ready-%d" % spec["index"]), "w").close()
  deadline = time.time() + 600
  while not os.path.exists(os.path.join(spec["sync_dir"], "go")):
    if time.time() > deadline:
      sys.exit("matmul worker: no start signal")
    time.sleep(0.005)
  rates = []
  for _ in range(spec["repeats"]):
    count, t0 = 0, time.perf_counter()
    while True:
      batch(k)
      count += k
      elapsed = time.perf_counter() - t0
      if elapsed >= spec["secs"]:
        break
    rates.append(2.0 * n ** 3 * count / elapsed / 1e12)
print("MATMUL_RESULT " + json.dumps({"rates_tflops": rates, "tf_version": tf.__version__,
      "gpus": [d.name for d in tf.config.list_physical_devices("GPU")]}))
"""


def worker_env(gpu, index, threads):
  """Environment of a training run or matmul worker (CPU runs hide GPUs)."""
  env = dict(os.environ)
  env["PYTHONUNBUFFERED"] = "1"
  if gpu:
    if index is not None:
      env["CUDA_VISIBLE_DEVICES"] = str(index)
  else:
    env["CUDA_VISIBLE_DEVICES"] = ""
    if threads:
      env["OMP_NUM_THREADS"] = str(threads)
  return env


def measure_matmul_peak(processes, threads, n, dtype, gpu, secs, repeats, timeout=900):
  """Runs `processes` matmul workers at once; returns their per-window rates.

  Every worker warms up, then all start timing together (a file signal). With
  gpu, worker i sees only GPU i.

  Workers run with ONEDNN_VERBOSE=profile_create: oneDNN then names each matmul
  kernel it creates (TensorFlow caches them), e.g. "brg:avx512_core_amx src_bf16
  wei_bf16 dst_bf16" for bfloat16 on AMX; Eigen's float32 matmuls print none.

  Returns:
    dict: per_process_best (best window of each worker), aggregate_best (the best
    window's sum over workers), onednn_matmul (the oneDNN matmul kernels of
    worker 0, [] if none), tf_version, gpus.
  """
  sync_dir = tempfile.mkdtemp(prefix="bench-matmul-")
  procs = []
  try:
    for i in range(processes):
      spec = {"n": n, "threads": threads, "dtype": dtype, "secs": secs,
              "repeats": repeats, "index": i, "sync_dir": sync_dir,
              "device": "/GPU:0" if gpu else "/CPU:0"}
      # stderr goes to a file: TF's log lines must not fill a pipe nobody reads yet.
      with open(os.path.join(sync_dir, "stderr-%d" % i), "w") as err:
        procs.append(subprocess.Popen(
            [sys.executable, "-c", MATMUL_WORKER, json.dumps(spec)],
            env=dict(worker_env(gpu, i if gpu else None, threads),
                     ONEDNN_VERBOSE="profile_create"), stdout=subprocess.PIPE,
            stderr=err, text=True, start_new_session=True))
    wait_for_ready(procs, sync_dir, timeout)
    open(os.path.join(sync_dir, "go"), "w").close()
    results = [collect_worker(p, i, sync_dir, timeout) for i, p in enumerate(procs)]
  finally:
    for p in procs:
      if p.poll() is None:
        kill_group(p)
    shutil.rmtree(sync_dir, ignore_errors=True)
  windows = list(zip(*[r["rates_tflops"] for r in results]))
  return {"processes": processes, "threads": threads, "dtype": dtype, "n": n,
          "per_process_best": [max(r["rates_tflops"]) for r in results],
          "aggregate_best": max(sum(w) for w in windows),
          "windows_tflops": [list(w) for w in windows],
          "onednn_matmul": results[0]["onednn_matmul"],
          "tf_version": results[0]["tf_version"], "gpus": results[0]["gpus"]}


def wait_for_ready(procs, sync_dir, timeout):
  """Waits until every matmul worker has warmed up; raises if one died."""
  deadline = time.time() + timeout
  while True:
    ready = sum(os.path.exists(os.path.join(sync_dir, "ready-%d" % i))
                for i in range(len(procs)))
    if ready == len(procs):
      return
    for i, p in enumerate(procs):
      if p.poll() is not None:
        collect_worker(p, i, sync_dir, timeout)  # raises with its stderr
    if time.time() > deadline:
      raise BenchmarkError("matmul workers not ready after %ds" % timeout)
    time.sleep(0.05)


def collect_worker(proc, index, sync_dir, timeout):
  """The JSON result line of matmul worker `index`, or a BenchmarkError."""
  try:
    out, _ = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    kill_group(proc)
    raise BenchmarkError("matmul worker timed out after %ds" % timeout)
  for line in out.splitlines():
    if line.startswith("MATMUL_RESULT "):
      return dict(json.loads(line[len("MATMUL_RESULT "):]),
                  onednn_matmul=onednn_matmul_kernels(out))
  err = read_text(os.path.join(sync_dir, "stderr-%d" % index))
  raise BenchmarkError("matmul worker failed (exit code %s); last lines of its "
                       "stderr:\n%s" % (proc.returncode, tail(err)))


def onednn_matmul_kernels(text):
  """The matmul kernels ONEDNN_VERBOSE=profile_create lines name, with data types.

  A line `onednn_verbose,create:cache_miss,cpu,matmul,brg:avx512_core_amx,undef,
  src_bf16::blocked:ab::f0 wei_bf16::... dst_bf16::...,...` gives
  "brg:avx512_core_amx src_bf16 wei_bf16 dst_bf16".
  """
  kernels = []
  for line in text.splitlines():
    fields = line.split(",")
    if (len(fields) > 6 and fields[0] == "onednn_verbose" and
        fields[1].startswith("create:cache") and fields[3] == "matmul"):
      kernel = " ".join([fields[4]] + [md.split("::")[0] for md in fields[6].split()])
      if kernel not in kernels:
        kernels.append(kernel)
  return kernels


def run_jobs(cmds, run_dirs, env, timeout):
  """Runs training jobs at the same time, each logging in its run_dir.

  Returns (wall seconds until the last ended, [metrics dict of each job]). Raises
  BenchmarkError (exit code, last lines of stderr) if one fails, times out or
  writes no run_dir/output/train_metrics.json; the others are then killed.
  """
  t0 = time.time()
  procs, files = [], []
  try:
    for cmd, run_dir in zip(cmds, run_dirs):
      out = open(os.path.join(run_dir, "stdout.log"), "w")
      err = open(os.path.join(run_dir, "stderr.log"), "w")
      files += [out, err]
      procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=err,
                                    start_new_session=True))
    codes = []
    for proc in procs:
      try:
        codes.append(proc.wait(timeout=max(1.0, t0 + timeout - time.time())))
      except subprocess.TimeoutExpired:
        kill_group(proc)
        codes.append("timeout after %ds" % timeout)
  finally:
    for proc in procs:
      if proc.poll() is None:
        kill_group(proc)
    for f in files:
      f.close()
  wall = time.time() - t0
  metrics = []
  for cmd, run_dir, code in zip(cmds, run_dirs, codes):
    metrics_path = os.path.join(run_dir, "output", "train_metrics.json")
    if code != 0 or not os.path.isfile(metrics_path):
      raise job_error(cmd, run_dir, code)
    with open(metrics_path) as f:
      metrics.append(json.load(f))
  return wall, metrics


def job_error(cmd, run_dir, code):
  """The BenchmarkError of a failed job: exit code(s), command, its stderr's tail."""
  stderr_path = os.path.join(run_dir, "stderr.log")
  text = read_text(stderr_path) or read_text(os.path.join(run_dir, "stdout.log"))
  worker_lines, worker_code = split_launcher_output(text)
  return BenchmarkError(
      "training run failed (exit code %s%s%s): %s\nlast %d lines of the "
      "processes' stderr (all of it in %s):\n%s" % (
          code, "; first failed process exited with %s" % worker_code
          if worker_code else "", "" if code != 0 else ", but no train_metrics.json",
          " ".join(cmd), STDERR_TAIL_LINES, stderr_path,
          tail("\n".join(worker_lines) if worker_lines else text)))


def split_launcher_output(text):
  """(lines the ranks wrote to stderr, exit code horovodrun reports or None).

  horovodrun prefixes each rank's stderr line with `[rank]<stderr>:` (Gloo) or
  `[job,rank]<stderr>:` (MPI) and, when a rank fails, reports `Exit code: N`.
  """
  worker, code = [], None
  for line in text.splitlines():
    match = re.match(r"^\[\d+(,\d+)?\]<stderr>:", line)
    if match:
      worker.append(line)
    elif line.strip().startswith("Exit code:"):
      code = line.split(":", 1)[1].strip()
  return worker, code


def kill_group(proc):
  """Kills a child started with start_new_session=True and its process group."""
  try:
    os.killpg(proc.pid, signal.SIGKILL)
  except (ProcessLookupError, PermissionError):
    pass
  proc.wait()


def tail(text, n=STDERR_TAIL_LINES):
  """The last n lines of text, indented."""
  lines = (text or "").rstrip("\n").splitlines()[-n:]
  return "\n".join("    " + l for l in lines) if lines else "    (empty)"


def read_text(path):
  try:
    with open(path, errors="replace") as f:
      return f.read()
  except OSError:
    return ""


def log(message):
  sys.stderr.write("[benchmark] %s\n" % message)
  sys.stderr.flush()
