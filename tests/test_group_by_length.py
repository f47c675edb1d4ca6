"""--group_by_length: length buckets and trimmed batches (input_pipeline), and the
classifier computing the same predictions, in the input order, on short batches."""

import os
import random
import shutil

import numpy as np
import pytest
import tensorflow as tf

from conftest import (FILLER, NEGATIVE, POSITIVE, classifier_args, requires, run_job,
                      write_task)
from test_distributed import assert_ok, read_eval_results
import classifier_data
import input_pipeline

SEQ = 64


def varied_lines(n, seed):
  """`n` lines `label<TAB>text` of 1 to 40 words (one sentiment word)."""
  rng = random.Random(seed)
  lines = []
  for _ in range(n):
    label = rng.randint(0, 1)
    words = [rng.choice(FILLER) for _ in range(rng.choice([0, 1, 3, 10, 25, 39]))]
    words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE if label else NEGATIVE))
    lines.append("%d\t%s\n" % (label, " ".join(words)))
  return lines


def write_records(path, lengths):
  """TFRecords of classifier features padded to SEQ; example i's ids are i + 1."""
  with tf.io.TFRecordWriter(path) as writer:
    for i, length in enumerate(lengths):
      feature = classifier_data.InputFeatures(
          input_ids=[i + 1] * length + [0] * (SEQ - length),
          input_mask=[1] * length + [0] * (SEQ - length),
          segment_ids=[0] * SEQ, label_id=i % 2)
      writer.write(classifier_data._features_to_tf_example(feature).SerializeToString())


def batches(input_fn, count):
  return list(input_fn().take(count).as_numpy_iterator())


def test_trim_batch_keeps_the_longest_real_sequence_rounded_up():
  features = {"input_mask": tf.constant([[1] * 3 + [0] * 61, [1] * 17 + [0] * 47]),
              "input_ids": tf.ones([2, SEQ], tf.int32), "label_ids": tf.constant([0, 1])}
  trimmed = input_pipeline.trim_batch(features, ("input_ids", "input_mask"))
  assert trimmed["input_mask"].shape == (2, 32)  # 17 rounded up to 2 x 16
  assert trimmed["input_ids"].shape == (2, 32)
  assert trimmed["label_ids"].shape == (2,)
  full = {"input_mask": tf.ones([1, 60], tf.int32)}
  assert input_pipeline.trim_batch(full, ("input_mask",))["input_mask"].shape == (1, 60)


def test_training_batches_hold_one_length_bucket_each(tmp_path):
  rng = random.Random(3)
  lengths = [rng.randint(2, SEQ) for _ in range(200)]
  path = str(tmp_path / "train.tf_record")
  write_records(path, lengths)
  input_fn = classifier_data.file_based_input_fn_builder(
      path, SEQ, 8, is_training=True, shuffle_buffer=50, seed=1, group_by_length=True)
  seen = []
  for batch in batches(input_fn, 60):
    width = batch["input_mask"].shape[1]
    real = batch["input_mask"].sum(axis=1)
    assert batch["input_ids"].shape == (8, width) and width % 16 == 0
    # One bucket: every length in (width - 16, width].
    assert real.min() > width - 16 and real.max() <= width, (width, real)
    for ids, n in zip(batch["input_ids"], real):
      assert n == lengths[ids[0] - 1]  # the record's own prefix, nothing cut
      assert (ids[:n] == ids[0]).all() and (ids[n:] == 0).all()
    seen.extend(batch["input_ids"][:, 0])
  # 480 examples drawn from a stream of 200 repeated: each record comes back.
  assert len(set(seen)) > 190
  assert {b["input_mask"].shape[1] for b in batches(input_fn, 60)} == {16, 32, 48, 64}


def test_eval_batches_are_cut_but_keep_every_example_in_order(tmp_path):
  lengths = [3, 5, 2, 40, 7, 9, 4]
  path = str(tmp_path / "eval.tf_record")
  write_records(path, lengths)
  input_fn = classifier_data.file_based_input_fn_builder(
      path, SEQ, 3, is_training=False, group_by_length=True)
  got = batches(input_fn, 10)
  assert [b["input_mask"].shape[1] for b in got] == [16, 48, 16]
  assert [int(i) for b in got for i in b["input_ids"][:, 0]] == list(range(1, 8))


@pytest.fixture(scope="module")
def varied_task(tmp_path_factory):
  """A tiny task of texts of 1 to 40 words, and a model trained on it the default
  way (max_seq_length 64)."""
  base = tmp_path_factory.mktemp("grouped")
  task = write_task(str(base / "task"), dropout=0.0)
  for name, n, seed in (("train", 96, 1), ("dev", 30, 2), ("test", 30, 3)):
    with open(os.path.join(task, name + ".tsv"), "w") as f:
      f.writelines(varied_lines(n, seed))
  out = str(base / "plain")
  assert_ok(run_job("python", 1, classifier_args(
      task, out, "--do_train", "--do_eval", "--do_predict", "--max_seq_length=64",
      "--train_batch_size=8", "--num_train_epochs=2", "--eval_batch_size=4",
      "--predict_batch_size=4")))
  return str(base), task, out


def read_probabilities(out):
  with open(os.path.join(out, "test_results.tsv")) as f:
    return np.array([[float(x) for x in line.split("\t")] for line in f if line.strip()])


def test_grouped_eval_and_predict_match_the_padded_ones_in_input_order(varied_task):
  base, task, plain = varied_task
  out = os.path.join(base, "grouped_predict")
  shutil.copytree(plain, out)
  os.remove(os.path.join(out, "test_results.tsv"))
  os.remove(os.path.join(out, "eval_results.txt"))
  proc = run_job("python", 1, classifier_args(
      task, out, "--do_eval", "--do_predict", "--max_seq_length=64", "--group_by_length",
      "--eval_batch_size=4", "--predict_batch_size=4"))
  assert_ok(proc)
  expected, got = read_probabilities(plain), read_probabilities(out)
  assert got.shape == expected.shape == (30, 2)
  np.testing.assert_allclose(got, expected, atol=1e-5)
  plain_eval = read_eval_results(os.path.join(plain, "eval_results.txt"))
  grouped_eval = read_eval_results(os.path.join(out, "eval_results.txt"))
  assert grouped_eval["eval_accuracy"] == plain_eval["eval_accuracy"]
  assert abs(grouped_eval["eval_loss"] - plain_eval["eval_loss"]) < 1e-5


@requires("horovodrun")
def test_two_processes_train_on_grouped_batches(varied_task):
  """Ranks compute on batches of different widths in the same step (dense and
  sparse word-embedding exchange), and the model learns."""
  base, task, plain = varied_task
  for mode in ("dense", "sparse"):
    out = os.path.join(base, "grouped_two_" + mode)
    proc = run_job("horovodrun", 2, classifier_args(
        task, out, "--do_train", "--do_eval", "--max_seq_length=64", "--group_by_length",
        "--train_batch_size=4", "--num_train_epochs=8", "--pooling=mean",
        "--embedding_allreduce=" + mode))
    assert_ok(proc)
    results = read_eval_results(os.path.join(out, "eval_results.txt"))
    assert results["global_step"] == 96  # 96 / (2 x 4) x 8 epochs
    assert results["eval_accuracy"] >= 0.8, results
