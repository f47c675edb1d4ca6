"""SavedModel export: run_classifier.py --export_dir, export.py and scripts/predict.py."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import (ROOT, VOCAB, classifier_args, export_probabilities, run_job,
                      write_task)
import export
import modeling

PREDICT = os.path.join(ROOT, "scripts", "predict.py")
TOL = 1e-5


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """One real single-process job: train, export, then predict the test set."""
  base = tmp_path_factory.mktemp("export")
  task = write_task(str(base / "task"))
  out = str(base / "out")
  export_dir = str(base / "serving" / "model")
  proc = run_job("python", 1, classifier_args(
      task, out, "--do_train", "--do_predict", "--train_batch_size=8",
      "--num_train_epochs=2", "--export_dir=" + export_dir))
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(os.path.join(out, "test_results.tsv")) as f:
    expected = np.array([[float(x) for x in line.split("\t")] for line in f
                         if line.strip()], dtype=np.float64)
  with open(os.path.join(out, "label_list.txt")) as f:
    labels = [l.strip() for l in f if l.strip()]
  return {"task": task, "out": out, "export_dir": export_dir, "expected": expected,
          "labels": labels, "stderr": proc.stderr}


def run_predict(*args, stdin=None):
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  return subprocess.run([sys.executable, PREDICT] + list(args), input=stdin, cwd=ROOT,
                        env=env, capture_output=True, text=True, timeout=240)


def parse_output(stdout, labels):
  """`label<TAB>p0<TAB>p1...` lines -> (labels, float64 [n, num_labels])."""
  rows = [line.split("\t") for line in stdout.splitlines()]
  assert all(len(r) == 1 + len(labels) for r in rows), stdout[:500]
  return [r[0] for r in rows], np.array([[float(x) for x in r[1:]] for r in rows])


def test_job_exports_and_predicts(trained):
  """The job exported and wrote one probability row per test.tsv line."""
  with open(os.path.join(trained["task"], "test.tsv")) as f:
    n = sum(1 for line in f if line.strip())
  assert trained["expected"].shape == (n, len(trained["labels"]))
  assert trained["labels"] == ["0", "1"]
  assert "exported SavedModel" in trained["stderr"]


def test_export_layout_is_self_contained(trained):
  export_dir = trained["export_dir"]
  assert os.path.isfile(os.path.join(export_dir, "saved_model.pb"))
  assert os.path.isdir(os.path.join(export_dir, "variables"))
  extra = os.path.join(export_dir, "assets.extra")
  with open(os.path.join(extra, "vocab.txt")) as f:
    assert f.read().split() == VOCAB
  with open(os.path.join(extra, "label_list.txt")) as f:
    assert f.read() == "0\n1\n"
  with open(os.path.join(extra, "export_config.json")) as f:
    assert json.load(f) == {"max_seq_length": 16, "do_lower_case": True,
                            "labels": ["0", "1"]}
  # The atomic write leaves no temporary or old directories beside the export.
  assert os.listdir(os.path.dirname(export_dir)) == ["model"]


def test_signature_in_process_matches_estimator_predictions(trained):
  """Calling the signature directly gives test_results.tsv's probabilities."""
  loaded = tf.saved_model.load(trained["export_dir"])
  signature = loaded.signatures["serving_default"]
  inputs = signature.structured_input_signature[1]
  assert sorted(inputs) == ["input_ids", "input_mask", "segment_ids"]
  assert all(s.dtype == tf.int32 and s.shape.as_list() == [None, 16]
             for s in inputs.values())
  assert list(signature.structured_outputs) == ["probabilities"]

  probs = export_probabilities(trained["export_dir"], trained["task"])
  assert probs.dtype == np.float32
  np.testing.assert_allclose(probs, trained["expected"], atol=TOL, rtol=0)
  np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)


def test_predict_script_tsv_file_matches_estimator(trained):
  proc = run_predict("--export_dir", trained["export_dir"], "--tsv", "--input",
                     os.path.join(trained["task"], "test.tsv"), "--batch_size", "7")
  assert proc.returncode == 0, proc.stderr
  labels, probs = parse_output(proc.stdout, trained["labels"])
  np.testing.assert_allclose(probs, trained["expected"], atol=TOL, rtol=0)
  assert labels == [trained["labels"][i] for i in trained["expected"].argmax(axis=1)]
  assert labels == [trained["labels"][i] for i in probs.argmax(axis=1)]


def test_predict_script_plain_text_from_stdin(trained):
  with open(os.path.join(trained["task"], "test.tsv")) as f:
    texts = [line.rstrip("\n").split("\t", 1)[1] for line in f if line.strip()]
  # Upper case is lowered (do_lower_case from export_config.json); no final newline.
  stdin = "\n".join(t.upper() for t in texts)
  proc = run_predict("--export_dir", trained["export_dir"], stdin=stdin)
  assert proc.returncode == 0, proc.stderr
  labels, probs = parse_output(proc.stdout, trained["labels"])
  np.testing.assert_allclose(probs, trained["expected"], atol=TOL, rtol=0)
  assert labels == [trained["labels"][i] for i in probs.argmax(axis=1)]


def test_predict_script_errors(trained, tmp_path):
  missing = str(tmp_path / "no_such_export")
  proc = run_predict("--export_dir", missing, "--input", "x.txt")
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      "predict.py: error: --export_dir=%s: no such directory" % missing]

  not_saved_model = tmp_path / "empty"
  not_saved_model.mkdir()
  proc = run_predict("--export_dir", str(not_saved_model), stdin="good\n")
  assert proc.returncode == 2
  assert "no saved_model.pb" in proc.stderr and str(not_saved_model) in proc.stderr

  proc = run_predict("--export_dir", trained["export_dir"], stdin="good movie\n\nbad\n")
  assert proc.returncode == 2 and proc.stdout == ""
  assert proc.stderr.strip() == "predict.py: error: <stdin>:2: empty line"

  bad_tsv = tmp_path / "bad.tsv"
  bad_tsv.write_text("1\tgood movie\nno tab here\n")
  proc = run_predict("--export_dir", trained["export_dir"], "--tsv", "--input",
                     str(bad_tsv))
  assert proc.returncode == 2
  assert "%s:2: expected 'label<TAB>text'" % bad_tsv in proc.stderr


def test_reexport_replaces_the_directory(trained):
  """Exporting again into the same directory replaces it cleanly (twice)."""
  export_dir = trained["export_dir"]
  config = modeling.BertConfig.from_json_file(
      os.path.join(trained["task"], "bert_config.json"))

  def export_checkpoint(checkpoint):
    stale = os.path.join(export_dir, "stale_marker")
    with open(stale, "w") as f:
      f.write("from the previous export\n")
    path = export.export_saved_model(
        bert_config=config, label_list=trained["labels"], checkpoint=checkpoint,
        export_dir=export_dir, max_seq_length=16,
        vocab_file=os.path.join(trained["task"], "vocab.txt"), do_lower_case=True)
    assert path == export_dir
    assert not os.path.exists(stale)
    # No .tmp-<pid> or .old-<pid> directory is left beside the export.
    assert os.listdir(os.path.dirname(export_dir)) == ["model"]
    return export_probabilities(export_dir, trained["task"])

  # The step-0 checkpoint (Estimator saves one before training) predicts
  # differently: the restore, not initialization, decides the weights.
  initial = os.path.join(trained["out"], "model.ckpt-0")
  assert os.path.exists(initial + ".index")
  probs = export_checkpoint(initial)
  assert np.abs(probs - trained["expected"]).max() > 10 * TOL

  probs = export_checkpoint(tf.train.latest_checkpoint(trained["out"]))
  np.testing.assert_allclose(probs, trained["expected"], atol=TOL, rtol=0)


def test_export_rejects_a_missing_checkpoint(tmp_path, tiny_task):
  config = modeling.BertConfig.from_json_file(os.path.join(tiny_task, "bert_config.json"))
  with pytest.raises(ValueError, match="checkpoint"):
    export.export_saved_model(config, ["0", "1"], str(tmp_path / "model.ckpt-1"),
                              str(tmp_path / "export"), 16,
                              os.path.join(tiny_task, "vocab.txt"), True)
  assert not os.path.exists(str(tmp_path / "export"))


def test_assets_extra_keep_a_unigram_vocab_as_json(tmp_path):
  """A .json (unigram) vocab is exported as vocab.json, and found again."""
  vocab = tmp_path / "pieces.json"
  vocab.write_text('{"model": "unigram"}\n', encoding="utf-8")
  export._write_assets_extra(str(tmp_path / "e"), ["0", "1"], 16, str(vocab), False)
  path, labels, config = export.load_assets_extra(str(tmp_path / "e"))
  assert os.path.basename(path) == "vocab.json" and labels == ["0", "1"]
  with open(path, encoding="utf-8") as f:
    assert f.read() == '{"model": "unigram"}\n'
  assert config["do_lower_case"] is False
