"""Smoke test of the main job: scripts/run_demo.sh on a tiny subset, 2 processes."""

import os
import subprocess

from conftest import JOB_TIMEOUT, ROOT, requires


@requires("horovodrun")
def test_demo_smoke_two_processes(tmp_path):
  out = str(tmp_path / "out")
  env = dict(os.environ, HIDDEN="32", LAYERS="1", HEADS="2", FFN="64")
  proc = subprocess.run(
      ["bash", os.path.join(ROOT, "scripts", "run_demo.sh"), "--skip_setup", "--np", "2",
       "--max_examples", "400", "--max_train_steps", "6", "--max_seq_length", "32",
       "--batch", "8", "--data_dir", str(tmp_path / "data"), "--output_dir", out],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT)
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert "dev accuracy:" in proc.stdout and "test accuracy:" in proc.stdout
  for name in ("eval_results.txt", "test_results.tsv", "demo_summary.txt",
               "train_metrics.json", "label_list.txt"):
    assert os.path.exists(os.path.join(out, name)), name
  with open(os.path.join(out, "test_results.tsv")) as f:
    n_predictions = sum(1 for _ in f)
  with open(os.path.join(str(tmp_path / "data"), "test.tsv")) as f:
    assert n_predictions == sum(1 for _ in f) == 40
  summary = open(os.path.join(out, "demo_summary.txt")).read()
  accuracy = float(summary.split("test accuracy:")[1].split()[0])
  assert 0.0 <= accuracy <= 1.0
  assert "2 processes x 1 threads" in summary
