"""run_pretraining.py end to end: really launched (python, horovodrun -np 2) on a tiny BERT.

Each job is a few seconds of work; the timeouts are hang guards only.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import contrastive_model
import modeling
import pretraining_model
from conftest import (VOCAB, classifier_args, reporting_ranks, requires, run_job,
                      tiny_config, write_task)
from pretraining_fixtures import PRED, SEQ, write_shards

tf1 = tf.compat.v1
EXIT_BAD_INPUT = 2


def assert_ok(proc):
  assert proc.returncode == 0, "exit %d\n--- stdout\n%s\n--- stderr\n%s" % (
      proc.returncode, proc.stdout[-3000:], proc.stderr[-6000:])


def write_config(folder, dropout=0.0):
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, "bert_config.json")
  with open(path, "w") as f:
    json.dump(tiny_config(dropout), f)
  return path


def pretrain_args(input_file, config, out, *extra):
  return ["--input_file=" + input_file, "--bert_config_file=" + config,
          "--output_dir=" + out, "--max_seq_length=%d" % SEQ,
          "--max_predictions_per_seq=%d" % PRED, "--learning_rate=1e-3",
          "--log_every_secs=1000"] + list(extra)


def run_pretraining(launcher, np_, args, **kwargs):
  return run_job(launcher, np_, args, script="run_pretraining.py", **kwargs)


def make_init_checkpoint(folder, config_path):
  """Freshly initialized pretraining weights (BERT and both heads) in a checkpoint."""
  os.makedirs(folder, exist_ok=True)
  config = modeling.BertConfig.from_json_file(config_path)
  with tf.Graph().as_default():
    tf1.set_random_seed(7)
    ints = tf1.placeholder(tf.int32, [2, SEQ])
    preds = tf1.placeholder(tf.int32, [2, PRED])
    features = {"input_ids": ints, "input_mask": ints, "segment_ids": ints,
                "masked_lm_positions": preds, "masked_lm_ids": preds,
                "masked_lm_weights": tf1.placeholder(tf.float32, [2, PRED]),
                "next_sentence_labels": tf1.placeholder(tf.int32, [2, 1])}
    pretraining_model.create_model(config, True, features)
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      return tf1.train.Saver().save(sess, os.path.join(folder, "init.ckpt"))


def model_weights(checkpoint, prefixes=("bert/", "cls/")):
  reader = tf.train.load_checkpoint(checkpoint)
  return {n: reader.get_tensor(n) for n, _ in tf.train.list_variables(checkpoint)
          if n.startswith(prefixes) and "adam" not in n and "lamb" not in n}


def read_eval_results(path):
  with open(path) as f:
    return {k: float(v) for k, v in (line.strip().split(" = ") for line in f)}


def train_states(out):
  return [json.load(open(os.path.join(folder, "train_state.json")))
          for folder in (out, os.path.join(out, "1"))]


def one_and_two_processes(tmp_path, flags, one_flags=()):
  """Trains 1 x batch 8 and 2 x batch 4 from the same fresh checkpoint on one file
  of 37 records read in order (dropout off); returns (2-process result, folder of
  the 1-process run, folder of the 2-process run, initial checkpoint, config)."""
  paths, _ = write_shards(str(tmp_path / "data"), 1, 37)
  config = write_config(str(tmp_path))
  init = make_init_checkpoint(str(tmp_path / "init"), config)
  common = ["--do_train", "--train_shuffle_buffer=0", "--scale_learning_rate=false",
            "--init_checkpoint=" + init, "--save_checkpoints_steps=100"] + list(flags)
  one, two = str(tmp_path / "one"), str(tmp_path / "two")
  assert_ok(run_pretraining("python", 1, pretrain_args(
      paths[0], config, one, "--train_batch_size=8", *(common + list(one_flags)))))
  proc = run_pretraining("horovodrun", 2, pretrain_args(paths[0], config, two,
                                                        "--train_batch_size=4", *common))
  assert_ok(proc)
  return proc, one, two, init, config


def assert_same_trained_weights(one, two, init, names, min_moved):
  """The two runs' last checkpoints hold `names` and the same weights (rtol 1e-4),
  and more than `min_moved` of them moved from `init`."""
  w1 = model_weights(tf.train.latest_checkpoint(one))
  w2 = model_weights(tf.train.latest_checkpoint(two))
  assert sorted(w1) == sorted(w2) == sorted(names)
  start = model_weights(init)
  moved = 0
  for name in w1:
    np.testing.assert_allclose(w2[name], w1[name], rtol=1e-4, atol=2e-5, err_msg=name)
    moved += not np.allclose(w1[name], start[name])
  assert moved > min_moved  # Training really changed the weights.


@requires("horovodrun")
@pytest.mark.parametrize("optimizer", ["adamw", "lamb"])
def test_two_processes_match_one_process_with_double_batch(tmp_path, optimizer):
  """With dropout off and the files' order, 2 x batch b ends with the weights of 1 x 2b.

  One input file for two ranks: the split is by record (fewer files than ranks
  is not an error). This fails if gradients are not averaged, if rank 1 does not
  start from rank 0's weights, or if the ranks' records do not make the batch.
  """
  proc, one, two, init, config = one_and_two_processes(
      tmp_path, ["--num_train_steps=8", "--num_warmup_steps=2", "--optimizer=" + optimizer])
  assert "1 input file < 2 ranks: split by record" in proc.stderr
  assert "global batch 8 sequences" in proc.stderr
  assert_same_trained_weights(one, two, init, pretraining_model.expected_checkpoint_shapes(
      modeling.BertConfig.from_json_file(config)), min_moved=30)
  for state in train_states(two):
    assert state["global_step"] == 8


@requires("horovodrun")
@pytest.mark.parametrize("objective", ["simcse", "segment_pairs"])
def test_contrastive_two_processes_match_one_process_with_double_batch(tmp_path,
                                                                      objective):
  """A contrastive --objective, dropout off: 2 x batch 4 ends with the weights of 1 x 8.

  This fails unless each rank's second views are negatives of the other rank's
  queries, the gradient through the gather is exact and the loss divides by the
  queries of all ranks. The checkpoint has the encoder only, and eval writes the
  contrastive metrics.
  """
  proc, one, two, init, config = one_and_two_processes(
      tmp_path, ["--num_train_steps=6", "--num_warmup_steps=0", "--objective=" + objective],
      one_flags=["--do_eval", "--eval_batch_size=8", "--max_eval_steps=2"])
  assert "global batch 8 sequences, 6 steps (0 warmup), %s, adamw" % objective in (
      proc.stderr)
  assert_same_trained_weights(one, two, init, modeling.expected_checkpoint_shapes(
      modeling.BertConfig.from_json_file(config)), min_moved=20)
  results = read_eval_results(os.path.join(one, "eval_results.txt"))
  assert set(results) >= {"contrastive_accuracy", "contrastive_loss"}
  assert 0.0 <= results["contrastive_accuracy"] <= 1.0 and results["contrastive_loss"] > 0


@requires("horovodrun")
def test_files_split_resume_to_exact_step_and_eval(tmp_path):
  """3 files on 2 ranks (by file); a run cut after a checkpoint resumes from it, ends
  at exactly num_train_steps on every rank with the weights of the uncut run (the
  input continues where it stopped); eval_results.txt has Google's keys."""
  paths, _ = write_shards(str(tmp_path / "data"), 3, 12)
  config = write_config(str(tmp_path), dropout=0.0)
  out = str(tmp_path / "out")
  args = pretrain_args(str(tmp_path / "data" / "part-*"), config, out, "--do_train",
                       "--do_eval", "--train_batch_size=4", "--num_train_steps=10",
                       "--num_warmup_steps=2", "--save_checkpoints_steps=3",
                       "--eval_batch_size=5", "--max_eval_steps=0",
                       "--keep_checkpoint_max=10")
  first = run_pretraining("horovodrun", 2, args)
  assert_ok(first)
  assert "3 input files, split by file among 2 ranks" in first.stderr
  assert "sequences/sec global" in first.stderr
  assert [s["global_step"] for s in train_states(out)] == [10, 10]
  results = read_eval_results(os.path.join(out, "eval_results.txt"))
  assert {"masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
          "next_sentence_loss", "global_step", "loss"} <= set(results)
  assert results["global_step"] == 10
  assert 0.0 <= results["masked_lm_accuracy"] <= 1.0
  assert 0.0 < results["masked_lm_loss"] < 2 * np.log(len(VOCAB))
  metrics = json.load(open(os.path.join(out, "train_metrics.json")))
  assert metrics["processes"] == 2 and metrics["global_batch"] == 8
  # Only rank 0 writes checkpoints.
  assert not [n for n in os.listdir(os.path.join(out, "1"))
              if n.startswith(("model.ckpt", "checkpoint", "events"))]

  uncut = model_weights(tf.train.latest_checkpoint(out))

  # Cut the run back to its checkpoint at step 9, as if it had died after it.
  for name in os.listdir(out):
    if name.startswith("model.ckpt-10."):
      os.remove(os.path.join(out, name))
  tf1.train.update_checkpoint_state(out, os.path.join(out, "model.ckpt-9"))
  second = run_pretraining("horovodrun", 2, args)
  assert_ok(second)
  assert "starting at step 9" in second.stderr
  assert [s["global_step"] for s in train_states(out)] == [10, 10]
  assert tf.train.latest_checkpoint(out).endswith("model.ckpt-10")
  resumed = model_weights(tf.train.latest_checkpoint(out))
  for name in uncut:
    np.testing.assert_allclose(resumed[name], uncut[name], rtol=1e-5, atol=1e-7,
                               err_msg=name)
  # And a finished run is not trained again.
  third = run_pretraining("horovodrun", 2, args)
  assert_ok(third)
  assert "training already finished at step 10" in third.stderr


def test_checkpoint_initializes_every_bert_variable_of_the_classifier(tmp_path):
  """Pretrain (bfloat16 where the CPU has it, gradient accumulation), then
  fine-tune from that checkpoint: every bert/ variable of run_classifier.py
  comes from it."""
  paths, _ = write_shards(str(tmp_path / "data"), 2, 10)
  config = write_config(str(tmp_path / "model"))
  pre = str(tmp_path / "pre")
  extra = []
  import distributed  # pylint: disable=g-import-not-at-top
  if distributed.cpu_supports_bfloat16():
    extra.append("--use_amp")
  proc = run_pretraining("python", 1, pretrain_args(
      paths[0] + "," + paths[1], config, pre, "--do_train", "--train_batch_size=4",
      "--num_train_steps=6", "--num_warmup_steps=0", "--seed=7",
      "--gradient_accumulation_steps=2", *extra))
  assert_ok(proc)
  if extra:
    assert "compute bfloat16" in proc.stderr
  pretrained = tf.train.latest_checkpoint(pre)
  assert pretrained.endswith("model.ckpt-6")

  task = write_task(str(tmp_path / "task"), n_train=16)
  cls_out = str(tmp_path / "cls")
  # A learning rate so small the one step cannot move a weight: the classifier's
  # checkpoint then shows what init_checkpoint loaded.
  args = classifier_args(task, cls_out, "--do_train", "--train_batch_size=4",
                         "--max_train_steps=1", "--init_checkpoint=" + pretrained)
  args[args.index("--learning_rate=1e-3")] = "--learning_rate=1e-30"
  args[args.index("--bert_config_file=" + os.path.join(task, "bert_config.json"))] = (
      "--bert_config_file=" + config)
  assert_ok(run_job("python", 1, args))
  tuned = model_weights(tf.train.latest_checkpoint(cls_out), prefixes=("bert/",))
  source = model_weights(pretrained, prefixes=("bert/",))
  assert sorted(tuned) == sorted(modeling.expected_checkpoint_shapes(
      modeling.BertConfig.from_json_file(config)))
  assert sorted(tuned) == sorted(source)
  for name in tuned:
    np.testing.assert_allclose(tuned[name], source[name], rtol=1e-6, atol=1e-20,
                               err_msg=name)


@requires("horovodrun")
def test_train_variables_trains_only_the_heads(tmp_path):
  """--train_variables='^cls/' on 2 processes: every bert/ variable ends exactly as
  loaded (the word embeddings too, which the masked-LM output shares), the heads
  move, and only they have optimizer slots."""
  paths, _ = write_shards(str(tmp_path / "data"), 1, 16)
  config = write_config(str(tmp_path))
  init = make_init_checkpoint(str(tmp_path / "init"), config)
  out = str(tmp_path / "out")
  proc = run_pretraining("horovodrun", 2, pretrain_args(
      paths[0], config, out, "--do_train", "--train_batch_size=4", "--num_train_steps=4",
      "--num_warmup_steps=0", "--init_checkpoint=" + init, "--train_variables=^cls/"))
  assert_ok(proc)
  assert "adamw, training only the variables matching '^cls/'" in proc.stderr
  trained = tf.train.latest_checkpoint(out)
  start, end = model_weights(init), model_weights(trained)
  assert sorted(start) == sorted(end)
  for name in end:
    if name.startswith("bert/"):
      np.testing.assert_array_equal(end[name], start[name], err_msg=name)
  heads = [n for n in end if n.startswith("cls/")]
  assert len(heads) == 7
  assert sum(not np.allclose(end[n], start[n]) for n in heads) >= 5
  slots = [n for n, _ in tf.train.list_variables(trained) if "adam" in n]
  assert slots and all(n.startswith("cls/") for n in slots), slots


def no_match(tmp_path, paths):
  return ["--input_file=" + str(tmp_path / "nope-*.tfrecord")], "no file matches"


def wrong_seq_length(tmp_path, paths):
  return (["--max_seq_length=32"],
          "feature 'input_ids' has 16 values, expected 32 (--max_seq_length must match")


def not_records(tmp_path, paths):
  with open(paths[1], "w") as f:
    f.write("plain text\n" * 20)
  return [], "part-00001.tfrecord: not a readable TFRecord file"


def bad_checkpoint(tmp_path, paths):
  with tf.Graph().as_default():
    tf1.get_variable("cls/predictions/output_bias", [7])
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      ckpt = tf1.train.Saver().save(sess, str(tmp_path / "small.ckpt"))
  return (["--init_checkpoint=" + ckpt], "variable cls/predictions/output_bias has "
          "shape [7], the config needs [%d]" % len(VOCAB))


def bad_temperature(tmp_path, paths):
  return (["--objective=simcse", "--contrastive_temperature=0"],
          "--contrastive_temperature must be positive, got 0")


def bad_accumulation(tmp_path, paths):
  return (["--gradient_accumulation_steps=3"],
          "--num_train_steps=10 is not a multiple of --gradient_accumulation_steps=3")


def unknown_optimizer(tmp_path, paths):
  return ["--optimizer=sgd"], "value should be one of <adamw|lamb>"


def bad_train_variables(tmp_path, paths):
  return (["--train_variables=cls/(predictions"],
          "--train_variables=cls/(predictions is not a regular expression")


def train_variables_match_none(tmp_path, paths):
  return (["--train_variables=^heads/"],
          "--train_variables=^heads/ matches none of the model's variables")


def checkpoint_of_another_objective(tmp_path, paths):
  # A contrastive run's encoder in --output_dir, resumed as masked LM: no cls/ heads.
  config = modeling.BertConfig.from_dict(tiny_config())
  with tf.Graph().as_default():
    for name, shape in contrastive_model.expected_checkpoint_shapes(config).items():
      tf1.get_variable(name, shape)
    tf1.train.create_global_step()
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      tf1.train.Saver().save(sess, str(tmp_path / "out" / "model.ckpt"), global_step=4)
  return [], ("--output_dir=%s: its checkpoint model.ckpt-4 has no variable "
              "cls/predictions/transform/dense/kernel" % (tmp_path / "out"))


BAD_INPUTS = [no_match, wrong_seq_length, not_records, bad_checkpoint, bad_accumulation,
              bad_temperature, unknown_optimizer, bad_train_variables, train_variables_match_none,
              checkpoint_of_another_objective]


@requires("mpirun")
@pytest.mark.parametrize("break_input", BAD_INPUTS, ids=lambda f: f.__name__)
def test_bad_input_exits_2_on_every_rank(tmp_path, break_input):
  paths, _ = write_shards(str(tmp_path / "data"), 2, 4)
  config = write_config(str(tmp_path))
  extra, message = break_input(tmp_path, paths)
  out = str(tmp_path / "out")
  args = pretrain_args(",".join(paths), config, out, "--do_train", "--do_eval",
                       "--train_batch_size=2", "--num_train_steps=10", *extra)
  proc = run_pretraining("mpirun", 2, args, timeout=120)
  output = proc.stdout + proc.stderr
  assert proc.returncode == EXIT_BAD_INPUT, output[-3000:]
  assert reporting_ranks(output, message) == {0, 1}, output[-3000:]
  assert not os.path.exists(os.path.join(out, "eval_results.txt"))
