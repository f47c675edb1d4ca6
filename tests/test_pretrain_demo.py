"""Smoke test of the pretraining job: scripts/run_pretrain_demo.sh, tiny, 2 processes."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import hf_fixtures
from conftest import JOB_TIMEOUT, ROOT, requires

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import pretrain_demo  # pylint: disable=wrong-import-position

SCRIPT = os.path.join(ROOT, "scripts", "run_pretrain_demo.sh")
# A 1-layer, hidden-32 model; 60 corpus documents, 400 reviews, a few steps
# (4 of phase 1, 2 of phase 2).
TINY_MODEL = {"HIDDEN": "32", "LAYERS": "1", "HEADS": "2", "FFN": "64"}
TINY_FLAGS = ["--skip_setup", "--np", "2", "--controller", "gloo", "--max_examples", "400",
              "--max_documents", "60", "--dupe_factor", "1", "--pretrain_seq_length", "32",
              "--pretrain_steps", "4", "--phase2_steps", "2", "--pretrain_batch", "8",
              "--max_seq_length", "32",
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


def only_dir(output_dir, prefix, part=""):
  """The one folder of `output_dir` named `prefix`... with `part` in its name
  (with no part: the one without -step or -phase2- in its name)."""
  found = [d for d in os.listdir(output_dir) if d.startswith(prefix) and
           (part in d if part else "-step" not in d and "-phase2-" not in d)]
  assert len(found) == 1, found
  return os.path.join(output_dir, found[0])


def read(path):
  with open(path, encoding="utf-8") as f:
    return f.read()


def word_embeddings(checkpoint):
  return tf.train.load_variable(checkpoint, "bert/embeddings/word_embeddings")


@requires("horovodrun")
def test_pretrain_demo_runs_every_stage_then_reuses_the_checkpoint(tmp_path):
  out = str(tmp_path / "out")
  proc = run_demo(out, "--pretrain_save_steps", "2", "--curve_steps", "2")
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert stage_status(out) == {
      "data": "ran", "corpus": "ran", "records": "ran", "pretrain": "ran",
      "records-phase2": "ran", "pretrain-phase2": "ran",
      "finetune-pretrained-seed1": "ran", "finetune-scratch-seed1": "ran",
      "finetune-step2-seed1": "ran", "baseline": "ran"}
  summary = proc.stdout.split("== bert-horovod pretraining demo ==")[1]
  for line in ("from the pretrained model", "from random weights",
               "char 1-3-gram baseline       test", "masked_lm_accuracy",
               "phase 2:", "accuracy against pretraining", "step       0",
               "step       2", "step       4", "+ phase 2: 2 steps"):
    assert line in summary, summary
  # Every fine-tuning batches reviews of similar length (the default).
  finetunes = [l for l in proc.stdout.splitlines()
               if l.startswith("[pretrain-demo] stage finetune-")]
  assert len(finetunes) == 3 and all(" --group_by_length" in l for l in finetunes), finetunes
  numbers = json.load(open(os.path.join(out, "pretrain_summary.json")))
  for key in ("pretrained_test_accuracy", "scratch_test_accuracy"):
    assert len(numbers[key]) == 1 and 0.0 <= numbers[key][0] <= 1.0
  assert 0.0 <= numbers["baseline_test_accuracy"] <= 1.0

  # Pretraining ran under horovodrun with 2 processes and reached its last step.
  pretrain_dir = only_dir(out, "pretrain-")
  metrics = json.load(open(os.path.join(pretrain_dir, "train_metrics.json")))
  assert metrics["processes"] == 2 and metrics["steps_run"] == 4
  checkpoint = os.path.join(pretrain_dir, "model.ckpt-4")
  # Phase 2 starts from that checkpoint, on sequences of the fine-tuning length.
  phase2_dir = only_dir(out, "pretrain-", "-phase2-")
  assert phase2_dir.startswith(pretrain_dir + "-phase2-")
  np.testing.assert_array_equal(word_embeddings(os.path.join(phase2_dir, "model.ckpt-0")),
                                word_embeddings(checkpoint))
  with open(os.path.join(phase2_dir, "train_metrics.json")) as f:
    assert json.load(f)["steps_run"] == 2
  with open(os.path.join(phase2_dir, "settings.txt")) as f:
    assert "steps=2\n" in f.read()
  # The fine-tuning from the end of phase 2 starts from its weights; the other does not.
  start = word_embeddings(os.path.join(only_dir(out, "finetune-pretrained-", "-phase2-"),
                                       "model.ckpt-0"))
  np.testing.assert_array_equal(start, word_embeddings(os.path.join(phase2_dir,
                                                                    "model.ckpt-2")))
  assert not np.array_equal(start, word_embeddings(checkpoint))
  scratch = word_embeddings(os.path.join(only_dir(out, "finetune-scratch-"), "model.ckpt-0"))
  assert not np.array_equal(scratch, start)
  # The curve's fine-tuning starts from the step-2 checkpoint, which differs from step 4.
  step2 = word_embeddings(os.path.join(only_dir(out, "finetune-pretrained-", "-step2-"),
                                       "model.ckpt-0"))
  np.testing.assert_array_equal(step2, word_embeddings(os.path.join(pretrain_dir,
                                                                    "model.ckpt-2")))
  assert not np.array_equal(step2, start)
  assert len(numbers["curve_test_accuracy"]["2"]) == 1
  # Both fine-tunings read the corpus vocab (one embedding row per token).
  with open(os.path.join(out, "data", "pretrain", "vocab.txt")) as f:
    assert start.shape == (sum(1 for _ in f), 32)

  # A re-run with one more seed only fine-tunes that seed: the checkpoints and the
  # first seed's fine-tunings are reused as they are; the summary means both seeds.
  mtime = os.path.getmtime(checkpoint + ".index")
  proc = run_demo(out, "--seeds", "1,2")
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  status = stage_status(out)
  assert (status["records"] == status["pretrain"] == status["records-phase2"] ==
          status["pretrain-phase2"] == status["baseline"] == "cached")
  assert status["finetune-pretrained-seed1"] == status["finetune-scratch-seed1"] == "cached"
  assert status["finetune-pretrained-seed2"] == status["finetune-scratch-seed2"] == "ran"
  assert "run_pretraining.py" not in proc.stdout
  assert os.path.getmtime(checkpoint + ".index") == mtime
  assert only_dir(out, "pretrain-") == pretrain_dir
  numbers = json.load(open(os.path.join(out, "pretrain_summary.json")))
  assert len(numbers["pretrained_test_accuracy"]) == len(numbers["scratch_test_accuracy"]) == 2

  # From a Hugging Face model: same data and records (cached), its size and weights.
  check_init_from(out, str(tmp_path / "hf"))


# A tiny Hugging Face model of another size than TINY_MODEL; its vocab shares some
# tokens with the corpus vocab.
HF_CONFIG = dict(hf_fixtures.TINY, vocab_size=9, hidden_size=16, num_hidden_layers=2,
                 intermediate_size=32, max_position_embeddings=64)
HF_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "的", "hello", "是", "不"]


def check_init_from(out, hf_dir):
  """--init_from: converted for the corpus vocab, phase 1 starts from its weights."""
  tensors, google = hf_fixtures.tiny_tensors(config=HF_CONFIG)
  hf_fixtures.write_hf_model(hf_dir, tensors, HF_CONFIG, HF_VOCAB)
  proc = run_demo(out, "--phase2_steps", "0", "--init_from", hf_dir, "--pooling", "mean")
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  status = stage_status(out)
  assert status["convert"] == status["pretrain"] == "ran"
  assert status["records"] == status["baseline"] == "cached"
  assert status["finetune-pretrained-seed1"] == status["finetune-scratch-seed1"] == "ran"
  init_key = os.path.basename(only_dir(out, "init-"))[len("init-"):]
  pretrain_dirs = [d for d in os.listdir(out) if d.startswith("pretrain-") and
                   "-phase2-" not in d and "-step" not in d and
                   "init=%s\n" % init_key in read(os.path.join(out, d, "settings.txt"))]
  assert len(pretrain_dirs) == 1, pretrain_dirs
  start = os.path.join(out, pretrain_dirs[0], "model.ckpt-0")
  # Without phase 2 the pretrained fine-tuning starts from phase 1's last checkpoint.
  key = pretrain_dirs[0][len("pretrain-"):]
  finetuned = [d for d in os.listdir(out) if d.startswith("finetune-pretrained-%s-" % key)]
  assert len(finetuned) == 1 and "-phase2-" not in finetuned[0], finetuned
  np.testing.assert_array_equal(
      word_embeddings(os.path.join(out, finetuned[0], "model.ckpt-0")),
      word_embeddings(os.path.join(out, pretrain_dirs[0], "model.ckpt-4")))
  name = "bert/encoder/layer_1/output/dense/kernel"
  np.testing.assert_array_equal(tf.train.load_variable(start, name), google[name])
  with open(os.path.join(out, "data", "pretrain", "vocab.txt"), encoding="utf-8") as f:
    vocab = [line.rstrip("\n") for line in f]
  table = word_embeddings(start)
  assert table.shape == (len(vocab), 16)
  for token in ("[CLS]", "的", "是"):
    np.testing.assert_array_equal(table[vocab.index(token)],
                                  google["bert/embeddings/word_embeddings"][
                                      HF_VOCAB.index(token)])
  # The other rows: mapped from their contexts in the corpus (on the model's scale,
  # standard normal here), not drawn from the truncated normal (|x| <= 2 x 0.02).
  assert "from their contexts in %s" % os.path.join(out, "data", "pretrain",
                                                   "corpus.txt") in proc.stdout
  new_rows = table[[i for i, token in enumerate(vocab) if token not in HF_VOCAB]]
  assert np.mean(np.abs(new_rows).max(axis=1) > 0.04) > 0.5
  # Fine-tuning from random weights has the model's size too.
  scratch = [d for d in os.listdir(out) if d.startswith("finetune-scratch-") and
             word_embeddings(os.path.join(out, d, "model.ckpt-0")).shape[1] == 16]
  assert len(scratch) == 1, scratch
  # --pooling reaches both fine-tunings (and only this run's: the others are cls).
  poolings = {d: read(os.path.join(out, d, "pooling.txt")) for d in os.listdir(out)
              if d.startswith("finetune-")}
  assert sorted(poolings.values()).count("mean\n") == 2, poolings
  assert poolings[scratch[0]] == "mean\n"


@pytest.mark.parametrize("option,value,message", [
    ("--optimizer", "sgd", "--optimizer must be lamb or adamw, got 'sgd'"),
    ("--whole_word_mask", "yes", "--whole_word_mask must be 0 or 1, got 'yes'"),
    ("--pooling", "max", "--pooling must be cls or mean, got 'max'"),
    ("--group_by_length", "yes", "--group_by_length must be 0 or 1, got 'yes'"),
    ("--init_from", "/nonexistent", "--init_from /nonexistent has no model.safetensors"),
    ("--curve_steps", "1500", "--curve_steps must be multiples of --pretrain_save_steps "
     "(1000) below --pretrain_steps (12000) (or equal to it with phase 2), got '1500'"),
    ("--curve_steps", "13000", "--curve_steps must be multiples of --pretrain_save_steps "
     "(1000) below --pretrain_steps (12000) (or equal to it with phase 2), got '13000'")])
def test_pretrain_demo_rejects_a_bad_option(tmp_path, option, value, message):
  proc = subprocess.run(["bash", SCRIPT, "--skip_setup", "--output_dir", str(tmp_path),
                         option, value], cwd=ROOT, capture_output=True, text=True,
                        timeout=60)
  assert proc.returncode == 2
  assert "run_pretrain_demo.sh: error: " + message in proc.stderr


def test_pretrain_demo_curve_needs_phase2_for_the_last_step(tmp_path):
  proc = subprocess.run(["bash", SCRIPT, "--skip_setup", "--output_dir", str(tmp_path),
                         "--phase2_steps", "0", "--curve_steps", "12000"], cwd=ROOT,
                        capture_output=True, text=True, timeout=60)
  assert proc.returncode == 2
  assert "got '12000'" in proc.stderr


def write_finetuning(folder, dev_accuracy, test_labels, predicted):
  """The files run_classifier.py leaves in its output folder (labels 0/1)."""
  os.makedirs(folder)
  with open(os.path.join(folder, "label_list.txt"), "w") as f:
    f.write("0\n1\n")
  with open(os.path.join(folder, "eval_results.txt"), "w") as f:
    f.write("eval_accuracy = %s\neval_loss = 0.5\nglobal_step = 10\n" % dev_accuracy)
  with open(os.path.join(folder, "test_results.tsv"), "w") as f:
    f.writelines("%.1f\t%.1f\n" % ((0.1, 0.9) if p == "1" else (0.9, 0.1))
                 for p in predicted)
  return folder


def write_test_file(tmp_path, labels):
  test_file = str(tmp_path / "test.tsv")
  with open(test_file, "w") as f:
    f.writelines("%s\ttext %d\n" % (y, i) for i, y in enumerate(labels))
  return test_file


def write_train_metrics(folder, steps_run, seconds):
  """The train_metrics.json of a run_pretraining.py run of `steps_run` steps."""
  os.makedirs(folder)
  with open(os.path.join(folder, "train_metrics.json"), "w") as f:
    json.dump({"steps_run": steps_run, "total_train_time_s": seconds, "steps_timed": 1,
               "examples_per_sec_global": 1.0, "examples_per_sec_per_process": 0.5,
               "processes": 2, "global_batch": 4}, f)
  return folder


def test_summary_means_over_seeds_and_notes_a_skipped_baseline(tmp_path):
  labels = ["1", "0", "1", "0"]
  test_file = write_test_file(tmp_path, labels)
  pretrained = [write_finetuning(str(tmp_path / "p1"), 0.9, labels, "1010"),
                write_finetuning(str(tmp_path / "p2"), 0.8, labels, "1011")]
  scratch = [write_finetuning(str(tmp_path / "s1"), 0.6, labels, "1111"),
             write_finetuning(str(tmp_path / "s2"), 0.6, labels, "0000")]
  times = str(tmp_path / "times.tsv")
  with open(times, "w") as f:
    f.write("pretrain\tcached\t0\tbuilt in 3600 s\nfinetune-pretrained-seed1\tran\t40\t\n")
  text, numbers = pretrain_demo.summary_text(test_file, str(tmp_path / "none"), pretrained,
                                             scratch, "", times)
  assert numbers["pretrained_test_accuracy"] == [1.0, 0.75]
  assert numbers["scratch_test_accuracy"] == [0.5, 0.5]
  assert numbers["baseline_test_accuracy"] is None
  assert "from the pretrained model    test 0.8750  (dev 0.8500; 2 seed(s): 1.0000, 0.7500)" \
      in text
  assert "char 1-3-gram baseline       skipped (no scikit-learn)" in text
  assert "pretraining gain:            +37.50 points" in text
  assert "pretrain                     cached       0 s  built in 3600 s" in text
  assert text.splitlines()[-1].split() == ["total", "40", "s"]


def test_summary_curve_goes_from_random_weights_to_the_last_checkpoint(tmp_path):
  labels = ["1", "0", "1", "0"]
  test_file = write_test_file(tmp_path, labels)
  pretrain_dir = write_train_metrics(str(tmp_path / "pretrain"), 100, 600.0)
  last = [write_finetuning(str(tmp_path / "p1"), 0.9, labels, "1010")]
  scratch = [write_finetuning(str(tmp_path / "s1"), 0.6, labels, "1111")]
  middle = write_finetuning(str(tmp_path / "m1"), 0.7, labels, "1011")
  times = str(tmp_path / "times.tsv")
  open(times, "w").close()
  curve = pretrain_demo.parse_curve(["50=" + middle])
  text, numbers = pretrain_demo.summary_text(test_file, pretrain_dir, last, scratch, "",
                                             times, curve, 100)
  assert numbers["curve_test_accuracy"] == {"50": [0.75]}
  rows = text.split("accuracy against pretraining")[1].splitlines()[1:4]
  assert [r.split()[:6] for r in rows] == [
      ["step", "0", "0.0", "min", "test", "0.5000"],
      ["step", "50", "5.0", "min", "test", "0.7500"],
      ["step", "100", "10.0", "min", "test", "1.0000"]]
  # With phase 2 the last row adds its steps and measured time.
  phase2_dir = write_train_metrics(str(tmp_path / "phase2"), 20, 120.0)
  text, _ = pretrain_demo.summary_text(test_file, pretrain_dir, last, scratch, "",
                                       times, curve, 100, phase2_dir)
  assert "phase 2:       " + phase2_dir in text
  last_row = text.split("accuracy against pretraining")[1].splitlines()[3]
  assert last_row.split()[:6] == ["step", "100", "12.0", "min", "test", "1.0000"]
  assert last_row.endswith("+ phase 2: 20 steps")
  with pytest.raises(ValueError, match="expected STEP=FOLDER"):
    pretrain_demo.parse_curve(["fifty=" + middle])


def test_config_sets_the_model_size_and_enough_positions(tmp_path):
  path = str(tmp_path / "bert_config.json")
  with open(path, "w") as f:
    json.dump({"vocab_size": 99, "hidden_size": 256, "max_position_embeddings": 256}, f)
  assert pretrain_demo.main(["config", "--bert_config_file", path, "--hidden_size", "32",
                             "--num_hidden_layers", "1", "--num_attention_heads", "2",
                             "--intermediate_size", "64", "--min_positions", "512"]) == 0
  config = json.load(open(path))
  assert config == {"vocab_size": 99, "hidden_size": 32, "num_hidden_layers": 1,
                    "num_attention_heads": 2, "intermediate_size": 64,
                    "max_position_embeddings": 512}
