"""`horovodrun` whose exit status tells a stopped job from a finished one.

  python scripts/gloo_horovodrun.py -np 2 --gloo python run_classifier.py ...

Takes horovodrun's arguments and runs Horovod's own launcher in this process
(`horovod.runner.launch.run_commandline`, what the `horovodrun` command runs), so
SIGINT, SIGTERM and SIGKILL of this process end every rank exactly as they do for
`horovodrun`. scripts/run_horovodrun.sh starts it for --gloo.

What it adds: over Gloo, Horovod 0.28.1 can report a job it stopped on SIGINT or
SIGTERM as a success (exit 0). Each rank's shell is reaped by two threads of its
middleman process at once; the one that loses reads status 0 (Python's rule for a
child already reaped), and when every rank reads 0, so does `horovodrun`. A job that
ends its ranks on SIGTERM with status 0 does the same. After such a signal this
launcher exits 128 + the signal number (130 for Ctrl-C, 143 for `kill`), as a shell
does, so that a caller (run_pretrain_demo.sh's next stage, a scheduler, `&&`) never
takes a stopped job for a finished one. Ranks that the signal ends non-zero make
Horovod raise its "processes exited with non-zero status" error instead; after a
signal that is the same stop, and the exit status the same.
"""

import os
import signal
import sys


def signals_received(read_fd):
  """Signal numbers written to the wakeup pipe `read_fd` so far, in order."""
  received = b""
  while True:
    try:
      chunk = os.read(read_fd, 256)
    except BlockingIOError:
      break
    if not chunk:
      break
    received += chunk
  return list(received)


def main(argv):
  from horovod.runner import launch  # pylint: disable=import-outside-toplevel

  # Python writes the number of every signal it handles to this pipe, whichever
  # handler runs: Horovod's own (SIGINT, SIGTERM once the ranks start) included.
  read_fd, write_fd = os.pipe()
  os.set_blocking(read_fd, False)
  os.set_blocking(write_fd, False)
  signal.set_wakeup_fd(write_fd)
  sys.argv = ["horovodrun"] + argv
  failure = None
  try:
    status = launch.run_commandline()
  except KeyboardInterrupt:  # Ctrl-C before Horovod took SIGINT over
    status = 128 + signal.SIGINT
  except RuntimeError as e:  # Horovod's "processes exited with non-zero status"
    status, failure = 1, e
  stops = [s for s in signals_received(read_fd) if s in (signal.SIGINT, signal.SIGTERM)]
  if stops:
    # Ranks a stop signal ended exit 0 (Horovod reports success) or non-zero (the
    # signal killed them or the shell around them: Horovod raises): stopped, either way.
    name = signal.Signals(stops[0]).name
    print("horovodrun: stopped by %s before the job finished; exit %d" %
          (name, 128 + stops[0]), file=sys.stderr)
    return 128 + stops[0]
  if failure is not None:
    raise failure
  return status or 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
