"""`horovodrun` for the tests' jobs, with its build check answered once per worker.

  python tests/horovodrun_checked_once.py --built=gloo,mpi -np 2 --gloo python ...

Runs Horovod's own launcher in this process (`horovod.runner.launch.run_commandline`,
all that the `horovodrun` command runs) with horovodrun's arguments. Before it starts
a rank, horovodrun asks whether Horovod was built with the controller by importing
`horovod.tensorflow` (all of TensorFlow) in a forked child: ~3 s of a core on every
launch, a fifth of the CPU of a tiny test job. Here `--built` gives the answer, which
tests/conftest.py asks Horovod once per test process (`controllers_built`), so a
controller that is not built fails as it does under `horovodrun`. The launcher scripts'
tests (test_launchers.py, test_stop_job.py, the demos, the benchmark) run the real
`horovodrun` command, check included.
"""

import subprocess
import sys

# Horovod: the build check horovodrun makes before every launch (hvd.gloo_built(),
# hvd.mpi_built()), made once here.
PROBE = ("import horovod.tensorflow as hvd; print(','.join("
         "c for c in ('gloo', 'mpi') if getattr(hvd, c + '_built')()))")


def controllers_built(python):
  """The controllers that Horovod under `python` was built with, e.g. "gloo,mpi"."""
  lines = subprocess.run([python, "-c", PROBE], capture_output=True, text=True,
                         check=True, timeout=300).stdout.strip().splitlines()
  return lines[-1] if lines else ""


def main(argv):
  built = set(argv[1].split("=", 1)[1].split(","))
  # Imported here: the probe above runs in other processes.
  from horovod.runner import launch  # pylint: disable=import-outside-toplevel
  launch.gloo_built = lambda verbose=False: "gloo" in built
  launch.mpi_built = lambda verbose=False: "mpi" in built
  sys.argv = ["horovodrun"] + argv[2:]
  return launch.run_commandline()


if __name__ == "__main__":
  sys.exit(main(sys.argv))
