"""Smoke test of the pretraining job: scripts/run_pretrain_demo.sh, tiny, 2 processes."""

import json
import os
import subprocess

import numpy as np
import tensorflow as tf

from conftest import JOB_TIMEOUT, ROOT, requires

SCRIPT = os.path.join(ROOT, "scripts", "run_pretrain_demo.sh")
# A 1-layer, hidden-32 model; 60 corpus documents, 400 reviews, a few steps.
TINY_MODEL = {"HIDDEN": "32", "LAYERS": "1", "HEADS": "2", "FFN": "64"}
TINY_FLAGS = ["--skip_setup", "--np", "2", "--controller", "gloo", "--max_examples", "400",
              "--max_documents", "60", "--dupe_factor", "1", "--pretrain_seq_length", "32",
              "--pretrain_steps", "4", "--pretrain_batch", "8", "--max_seq_length", "32",
              "--batch", "8", "--max_train_steps", "4"]


def run_demo(output_dir, *extra):
  env = dict(os.environ, **TINY_MODEL)
  return subprocess.run(["bash", SCRIPT, "--output_dir", output_dir] + TINY_FLAGS +
                        list(extra) + ["--", "--max_eval_steps=5"],
                        cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=2 * JOB_TIMEOUT)


def stage_status(output_dir):
  with open(os.path.join(output_dir, "pretrain_summary.json")) as f:
    return json.load(f)["stage_status"]


def only_dir(output_dir, prefix):
  found = [d for d in os.listdir(output_dir) if d.startswith(prefix)]
  assert len(found) == 1, found
  return os.path.join(output_dir, found[0])


def word_embeddings(checkpoint):
  return tf.train.load_variable(checkpoint, "bert/embeddings/word_embeddings")


@requires("horovodrun")
def test_pretrain_demo_runs_every_stage_then_reuses_the_checkpoint(tmp_path):
  out = str(tmp_path / "out")
  proc = run_demo(out)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert stage_status(out) == {
      "data": "ran", "corpus": "ran", "records": "ran", "pretrain": "ran",
      "finetune-pretrained-seed1": "ran", "finetune-scratch-seed1": "ran",
      "baseline": "ran"}
  summary = proc.stdout.split("== bert-horovod pretraining demo ==")[1]
  for line in ("from the pretrained model", "from random weights",
               "char 1-3-gram baseline       test", "masked_lm_accuracy"):
    assert line in summary, summary
  numbers = json.load(open(os.path.join(out, "pretrain_summary.json")))
  for key in ("pretrained_test_accuracy", "scratch_test_accuracy"):
    assert len(numbers[key]) == 1 and 0.0 <= numbers[key][0] <= 1.0
  assert 0.0 <= numbers["baseline_test_accuracy"] <= 1.0

  # Pretraining ran under horovodrun with 2 processes and reached its last step.
  pretrain_dir = only_dir(out, "pretrain-")
  metrics = json.load(open(os.path.join(pretrain_dir, "train_metrics.json")))
  assert metrics["processes"] == 2 and metrics["steps_run"] == 4
  checkpoint = os.path.join(pretrain_dir, "model.ckpt-4")
  # The fine-tuning from the checkpoint starts from its weights; the other does not.
  start = word_embeddings(os.path.join(only_dir(out, "finetune-pretrained-"), "model.ckpt-0"))
  np.testing.assert_array_equal(start, word_embeddings(checkpoint))
  scratch = word_embeddings(os.path.join(only_dir(out, "finetune-scratch-"), "model.ckpt-0"))
  assert not np.array_equal(scratch, start)
  # Both fine-tunings read the corpus vocab (one embedding row per token).
  with open(os.path.join(out, "data", "pretrain", "vocab.txt")) as f:
    assert start.shape == (sum(1 for _ in f), 32)

  # A re-run with another seed only fine-tunes: the checkpoint is reused as it is.
  mtime = os.path.getmtime(checkpoint + ".index")
  proc = run_demo(out, "--seeds", "2")
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  status = stage_status(out)
  assert status["records"] == status["pretrain"] == status["baseline"] == "cached"
  assert status["finetune-pretrained-seed2"] == status["finetune-scratch-seed2"] == "ran"
  assert "run_pretraining.py" not in proc.stdout
  assert os.path.getmtime(checkpoint + ".index") == mtime
  assert only_dir(out, "pretrain-") == pretrain_dir


def test_pretrain_demo_rejects_a_bad_option(tmp_path):
  proc = subprocess.run(["bash", SCRIPT, "--skip_setup", "--output_dir", str(tmp_path),
                         "--optimizer", "sgd"], cwd=ROOT, capture_output=True, text=True,
                        timeout=60)
  assert proc.returncode == 2
  assert "run_pretrain_demo.sh: error: --optimizer must be lamb or adamw, got 'sgd'" in \
      proc.stderr
