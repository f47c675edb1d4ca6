"""Multi-process tests: really launched through horovodrun and mpirun on a tiny BERT.

Each job is a few seconds of work; the timeouts are hang guards only.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from conftest import (classifier_args, export_probabilities, requires, run_job, tiny_config,
                      write_task)

tf1 = tf.compat.v1


def assert_ok(proc):
  assert proc.returncode == 0, "exit %d\n--- stdout\n%s\n--- stderr\n%s" % (
      proc.returncode, proc.stdout[-3000:], proc.stderr[-6000:])


def read_eval_results(path):
  result = {}
  with open(path) as f:
    for line in f:
      key, value = line.strip().split(" = ")
      result[key] = float(value)
  return result


def check_outputs(out_dir, num_test, num_steps):
  results = read_eval_results(os.path.join(out_dir, "eval_results.txt"))
  assert set(results) >= {"eval_accuracy", "eval_loss", "eval_f1", "global_step"}
  assert results["global_step"] == num_steps
  with open(os.path.join(out_dir, "test_results.tsv")) as f:
    rows = [[float(x) for x in line.split("\t")] for line in f]
  assert len(rows) == num_test
  assert all(len(r) == 2 and abs(sum(r) - 1.0) < 1e-5 for r in rows)
  with open(os.path.join(out_dir, "label_list.txt")) as f:
    assert f.read() == "0\n1\n"
  assert tf.train.latest_checkpoint(out_dir).endswith("model.ckpt-%d" % num_steps)
  # Only rank 0 writes checkpoints, summaries and results.
  rank1 = os.listdir(os.path.join(out_dir, "1"))
  assert not [n for n in rank1 if n.startswith(("model.ckpt", "checkpoint", "events"))]
  assert "train.tf_record" in rank1
  return results


def summary_tags(folder):
  tags = set()
  for name in os.listdir(folder):
    if name.startswith("events.out.tfevents"):
      for event in tf1.train.summary_iterator(os.path.join(folder, name)):
        tags.update(v.tag for v in event.summary.value)
  return tags


@requires("horovodrun")
@pytest.mark.parametrize("launcher", [
    "horovodrun", pytest.param("mpirun", marks=requires("mpirun"))])
def test_two_processes_train_eval_predict(tiny_task, tmp_path, launcher):
  out = str(tmp_path / "out")
  # 101 examples, 2 x 4 per step, 4 epochs: int(101 / 8 * 4) = 50 steps.
  proc = run_job(launcher, 2, classifier_args(
      tiny_task, out, "--do_train", "--do_eval", "--do_predict",
      "--train_batch_size=4", "--num_train_epochs=4"))
  assert_ok(proc)
  # horovodrun runs are started with --gloo (conftest); mpirun means Horovod's MPI.
  assert "Horovod over %s" % ("MPI" if launcher == "mpirun" else "Gloo") in proc.stderr
  results = check_outputs(out, num_test=20, num_steps=50)
  # The task is decided by one sentiment word: a working run learns it.
  assert results["eval_accuracy"] >= 0.8, results
  metrics = json.load(open(os.path.join(out, "train_metrics.json")))
  assert metrics["processes"] == 2 and metrics["global_batch"] == 8
  # TensorBoard scalars, written by rank 0 only.
  assert {"loss", "learning_rate", "grad_global_norm",
          "examples_per_sec_global"} <= summary_tags(out)
  for rank, folder in ((0, out), (1, os.path.join(out, "1"))):
    state = json.load(open(os.path.join(folder, "train_state.json")))
    assert (state["rank"], state["size"], state["global_step"]) == (rank, 2, 50)


def make_init_checkpoint(folder, config):
  """Saves freshly initialized classifier weights, as a pretrained checkpoint would be."""
  import modeling
  import classifier_model
  os.makedirs(folder, exist_ok=True)
  with tf.Graph().as_default():
    tf1.set_random_seed(7)
    ids = tf1.placeholder(tf.int32, [2, 16])
    classifier_model.create_model(modeling.BertConfig.from_dict(config), True, ids, ids,
                                ids, tf1.placeholder(tf.int32, [2]), 2)
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      return tf1.train.Saver().save(sess, os.path.join(folder, "init.ckpt"))


def trained_weights(out_dir):
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(out_dir))
  names = [n for n, _ in tf.train.list_variables(out_dir)
           if n.startswith(("bert/", "output_")) and "adam" not in n]
  return {n: reader.get_tensor(n) for n in names}


@requires("horovodrun")
@pytest.mark.parametrize("embedding_allreduce", ["dense", "sparse"])
def test_two_processes_match_one_process_with_double_batch(tmp_path, embedding_allreduce):
  """With dropout off, 2 x batch b ends with the weights of 1 x batch 2b.

  This fails if gradients are summed instead of averaged, if the allreduce is
  skipped, if rank 1 does not start from rank 0's weights, or if sharding breaks
  the global batch; with the word-embedding gradient allreduced as a dense table
  and allgathered as the rows each batch used.
  """
  task = write_task(str(tmp_path / "task"), n_train=96, dropout=0.0)
  init = make_init_checkpoint(str(tmp_path / "init"), tiny_config(dropout=0.0))
  common = ["--do_train", "--train_shuffle_buffer=0", "--scale_learning_rate=false",
            "--seed=3", "--num_train_epochs=2", "--init_checkpoint=" + init,
            "--warmup_proportion=0.1"]
  one = str(tmp_path / "one")
  two = str(tmp_path / "two")
  assert_ok(run_job("python", 1, classifier_args(task, one, "--train_batch_size=8",
                                                 *common)))
  proc = run_job("horovodrun", 2, classifier_args(
      task, two, "--train_batch_size=4", "--embedding_allreduce=" + embedding_allreduce,
      *common))
  assert_ok(proc)
  assert "word-embedding gradient %s" % (
      "allgathered" if embedding_allreduce == "sparse" else "allreduced") in proc.stderr
  w1, w2 = trained_weights(one), trained_weights(two)
  assert sorted(w1) == sorted(w2) and len(w1) > 30
  init_reader = tf.train.load_checkpoint(init)
  moved = 0
  for name in w1:
    np.testing.assert_allclose(w2[name], w1[name], rtol=1e-4, atol=2e-5, err_msg=name)
    moved += not np.allclose(w1[name], init_reader.get_tensor(name))
  assert moved > 30  # Training really changed the weights.


def test_same_seed_gives_bitwise_identical_weights(tmp_path):
  """Training is deterministic under --seed (with dropout on): a race between the
  optimizer update and the forward pass once broke this only in some runs."""
  task = write_task(str(tmp_path / "task"), n_train=48)
  runs = []
  for name in ("a", "b"):
    out = str(tmp_path / name)
    assert_ok(run_job("python", 1, classifier_args(task, out, "--do_train", "--seed=5",
                                                   "--train_batch_size=8",
                                                   "--num_train_epochs=2")))
    runs.append(trained_weights(out))
  assert sorted(runs[0]) == sorted(runs[1])
  for name in runs[0]:
    np.testing.assert_array_equal(runs[0][name], runs[1][name], err_msg=name)


@requires("horovodrun")
def test_uneven_shards_finish_with_same_step_on_every_rank(tmp_path):
  # 101 examples: shards of 51 and 50, neither divisible by batch 3.
  task = write_task(str(tmp_path / "task"), n_train=101)
  out = str(tmp_path / "out")
  proc = run_job("horovodrun", 2, classifier_args(
      task, out, "--do_train", "--train_batch_size=3", "--num_train_epochs=2"))
  assert_ok(proc)
  steps = int(101 / (3 * 2) * 2)
  for rank, folder in ((0, out), (1, os.path.join(out, "1"))):
    state = json.load(open(os.path.join(folder, "train_state.json")))
    assert (state["rank"], state["global_step"]) == (rank, steps)


@requires("horovodrun")
def test_mean_pooling_on_two_processes_is_recorded_and_enforced(tmp_path):
  """--pooling=mean trains on 2 processes without the pooler (its weights keep
  their initial values), writes pooling.txt, exports the same head, and a later
  run on that output_dir with another --pooling is refused on every rank."""
  task = write_task(str(tmp_path / "task"))
  init = make_init_checkpoint(str(tmp_path / "init"), tiny_config())
  out = str(tmp_path / "out")
  export_dir = str(tmp_path / "export")
  assert_ok(run_job("horovodrun", 2, classifier_args(
      task, out, "--do_train", "--do_eval", "--do_predict", "--train_batch_size=4",
      "--num_train_epochs=4", "--pooling=mean", "--init_checkpoint=" + init,
      "--export_dir=" + export_dir)))
  results = check_outputs(out, num_test=20, num_steps=50)
  assert results["eval_accuracy"] >= 0.8, results
  assert open(os.path.join(out, "pooling.txt")).read() == "mean\n"
  weights, initial = trained_weights(out), tf.train.load_checkpoint(init)
  for name in ("bert/pooler/dense/kernel", "bert/pooler/dense/bias"):
    np.testing.assert_array_equal(weights[name], initial.get_tensor(name))
  assert not np.allclose(weights["output_weights"], initial.get_tensor("output_weights"))
  # The SavedModel computes what the job predicted.
  probabilities = export_probabilities(export_dir, task)
  with open(os.path.join(out, "test_results.tsv")) as f:
    expected = [[float(x) for x in line.split("\t")] for line in f]
  np.testing.assert_allclose(probabilities, expected, atol=1e-5)

  proc = run_job("horovodrun", 2, classifier_args(task, out, "--do_predict"))
  output = proc.stdout + proc.stderr
  assert proc.returncode != 0 and "Exit code: 2" in output, output[-3000:]
  for rank in (0, 1):
    assert ("error (rank %d): --pooling=cls, but %s says the model in --output_dir was "
            "trained with --pooling=mean" % (rank, os.path.join(out, "pooling.txt"))
           ) in output, output[-3000:]


def write_teacher_file(task_dir, path, flip):
  """A teacher file for task_dir/train.tsv: 0.95 on each example's label, or on
  the other label with `flip`."""
  rows = ["guid\t1\t0"]  # the columns in another order than the label list
  with open(os.path.join(task_dir, "train.tsv")) as f:
    for number, line in enumerate(f, 1):
      label = int(line.split("\t")[0])
      p_one = 0.95 if (label == 1) != flip else 0.05
      rows.append("train-%d\t%g\t%g" % (number, p_one, 1.0 - p_one))
  with open(path, "w") as f:
    f.write("\n".join(rows) + "\n")
  return path


@requires("horovodrun")
def test_teacher_file_steers_training_on_two_processes(tmp_path):
  """--teacher_weight=1 trains on the teacher's probabilities alone: a teacher that
  contradicts every label teaches the contradiction (dev accuracy near 0, where the
  labels alone reach >= 0.8 in test_mean_pooling_on_two_processes_...); a teacher
  file missing an example is refused on every rank."""
  task = write_task(str(tmp_path / "task"))
  init = make_init_checkpoint(str(tmp_path / "init"), tiny_config())
  out = str(tmp_path / "out")
  teacher = write_teacher_file(task, str(tmp_path / "teacher.tsv"), flip=True)
  proc = run_job("horovodrun", 2, classifier_args(
      task, out, "--do_train", "--do_eval", "--train_batch_size=4",
      "--num_train_epochs=4", "--pooling=mean", "--init_checkpoint=" + init,
      "--teacher_file=" + teacher, "--teacher_weight=1"))
  assert_ok(proc)
  assert "teacher weight 1" in proc.stderr
  results = read_eval_results(os.path.join(out, "eval_results.txt"))
  assert results["eval_accuracy"] <= 0.2, results

  with open(teacher) as f:
    lines = f.readlines()
  with open(teacher, "w") as f:
    f.writelines(lines[:5] + lines[6:])
  proc = run_job("horovodrun", 2, classifier_args(
      task, str(tmp_path / "out2"), "--do_train", "--teacher_file=" + teacher))
  output = proc.stdout + proc.stderr
  assert proc.returncode != 0 and "Exit code: 2" in output, output[-3000:]
  for rank in (0, 1):
    assert ("error (rank %d): %s: no row for training example train-5" % (rank, teacher)
            ) in output, output[-3000:]


@requires("horovodrun")
def test_layer_lr_decay_gives_each_depth_its_rate(tmp_path):
  """--layer_lr_decay=0.5 on 2 processes x batch 4 against 1.0 on 1 x 8 (dropout 0,
  one update, warmup 0): an update is linear in the rate, so every variable moves
  by its multiplier times its move at 1.0, weight decay included: the
  embeddings 0.5^3, encoder layers 0 and 1 0.5^2 and 0.5, pooler and classifier 1."""
  task = write_task(str(tmp_path / "task"), n_train=96, dropout=0.0)
  init = make_init_checkpoint(str(tmp_path / "init"), tiny_config(dropout=0.0))
  common = ["--do_train", "--train_shuffle_buffer=0", "--max_train_steps=1",
            "--warmup_proportion=0", "--learning_rate=1e-3", "--scale_learning_rate=false",
            "--init_checkpoint=" + init]
  plain, decayed = str(tmp_path / "plain"), str(tmp_path / "decayed")
  assert_ok(run_job("python", 1, classifier_args(task, plain, "--train_batch_size=8",
                                                 *common)))
  proc = run_job("horovodrun", 2, classifier_args(
      task, decayed, "--train_batch_size=4", "--layer_lr_decay=0.5", *common))
  assert_ok(proc)
  assert "layer-wise rate decay 0.5" in proc.stderr
  initial = tf.train.load_checkpoint(init)
  moves = [{name: value - initial.get_tensor(name)
            for name, value in trained_weights(out).items()} for out in (plain, decayed)]
  multipliers = {"bert/embeddings/": 0.125, "bert/encoder/layer_0/": 0.25,
                 "bert/encoder/layer_1/": 0.5, "bert/pooler/": 1.0, "output_": 1.0}
  for name, move in moves[0].items():
    multiplier = [m for prefix, m in multipliers.items() if name.startswith(prefix)][0]
    np.testing.assert_allclose(moves[1][name], multiplier * move, rtol=1e-3, atol=1e-7,
                               err_msg=name)
  assert sum(np.any(m != 0) for m in moves[0].values()) > 30
