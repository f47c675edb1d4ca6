"""The suite's own scheduling under pytest-xdist (scripts/run_tests.sh): the files
that conftest.xdist_group names keep their tests in one worker, the others spread."""

import os
import re
import shutil
import subprocess
import sys

from conftest import ROOT

TRIVIAL_TESTS = "".join(
    "def test_%d():\n  import time\n  time.sleep(0.2)\n\n" % n for n in range(6))


def test_grouped_files_stay_in_one_worker(tmp_path):
  tests = tmp_path / "tests"
  tests.mkdir()
  shutil.copy(os.path.join(ROOT, "tests", "conftest.py"), tests / "conftest.py")
  for name in ("test_export.py", "test_demo.py", "test_pretrain_demo.py", "test_plain.py"):
    (tests / name).write_text(TRIVIAL_TESTS)
  proc = subprocess.run(
      [sys.executable, "-m", "pytest", "-v", "-n", "2", "--dist", "loadgroup",
       "-p", "no:cacheprovider", str(tests)],
      cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stdout[-3000:]
  ran = re.findall(r"\[(gw\d)\] \[ *\d+%\] PASSED tests/(test_\w+)\.py::test_\d(@\S+)?",
                   proc.stdout)
  assert len(ran) == 24, proc.stdout[-3000:]
  workers = {}
  for worker, name, group in ran:
    workers.setdefault(name, set()).add(worker)
    expected = {"test_export": "@test_export.py", "test_demo": "@snownlp-cache",
                "test_pretrain_demo": "@snownlp-cache", "test_plain": ""}[name]
    assert group == expected, (name, group)
  assert len(workers["test_export"]) == 1, workers
  assert workers["test_demo"] == workers["test_pretrain_demo"], workers
  assert len(workers["test_demo"]) == 1, workers
