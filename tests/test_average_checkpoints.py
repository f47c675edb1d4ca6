"""scripts/average_checkpoints.py: the mean of checkpoints, its checks, and a real soup."""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import ROOT, classifier_args, run_job

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import average_checkpoints  # pylint: disable=wrong-import-position
import convert_hf_checkpoint  # pylint: disable=wrong-import-position


def write_run(folder, weights, step, pooling="mean"):
  """A run_classifier-like output folder holding one checkpoint of `weights`."""
  os.makedirs(folder, exist_ok=True)
  values = dict(weights, global_step=np.int64(step))
  prefix = convert_hf_checkpoint.write_checkpoint(
      values, os.path.join(folder, "model.ckpt-%d" % step))
  tf.compat.v1.train.update_checkpoint_state(folder, prefix)
  for name, text in (("label_list.txt", "0\n1\n"), ("pooling.txt", pooling + "\n")):
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
      f.write(text)
  return prefix


def weights_of(seed, shape=(3, 2)):
  rng = np.random.RandomState(seed)
  return {"bert/w": rng.randn(*shape).astype(np.float32),
          "output_bias": rng.randn(2).astype(np.float32)}


def test_bfloat16_variables_are_averaged_too(tmp_path):
  bf16 = tf.bfloat16.as_numpy_dtype
  for name, value in (("a", 1.0), ("b", 2.0)):
    write_run(str(tmp_path / name), {"h": np.full(2, value, bf16)}, 5)
  out = str(tmp_path / "soup")
  assert average_checkpoints.main([str(tmp_path / "a"), str(tmp_path / "b"),
                                   "--output_dir", out]) == 0
  value = tf.train.load_checkpoint(out).get_tensor("h")
  assert value.dtype == bf16
  np.testing.assert_array_equal(value.astype(np.float32), [1.5, 1.5])


def test_mean_of_floats_last_step_and_head_files(tmp_path, capsys):
  a, b, c = (weights_of(s) for s in (1, 2, 3))
  write_run(str(tmp_path / "a"), a, 100)
  prefix_b = write_run(str(tmp_path / "b"), b, 200)
  write_run(str(tmp_path / "c"), c, 300)
  out = str(tmp_path / "soup")
  # A folder stands for its latest checkpoint; a prefix for itself.
  assert average_checkpoints.main([str(tmp_path / "a"), prefix_b, str(tmp_path / "c"),
                                   "--output_dir", out]) == 0
  assert "averaged 3 checkpoints (3 variables" in capsys.readouterr().out
  latest = tf.train.latest_checkpoint(out)
  assert latest == os.path.join(out, "model.ckpt-300")
  reader = tf.train.load_checkpoint(latest)
  for name in a:
    expected = (a[name].astype(np.float64) + b[name] + c[name]) / 3
    assert reader.get_tensor(name).dtype == np.float32
    np.testing.assert_allclose(reader.get_tensor(name), expected, rtol=1e-6)
  assert reader.get_tensor("global_step") == 300
  with open(os.path.join(out, "pooling.txt"), encoding="utf-8") as f:
    assert f.read() == "mean\n"
  assert os.path.exists(os.path.join(out, "label_list.txt"))


def one_error_line(capsys):
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith("average_checkpoints.py: error: "), err
  return err


@pytest.mark.parametrize("second, message", [
    (lambda: {"bert/w": weights_of(2)["bert/w"]}, "output_bias only in the first"),
    (lambda: weights_of(2, shape=(2, 3)), "bert/w is float32 [2, 3]"),
    (lambda: dict(weights_of(2), extra=np.zeros(1, np.float32)), "extra only in the second"),
])
def test_different_models_are_refused(tmp_path, capsys, second, message):
  write_run(str(tmp_path / "a"), weights_of(1), 10)
  write_run(str(tmp_path / "b"), second(), 10)
  out = str(tmp_path / "soup")
  assert average_checkpoints.main([str(tmp_path / "a"), str(tmp_path / "b"),
                                   "--output_dir", out]) == 2
  assert message in one_error_line(capsys)
  assert not os.path.exists(os.path.join(out, "checkpoint"))


def test_different_heads_and_bad_paths_are_refused(tmp_path, capsys):
  write_run(str(tmp_path / "a"), weights_of(1), 10, pooling="mean")
  write_run(str(tmp_path / "b"), weights_of(2), 10, pooling="cls")
  out = str(tmp_path / "soup")
  args = [str(tmp_path / "a"), str(tmp_path / "b"), "--output_dir", out]
  assert average_checkpoints.main(args) == 2
  assert "pooling.txt differ" in one_error_line(capsys)
  os.makedirs(str(tmp_path / "empty"))
  assert average_checkpoints.main([str(tmp_path / "a"), str(tmp_path / "empty"),
                                   "--output_dir", out]) == 2
  assert "empty: no checkpoint in this folder" in one_error_line(capsys)
  assert average_checkpoints.main([str(tmp_path / "a"), str(tmp_path / "nope"),
                                   "--output_dir", out]) == 2
  assert "nope: not a checkpoint" in one_error_line(capsys)
  assert average_checkpoints.main([str(tmp_path / "a"), str(tmp_path / "a"),
                                   "--output_dir", str(tmp_path / "a")]) == 2
  assert "holds an input checkpoint" in one_error_line(capsys)


def read_probabilities(folder):
  with open(os.path.join(folder, "test_results.tsv"), encoding="utf-8") as f:
    return np.array([[float(x) for x in line.split("\t")] for line in f])


def test_a_soup_of_real_fine_tunings_evaluates_and_predicts(tiny_task, tmp_path):
  runs = []
  for seed in (1, 2):
    out = str(tmp_path / ("seed%d" % seed))
    proc = run_job("python", 1, classifier_args(
        tiny_task, out, "--do_train", "--do_predict", "--train_batch_size=8",
        "--num_train_epochs=2", "--seed=%d" % seed, "--pooling=mean"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs.append(out)
  # A run averaged with itself is that run: the same predictions, to the bit.
  same = str(tmp_path / "same")
  assert average_checkpoints.main([runs[0], runs[0], "--output_dir", same]) == 0
  # Two seeds' fine-tunings averaged: one model that run_classifier.py evaluates.
  soup = str(tmp_path / "soup")
  assert average_checkpoints.main(runs + ["--output_dir", soup]) == 0
  for folder in (same, soup):
    proc = run_job("python", 1, classifier_args(tiny_task, folder, "--do_eval",
                                                "--do_predict", "--pooling=mean"))
    assert proc.returncode == 0, proc.stderr[-3000:]
  np.testing.assert_array_equal(read_probabilities(same), read_probabilities(runs[0]))
  soup_probs = read_probabilities(soup)
  assert soup_probs.shape == (20, 2)
  np.testing.assert_allclose(soup_probs.sum(axis=1), 1.0, rtol=1e-5)
  assert not np.allclose(soup_probs, read_probabilities(runs[0]))
  with open(os.path.join(soup, "eval_results.txt"), encoding="utf-8") as f:
    assert "global_step = 25" in f.read()
