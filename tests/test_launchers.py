"""The launchers: scripts/run_horovodrun.sh, run_mpirun.sh, slurm.sbatch, run_demo.sh.

Real runs train the tiny task with 2 processes (and 4 processes on two network
namespaces that act as two hosts); the dry runs check the exact commands.
Timeouts are hang guards only: on timeout the whole process group is killed.
"""

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import ROOT, classifier_args, requires

SCRIPTS = os.path.join(ROOT, "scripts")
HOROVODRUN_SH = os.path.join(SCRIPTS, "run_horovodrun.sh")
MPIRUN_SH = os.path.join(SCRIPTS, "run_mpirun.sh")
SBATCH = os.path.join(SCRIPTS, "slurm.sbatch")
DEMO = os.path.join(SCRIPTS, "run_demo.sh")
LAUNCH_COMMON = os.path.join(SCRIPTS, "launch_common.sh")
RSH_AGENT = os.path.join(ROOT, "tests", "netns_rsh_agent.sh")
VENV_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
DEFAULT_PYTHON = VENV_PYTHON if os.access(VENV_PYTHON, os.X_OK) else "python3"
RUN_CLASSIFIER = os.path.join(ROOT, "run_classifier.py")
HANG_GUARD = 300       # seconds, 2-process jobs (a healthy one takes well under a minute)
HANG_GUARD_4 = 480     # seconds, the 4-process two-namespace job
IS_ROOT = os.geteuid() == 0


def job_env(**extra):
  env = dict(os.environ)
  # The venv's bin first, as after `source .venv/bin/activate`.
  env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
  env["PYTHONUNBUFFERED"] = "1"
  env.update(extra)
  return env


def run(cmd, env=None, timeout=HANG_GUARD):
  """Runs `cmd` in its own session; on timeout kills the whole group and fails."""
  proc = subprocess.Popen(cmd, cwd=ROOT, env=env or job_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True)
  try:
    out, err = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    try:
      os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
    out, err = proc.communicate()
    pytest.fail("hang guard: %s ran over %d s\n--- stdout\n%s\n--- stderr\n%s" % (
        cmd[:3], timeout, out[-3000:], err[-6000:]))
  return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def assert_ok(proc):
  assert proc.returncode == 0, "exit %d\n--- stdout\n%s\n--- stderr\n%s" % (
      proc.returncode, proc.stdout[-3000:], proc.stderr[-6000:])


def dry_run(script, *args, env=None):
  """The command a launcher prints with --dry_run, split into words."""
  proc = run(["bash", script] + list(args), env=env, timeout=60)
  assert_ok(proc)
  lines = [l for l in proc.stdout.splitlines() if l.strip()]
  return shlex.split(lines[-1]), proc.stdout


def train_states(out_dir, size):
  """train_state.json of every rank (rank 0 in output_dir, rank r in output_dir/r)."""
  states = []
  for rank in range(size):
    folder = out_dir if rank == 0 else os.path.join(out_dir, str(rank))
    path = os.path.join(folder, "train_state.json")
    assert os.path.exists(path), "rank %d wrote no %s" % (rank, path)
    with open(path) as f:
      states.append(json.load(f))
  return states


def check_same_step(states, size, steps):
  assert [s["rank"] for s in states] == list(range(size))
  assert all(s["size"] == size for s in states), states
  assert {s["global_step"] for s in states} == {steps}, states


# --------------------------------------------------------------------- real runs


@requires("horovodrun")
def test_horovodrun_launcher_trains_two_processes(tiny_task, tmp_path):
  out = str(tmp_path / "out")
  proc = run(["bash", HOROVODRUN_SH, "--np", "2", "--hosts", "localhost:2", "--gloo",
              "--"] + classifier_args(tiny_task, out, "--do_train", "--train_batch_size=4",
                                      "--num_train_epochs=1"))
  assert_ok(proc)
  # 101 examples, global batch 2 x 4, 1 epoch: int(101 / 8) = 12 steps.
  check_same_step(train_states(out, 2), size=2, steps=12)


@requires("mpirun")
@requires("horovodrun")
def test_mpirun_launcher_trains_two_processes(tiny_task, tmp_path):
  out = str(tmp_path / "out")
  proc = run(["bash", MPIRUN_SH, "--np", "2", "--oversubscribe", "--"] +
             classifier_args(tiny_task, out, "--do_train", "--train_batch_size=4",
                             "--num_train_epochs=1"))
  assert_ok(proc)
  check_same_step(train_states(out, 2), size=2, steps=12)


# ---------------------------------------------------------------------- dry runs


def test_horovodrun_dry_run_maps_every_option():
  cmd, _ = dry_run(
      HOROVODRUN_SH, "--np", "8", "--hosts", "node1:4,node2:4",
      "--network_interface", "eth0", "--mpi", "--timeline", "/tmp/tl file.json",
      "--stall_warning_secs", "30", "--stall_shutdown_secs", "120",
      "--python", "/opt/py/bin/python", "--script", "/opt/bert/run_classifier.py",
      "--dry_run", "--", "--do_train", "--output_dir=/out dir")
  assert cmd == [
      "/opt/py/bin/horovodrun" if os.access("/opt/py/bin/horovodrun", os.X_OK)
      else "horovodrun",
      "-np", "8", "-H", "node1:4,node2:4", "--network-interface", "eth0", "--mpi",
      "--timeline-filename", "/tmp/tl file.json",
      "--stall-check-warning-time-seconds", "30",
      "--stall-check-shutdown-time-seconds", "120",
      "/opt/py/bin/python", "/opt/bert/run_classifier.py", "--do_train",
      "--output_dir=/out dir"]


def test_horovodrun_dry_run_defaults_and_hostfile(tmp_path):
  cmd, _ = dry_run(HOROVODRUN_SH, "--np", "2", "--gloo", "--dry_run", "--", "--do_train")
  # Over Gloo, Horovod's launcher runs in the chosen python (gloo_horovodrun.py).
  assert cmd == [DEFAULT_PYTHON, os.path.join(SCRIPTS, "gloo_horovodrun.py"), "-np", "2",
                 "--gloo", DEFAULT_PYTHON, RUN_CLASSIFIER, "--do_train"]
  cmd, _ = dry_run(HOROVODRUN_SH, "--np", "2", "--hostfile", str(tmp_path / "h"),
                   "--dry_run")
  assert cmd[1:5] == ["-np", "2", "-hostfile", str(tmp_path / "h")]
  if DEFAULT_PYTHON == VENV_PYTHON and os.path.exists(VENV_PYTHON[:-6] + "horovodrun"):
    assert cmd[0] == VENV_PYTHON[:-6] + "horovodrun"


@requires("horovodrun")
def test_horovodrun_dry_run_options_exist_in_horovodrun():
  cmd, _ = dry_run(HOROVODRUN_SH, "--np", "2", "--hosts", "h:2", "--network_interface",
                   "lo", "--gloo", "--timeline", "t.json", "--stall_warning_secs", "5",
                   "--stall_shutdown_secs", "9", "--dry_run")
  launcher = cmd[:cmd.index("-np")]  # python gloo_horovodrun.py: horovodrun's options
  proc = run(launcher + ["--help"], timeout=120)
  assert_ok(proc)
  assert "usage: horovodrun" in proc.stdout
  for word in cmd[len(launcher):cmd.index(DEFAULT_PYTHON, len(launcher))]:
    if word.startswith("-"):
      assert word in proc.stdout, "horovodrun has no option %s" % word


def test_mpirun_dry_run_command():
  env = job_env(LD_LIBRARY_PATH="/opt/lib")
  env.pop("NCCL_DEBUG", None)
  cmd, _ = dry_run(MPIRUN_SH, "--np", "4", "--hosts", "a:2,b:2",
                   "--btl_tcp_if_include", "eth0", "--rsh_agent", "tests/netns_rsh_agent.sh",
                   "--dry_run", "--", "--do_train", "--output_dir=/o", env=env)
  assert cmd == (["mpirun", "-np", "4"] + (["--allow-run-as-root"] if IS_ROOT else []) + [
      "-H", "a:2,b:2", "-bind-to", "none", "-map-by", "slot",
      "-x", "NCCL_DEBUG=INFO", "-x", "LD_LIBRARY_PATH", "-x", "PATH",
      "-mca", "pml", "ob1", "-mca", "btl", "^openib",
      "-mca", "btl_tcp_if_include", "eth0", "-mca", "oob_tcp_if_include", "eth0",
      "-mca", "plm_rsh_agent", RSH_AGENT,  # made absolute
      DEFAULT_PYTHON, RUN_CLASSIFIER, "--do_train", "--output_dir=/o"])
  assert "--oversubscribe" not in cmd


def test_mpirun_dry_run_hostfile_oversubscribe_and_nccl_debug(tmp_path):
  hostfile = tmp_path / "hosts"
  hostfile.write_text("n1 slots=2\n")
  env = job_env(NCCL_DEBUG="WARN")
  env.pop("LD_LIBRARY_PATH", None)
  cmd, _ = dry_run(MPIRUN_SH, "--np", "2", "--hostfile", str(hostfile), "--oversubscribe",
                   "--export", "OMP_NUM_THREADS=1", "--python", "/p/python",
                   "--script", "/s/rc.py", "--dry_run", env=env)
  assert cmd[cmd.index("OMP_NUM_THREADS=1") - 1] == "-x"
  assert "LD_LIBRARY_PATH" not in cmd  # unset here: not forwarded (Open MPI would warn)
  i = cmd.index("-hostfile")
  assert cmd[i + 1] == str(hostfile)
  assert "--oversubscribe" in cmd and "-H" not in cmd
  assert cmd[cmd.index("NCCL_DEBUG=WARN") - 1] == "-x"
  assert "btl_tcp_if_include" not in cmd and "plm_rsh_agent" not in cmd
  assert cmd[-2:] == ["/p/python", "/s/rc.py"]


@pytest.mark.parametrize("script", [HOROVODRUN_SH, MPIRUN_SH])
def test_launchers_help_and_bad_usage(script):
  proc = run(["bash", script, "--help"], timeout=60)
  assert_ok(proc)
  assert "--np" in proc.stdout and "--dry_run" in proc.stdout
  for args in ([], ["--np", "2", "--bogus"], ["--np", "0"], ["--np", "2", "positional"]):
    proc = run(["bash", script] + args + ["--dry_run"], timeout=60)
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert "error" in proc.stderr


@pytest.mark.parametrize("script", [HOROVODRUN_SH, MPIRUN_SH, SBATCH, DEMO],
                         ids=os.path.basename)
def test_every_launcher_help_is_usage_only(script):
  proc = run(["bash", script, "--help"], env=job_env(SLURM_NTASKS="8"), timeout=60)
  assert proc.returncode == 0 and proc.stderr == "", proc.stderr
  lines = proc.stdout.splitlines()
  assert lines[0] and lines[0][0].isupper(), lines[:3]  # a description first
  assert "--dry_run" in proc.stdout and "--help" in proc.stdout
  for line in lines:  # no code, no comment markers, no #SBATCH directives
    assert not line.startswith("#") and "set -euo" not in line, line


def test_launchers_share_one_core():
  """Each launcher sources launch_common.sh and defines none of its helpers again."""
  with open(LAUNCH_COMMON) as f:
    core = f.read()
  helpers = [line.split("()")[0] for line in core.splitlines() if line.endswith("() {")
             or "() {" in line and not line.startswith(" ")]
  assert {"usage", "die", "quote", "need", "default_python", "launch",
          "run_child"} <= set(helpers), helpers
  for script in (HOROVODRUN_SH, MPIRUN_SH, SBATCH, DEMO, os.path.join(SCRIPTS, "setup.sh")):
    with open(script) as f:
      text = f.read()
    assert "launch_common.sh" in text, script
    for name in helpers:
      assert "\n%s() {" % name not in text, (script, name)
    assert ".venv/bin/python\" ]" not in text, script  # the default python: core only


@pytest.mark.parametrize("child_status", [143, 0])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_run_child_passes_signals_on_to_the_job(tmp_path, sig, child_status):
  """A script that runs the job as a child (run_demo.sh) must not die alone, and a
  job it stopped is not reported done: a child that exits 0 on SIGTERM gives 128 +
  the number of the signal the script got."""
  marker = tmp_path / "child_got_term"
  child = ("trap 'echo TERM > %s; exit %d' TERM; echo started; "
           "while :; do sleep 0.1; done" % (marker, child_status))
  parent = tmp_path / "parent.sh"
  parent.write_text('set -euo pipefail\nsource "%s"\nrc=0\nrun_child bash -c "%s" || rc=$?\n'
                    'echo "child ended with $rc"\n' % (LAUNCH_COMMON, child))
  proc = subprocess.Popen(["bash", str(parent)], stdout=subprocess.PIPE, text=True,
                          start_new_session=True)
  try:
    assert proc.stdout.readline() == "started\n"
    os.kill(proc.pid, sig)
    out, _ = proc.communicate(timeout=10)
  finally:
    try:
      os.killpg(proc.pid, signal.SIGKILL)  # whatever is left (the child on failure)
    except ProcessLookupError:
      pass
  assert marker.exists(), "the child never got SIGTERM"
  assert out == "child ended with %d\n" % (child_status or 128 + sig)


# A rank that ends on SIGTERM with status 0 (as a job that saves and exits might):
# horovodrun over Gloo then reports success, however the job was stopped.
RANK_EXITING_0 = """import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("rank up", flush=True)
time.sleep(120)
"""
# A rank the signal ends with Python's default handling (killed by SIGTERM, a
# KeyboardInterrupt traceback for SIGINT): Horovod then raises its "processes exited
# with non-zero status" error. Seen in CI for RANK_EXITING_0 too, under load (the
# shell Horovod runs each rank in ended by the SIGTERM first).
RANK_ENDED_BY_IT = """import time
print("rank up", flush=True)
time.sleep(120)
"""


@requires("horovodrun")
@pytest.mark.parametrize("rank", [RANK_EXITING_0, RANK_ENDED_BY_IT],
                         ids=["ranks_exit_0", "ranks_ended_by_it"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_gloo_job_stopped_by_a_signal_never_exits_0(tmp_path, sig, rank):
  """run_horovodrun.sh --gloo exits 128 + the signal's number after a signal ended
  its ranks, with one line saying so: when every rank exits 0 (horovodrun itself
  would exit 0) and when the ranks end non-zero (Horovod raises, exit 1)."""
  script = tmp_path / "rank.py"
  script.write_text(rank)
  log_path = tmp_path / "log"
  with open(log_path, "w") as log:
    proc = subprocess.Popen(
        ["bash", HOROVODRUN_SH, "--np", "2", "--gloo", "--python", sys.executable,
         "--script", str(script)], cwd=ROOT, env=job_env(), stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    try:
      deadline = time.time() + HANG_GUARD
      while log_path.read_text().count("rank up") < 2:
        assert proc.poll() is None and time.time() < deadline, log_path.read_text()
        time.sleep(0.2)
      os.kill(proc.pid, sig)
      proc.wait(timeout=60)
    finally:
      try:
        os.killpg(proc.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
      proc.wait()
  text = log_path.read_text()
  assert proc.returncode == 128 + sig, text[-3000:]
  assert "stopped by %s before the job finished" % sig.name in text, text[-3000:]
  # Not Horovod's error for ranks that ended non-zero, with its traceback (a thread of
  # Horovod's may still print one of its own as the ranks go).
  assert "processes exited with non-zero status" not in text, text[-3000:]


def test_sbatch_help_and_dry_run_flag(tmp_path):
  env = slurm_env(tmp_path, LAUNCH="srun")
  env.pop("DRY_RUN")
  cmd, _ = dry_run(SBATCH, "--dry_run", "--seed=2", env=env)
  assert cmd[:3] == ["srun", "--mpi=pmix", "--ntasks=8"]
  assert cmd[-3:] == ["--do_train", "--output_dir=/shared/out", "--seed=2"]


# ------------------------------------------------------------------------- Slurm


def test_sbatch_syntax_and_header():
  assert_ok(run(["bash", "-n", SBATCH], timeout=60))
  with open(SBATCH) as f:
    text = f.read()
  for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "##SBATCH --gres=gpu:4",
               "#SBATCH --time="):
    assert line in text


def fake_scontrol(folder):
  """An `scontrol` that expands `show hostnames gpu[01-02]` (and nothing else)."""
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, "scontrol")
  with open(path, "w") as f:
    f.write('#!/bin/sh\n'
            '[ "$1 $2 $3" = "show hostnames gpu[01-02]" ] || { echo "bad: $*" >&2; exit 1; }\n'
            'printf "gpu01\\ngpu02\\n"\n')
  os.chmod(path, 0o755)
  return folder


def slurm_env(tmp_path, **extra):
  env = job_env(DRY_RUN="1", SLURM_NTASKS="8", SLURM_NTASKS_PER_NODE="4",
                SLURM_JOB_NODELIST="gpu[01-02]", SLURM_JOB_ID="77",
                RUN_ARGS="--do_train --output_dir=/shared/out")
  env["PATH"] = fake_scontrol(str(tmp_path / "bin")) + os.pathsep + env["PATH"]
  for key in ("NP", "LAUNCH", "HOSTFILE", "SRUN_MPI", "REPO", "PYTHON", "NCCL_DEBUG",
              "BTL_TCP_IF_INCLUDE"):
    env.pop(key, None)
  env.update(extra)
  return env


def test_sbatch_mpirun_dry_run_builds_hostfile(tmp_path):
  hostfile = str(tmp_path / "hosts")
  env = slurm_env(tmp_path, LAUNCH="mpirun", HOSTFILE=hostfile,
                  BTL_TCP_IF_INCLUDE="10.0.0.0/16")
  cmd, stdout = dry_run(SBATCH, "--seed=3", env=env)
  with open(hostfile) as f:
    assert f.read() == "gpu01 slots=4\ngpu02 slots=4\n"
  assert "gpu01 slots=4" in stdout and "gpu02 slots=4" in stdout
  assert cmd[0] == "mpirun"
  assert cmd[cmd.index("-np") + 1] == "8"
  assert cmd[cmd.index("-hostfile") + 1] == hostfile
  assert cmd[cmd.index("btl_tcp_if_include") + 1] == "10.0.0.0/16"
  assert "-bind-to" in cmd and "NCCL_DEBUG=INFO" in cmd
  assert cmd[-4:] == [RUN_CLASSIFIER, "--do_train", "--output_dir=/shared/out", "--seed=3"]


def test_sbatch_mpirun_np_override_and_tasks_per_node_fallback(tmp_path):
  hostfile = str(tmp_path / "hosts")
  env = slurm_env(tmp_path, LAUNCH="mpirun", HOSTFILE=hostfile, NP="6",
                  SLURM_TASKS_PER_NODE="3(x2)")
  env.pop("SLURM_NTASKS_PER_NODE")
  cmd, _ = dry_run(SBATCH, env=env)
  assert cmd[cmd.index("-np") + 1] == "6"
  with open(hostfile) as f:
    assert f.read() == "gpu01 slots=3\ngpu02 slots=3\n"


def test_sbatch_srun_dry_run(tmp_path):
  cmd, _ = dry_run(SBATCH, env=slurm_env(tmp_path, LAUNCH="srun"))
  assert cmd == ["srun", "--mpi=pmix", "--ntasks=8", "--kill-on-bad-exit=1", DEFAULT_PYTHON,
                 RUN_CLASSIFIER, "--do_train", "--output_dir=/shared/out"]
  cmd, _ = dry_run(SBATCH, env=slurm_env(tmp_path, SRUN_MPI="pmi2"))  # srun by default
  assert cmd[:3] == ["srun", "--mpi=pmi2", "--ntasks=8"]


def test_sbatch_outside_allocation_fails_clearly(tmp_path):
  env = slurm_env(tmp_path)
  env.pop("SLURM_NTASKS")
  proc = run(["bash", SBATCH], env=env, timeout=60)
  assert proc.returncode == 2 and "SLURM_NTASKS" in proc.stderr


# ---------------------------------------------- two hosts: two network namespaces


def ip(*args, check=True):
  return subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=60,
                        check=check)


def kill_netns_processes(ns):
  """SIGKILLs what this test left running in namespace `ns` (by pid)."""
  proc = ip("netns", "pids", ns, check=False)
  for pid in proc.stdout.split():
    try:
      os.kill(int(pid), signal.SIGKILL)
    except (ProcessLookupError, ValueError):
      pass


@pytest.fixture
def two_hosts():
  """Namespaces bhA<pid> (10.213.x.1) and bhB<pid> (10.213.x.2) joined by a veth pair."""
  if shutil.which("ip") is None:
    pytest.skip("`ip` (iproute2) is not installed: apt-get install -y iproute2")
  if shutil.which("unshare") is None:
    pytest.skip("`unshare` (util-linux) is not installed")
  pid = os.getpid()
  ns_a, ns_b = "bhA%d" % pid, "bhB%d" % pid
  veth_a, veth_b = "bhva%d" % pid, "bhvb%d" % pid
  x = pid % 250 + 1
  made = []
  tmp = tempfile.mkdtemp(prefix="bh", dir="/tmp")  # short: Open MPI puts sockets there
  try:
    for ns in (ns_a, ns_b):
      proc = ip("netns", "add", ns, check=False)
      if proc.returncode != 0:
        pytest.skip("cannot create network namespaces (`ip netns add`: %s)" %
                    proc.stderr.strip())
      made.append(ns)
    try:
      ip("link", "add", veth_a, "type", "veth", "peer", "name", veth_b)
      ip("link", "set", veth_a, "netns", ns_a)
      ip("link", "set", veth_b, "netns", ns_b)
      for ns, dev, host in ((ns_a, veth_a, 1), (ns_b, veth_b, 2)):
        ip("-n", ns, "addr", "add", "10.213.%d.%d/24" % (x, host), "dev", dev)
        ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", ns, "link", "set", dev, "up")
    except subprocess.CalledProcessError as e:
      pytest.skip("cannot join the namespaces with a veth pair (%s: %s)" % (
          " ".join(e.cmd), e.stderr.strip()))
    # Open MPI must reach its daemons and peers inside the namespaces only.
    assert "10.213.%d.2" % x in ip("-n", ns_b, "-4", "addr").stdout
    yield {"ns": (ns_a, ns_b), "ips": ("10.213.%d.1" % x, "10.213.%d.2" % x),
           "subnet": "10.213.%d.0/24" % x, "tmp": tmp}
  finally:
    for ns in made:
      kill_netns_processes(ns)
    for ns in made:
      ip("netns", "del", ns, check=False)
    if veth_a in ip("link", "show", check=False).stdout:  # left behind in this namespace
      ip("link", "del", veth_a, check=False)
    shutil.rmtree(tmp, ignore_errors=True)


@requires("mpirun")
@requires("horovodrun")
def test_mpirun_launcher_on_two_hosts(tiny_task, tmp_path, two_hosts):
  """4 ranks, 2 per "host": mpirun in namespace A, daemons started in B by the rsh agent."""
  ns_a, ns_b = two_hosts["ns"]
  ip_a, ip_b = two_hosts["ips"]
  out = str(tmp_path / "out")
  env = job_env(
      NETNS_RSH_MAP="%s=%s,%s=%s" % (ip_a, ns_a, ip_b, ns_b),
      NETNS_RSH_TMPBASE=two_hosts["tmp"], TMPDIR=os.path.join(two_hosts["tmp"], ns_a))
  os.makedirs(env["TMPDIR"])
  # Namespace A with its own hostname (as the agent gives B): Open MPI tells nodes
  # apart by hostname.
  enter_a = ["ip", "netns", "exec", ns_a, "unshare", "--uts", "sh", "-c",
             'hostname "$0" && exec "$@"', ns_a]
  proc = run(enter_a + [
      "bash", MPIRUN_SH, "--np", "4", "--hosts", "%s:2,%s:2" % (ip_a, ip_b),
      "--rsh_agent", RSH_AGENT, "--btl_tcp_if_include", two_hosts["subnet"], "--"] +
      classifier_args(tiny_task, out, "--do_train", "--train_batch_size=4",
                      "--num_train_epochs=1"), env=env, timeout=HANG_GUARD_4)
  assert_ok(proc)
  states = train_states(out, 4)
  # 101 examples, global batch 4 x 4, 1 epoch: int(101 / 16) = 6 steps.
  check_same_step(states, size=4, steps=6)
  assert {s["cross_rank"] for s in states} == {0, 1}, states  # ranks on both hosts
  assert [(s["cross_rank"], s["local_rank"], s["local_size"]) for s in states] == [
      (0, 0, 2), (0, 1, 2), (1, 0, 2), (1, 1, 2)], states


@requires("horovodrun")
def test_tests_horovodrun_answers_the_build_check_as_horovod_does():
  """tests/horovodrun_checked_once.py (conftest's "horovodrun") runs Horovod's
  launcher; a controller missing from --built fails as under `horovodrun`."""
  shim = [sys.executable, os.path.join(ROOT, "tests", "horovodrun_checked_once.py")]
  ran = subprocess.run(shim + ["--built=gloo", "-np", "2", "--gloo", sys.executable, "-c",
                               "import os; print('rank', os.environ['HOROVOD_RANK'])"],
                       capture_output=True, text=True, timeout=120)
  assert ran.returncode == 0, ran.stderr[-3000:]
  assert "rank 0" in ran.stdout and "rank 1" in ran.stdout, ran.stdout
  refused = subprocess.run(shim + ["--built=mpi", "-np", "2", "--gloo", sys.executable,
                                   "-c", "pass"], capture_output=True, text=True,
                           timeout=120)
  assert refused.returncode != 0
  assert "Gloo support has not been built" in refused.stderr, refused.stderr[-3000:]
