"""Reliability under horovodrun -np 2: bad input, a dead rank, restarts, locking.

Every job runs under a generous timeout that only guards against hangs; the
assertions check exit codes, messages, and that no result file appears.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import (JOB_TIMEOUT, ROOT, classifier_args, launcher_prefix,
                      reporting_ranks, requires, run_job, tiny_config, write_task)

pytestmark = requires("horovodrun")
EXIT_BAD_INPUT = 2
# The dead-rank test's job: 101 examples, batch 1 x 2 processes, 30 epochs.
TOTAL_STEPS = 1515


def write(path, text):
  with open(path, "w") as f:
    f.write(text)


def bad_train_line(task):
  with open(os.path.join(task, "train.tsv"), "a") as f:
    f.write("1 no tab here\n")
  return [], "train.tsv:102: expected 'label<TAB>text'"


def unknown_dev_label(task):
  with open(os.path.join(task, "dev.tsv"), "a") as f:
    f.write("7\tgood movie\n")
  return [], "label '7' is not among the training labels"


def empty_train(task):
  write(os.path.join(task, "train.tsv"), "\n")
  return [], "no training examples"


def missing_dev(task):
  os.remove(os.path.join(task, "dev.tsv"))
  return [], "dev.tsv: no such file"


def empty_vocab(task):
  write(os.path.join(task, "vocab.txt"), "")
  return [], "vocab.txt is empty"


def config_not_json(task):
  write(os.path.join(task, "bert_config.json"), "{oops")
  return [], "bert_config.json: not valid JSON"


def config_missing_key(task):
  cfg = tiny_config()
  del cfg["num_hidden_layers"]
  write(os.path.join(task, "bert_config.json"), json.dumps(cfg))
  return [], "missing keys num_hidden_layers"


def vocab_too_big(task):
  write(os.path.join(task, "bert_config.json"), json.dumps(tiny_config(vocab_size=10)))
  return [], "more than vocab_size=10"


def seq_too_long(task):
  return ["--max_seq_length=100"], "exceeds max_position_embeddings=64"


def bad_batch(task):
  return ["--train_batch_size=0"], "--train_batch_size must be positive"


def bad_lr(task):
  return ["--learning_rate=-1"], "--learning_rate must be positive"


def missing_checkpoint(task):
  return ["--init_checkpoint=" + os.path.join(task, "nope.ckpt")], "no such checkpoint"


def mismatched_checkpoint(task):
  import tensorflow as tf
  tf1 = tf.compat.v1
  with tf.Graph().as_default():
    tf1.get_variable("bert/embeddings/word_embeddings", [20, 16])
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      path = tf1.train.Saver().save(sess, os.path.join(task, "small.ckpt"))
  return (["--init_checkpoint=" + path],
          "variable bert/embeddings/word_embeddings has shape [20, 16], the config "
          "needs [20, 32]")


def no_checkpoints(task):
  return ["--save_checkpoints_steps=0"], "--save_checkpoints_steps must be positive, got 0"


def too_few_steps_to_accumulate(task):
  return (["--max_train_steps=3", "--gradient_accumulation_steps=4"],
          "--max_train_steps=3: fewer than one update of "
          "--gradient_accumulation_steps=4 steps")


def output_dir_not_a_folder(task):
  path = os.path.join(task, "a_file")
  write(path, "not a folder\n")
  return (["--output_dir=" + os.path.join(path, "out")],
          "--output_dir=%s: cannot create it or write in it" % os.path.join(path, "out"))


def unknown_task(task):
  return ["--task_name=nosuchtask"], "--task_name=nosuchtask: unknown task"


def unknown_flag(task):
  return ["--no_such_flag=1"], "Unknown command line flag 'no_such_flag'"


BAD_INPUTS = [bad_train_line, unknown_dev_label, empty_train, missing_dev, empty_vocab,
              config_not_json, config_missing_key, vocab_too_big, seq_too_long,
              bad_batch, bad_lr, no_checkpoints, too_few_steps_to_accumulate,
              missing_checkpoint, mismatched_checkpoint, output_dir_not_a_folder,
              unknown_task, unknown_flag]


# Under mpirun (it starts faster than horovodrun, and passes the rank's exit status
# through); horovodrun's reporting is the late-rank test's below.
@requires("mpirun")
@pytest.mark.parametrize("break_input", BAD_INPUTS, ids=lambda f: f.__name__)
def test_bad_input_fails_fast_on_every_rank(tmp_path, break_input):
  task = write_task(str(tmp_path / "task"))
  extra, message = break_input(task)
  out = str(tmp_path / "out")
  start = time.time()
  args = classifier_args(task, out, "--do_train", "--do_eval", "--do_predict",
                         "--train_batch_size=4", *extra)
  if break_input is unknown_task:
    args.remove("--task_name=tsv")
  proc = run_job("mpirun", 2, args, timeout=120)
  elapsed = time.time() - start
  output = proc.stdout + proc.stderr
  assert proc.returncode == EXIT_BAD_INPUT, output[-3000:]
  assert message in output, output[-3000:]
  assert reporting_ranks(output, message) == {0, 1}, output[-3000:]
  for name in ("eval_results.txt", "test_results.tsv"):
    assert not os.path.exists(os.path.join(out, name))
  assert elapsed < 90


@requires("mpirun")
def test_eval_and_predict_without_a_trained_model_fail_on_every_rank(tmp_path):
  # Without --do_train, the Estimator would start from the initial weights and
  # write eval_results.txt and test_results.tsv of a model that never trained.
  task = write_task(str(tmp_path / "task"))
  out = str(tmp_path / "out")
  proc = run_job("mpirun", 2, classifier_args(task, out, "--do_eval", "--do_predict"),
                 timeout=120)
  output = proc.stdout + proc.stderr
  message = "--do_eval/--do_predict without --do_train: --output_dir=%s holds no" % out
  assert proc.returncode == EXIT_BAD_INPUT, output[-3000:]
  assert reporting_ranks(output, message) == {0, 1}, output[-3000:]
  for name in ("eval_results.txt", "test_results.tsv"):
    assert not os.path.exists(os.path.join(out, name))


@requires("mpirun")
def test_output_dir_checkpoint_of_another_model_fails_on_every_rank(tmp_path):
  # The Estimator resumes from --output_dir's checkpoint: after a change to
  # bert_config.json, TensorFlow's restore failed on rank 0 alone, with a traceback.
  task = write_task(str(tmp_path / "task"))
  out = str(tmp_path / "out")
  first = run_job("python", 1, classifier_args(task, out, "--do_train",
                                               "--train_batch_size=4",
                                               "--max_train_steps=2"))
  assert first.returncode == 0, first.stderr[-3000:]
  config = tiny_config()
  config["intermediate_size"] *= 2
  write(os.path.join(task, "bert_config.json"), json.dumps(config))
  proc = run_job("mpirun", 2, classifier_args(task, out, "--do_train", "--do_eval",
                                              "--do_predict", "--train_batch_size=4"),
                 timeout=120)
  output = proc.stdout + proc.stderr
  message = ("--output_dir=%s: its checkpoint model.ckpt-2 holds "
             "bert/encoder/layer_0/intermediate/dense/kernel with shape [32, 64] where "
             "this model has [32, 128]" % out)
  assert proc.returncode == EXIT_BAD_INPUT, output[-3000:]
  assert reporting_ranks(output, message) == {0, 1}, output[-3000:]
  for name in ("eval_results.txt", "test_results.tsv"):
    assert not os.path.exists(os.path.join(out, name))


@pytest.mark.parametrize("launcher", ["horovodrun",
                                      pytest.param("mpirun", marks=requires("mpirun"))])
def test_flag_error_is_reported_by_a_rank_that_starts_late(tmp_path, launcher):
  task = write_task(str(tmp_path / "task"))
  args = classifier_args(task, str(tmp_path / "out"), "--do_train", "--no_such_flag=1")
  # Rank 1 starts 8 s after rank 0. A launcher kills the other ranks as soon as
  # one exits, so rank 0 must wait for rank 1 to print the error too.
  late = ('r=${HOROVOD_RANK:-$OMPI_COMM_WORLD_RANK}; '
          'if [ "$r" = 1 ]; then sleep 8; fi; exec "$0" "$@"')
  cmd = (launcher_prefix(launcher, 2)[:-1] +
         ["bash", "-c", late, sys.executable, os.path.join(ROOT, "run_classifier.py")] +
         args)
  proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120,
                        env=dict(os.environ, PYTHONUNBUFFERED="1"))
  assert proc.returncode != 0
  output = proc.stdout + proc.stderr
  message = "Unknown command line flag 'no_such_flag'"
  ranks = {l[:3] for l in output.splitlines() if message in l}
  if launcher == "horovodrun":
    assert ranks == {"[0]", "[1]"}, output[-3000:]
  else:
    assert output.count(message) == 2, output[-3000:]


def single_process_exit_code_is_bad_input(tmp_path):
  task = write_task(str(tmp_path / "task"))
  proc = run_job("python", 1, classifier_args(task, str(tmp_path / "o"), "--do_train",
                                              "--train_batch_size=0"))
  assert proc.returncode == EXIT_BAD_INPUT


def test_single_process_bad_input_exit_code(tmp_path):
  single_process_exit_code_is_bad_input(tmp_path)


def find_rank_pid(output_dir, rank):
  """PID of the run_classifier.py process of `rank` writing to `output_dir`."""
  for pid in os.listdir("/proc"):
    if not pid.isdigit():
      continue
    try:
      with open("/proc/%s/cmdline" % pid, "rb") as f:
        cmdline = f.read()
      with open("/proc/%s/environ" % pid, "rb") as f:
        environ = f.read().split(b"\0")
    except OSError:
      continue
    if (b"run_classifier.py" in cmdline and output_dir.encode() in cmdline and
        b"python" in cmdline.split(b"\0")[0] and
        ("HOROVOD_RANK=%d" % rank).encode() in environ):
      return int(pid)
  return None


def checkpoint_steps(out):
  if not os.path.isdir(out):
    return []
  return sorted(int(n[len("model.ckpt-"):-len(".index")]) for n in os.listdir(out)
                if n.startswith("model.ckpt-") and n.endswith(".index"))


def test_dead_rank_ends_job_then_rerun_resumes(tmp_path):
  task = write_task(str(tmp_path / "task"))
  out = str(tmp_path / "out")
  # 101 examples, batch 1 x 2, 30 epochs: 1515 tiny steps, checkpoints every 300
  # (rank 1 is killed within a second of the first one, over 1,000 steps before the end).
  args = classifier_args(task, out, "--do_train", "--do_eval", "--train_batch_size=1",
                         "--num_train_epochs=30", "--save_checkpoints_steps=300")
  cmd = launcher_prefix("horovodrun", 2) + [os.path.join(ROOT, "run_classifier.py")] + args
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
  try:
    deadline = time.time() + JOB_TIMEOUT
    while not [s for s in checkpoint_steps(out) if s > 0]:
      assert proc.poll() is None, proc.stdout.read()[-3000:]
      assert time.time() < deadline, "no checkpoint appeared"
      time.sleep(0.5)
    pid = find_rank_pid(out, 1)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    killed_at = time.time()
    output, _ = proc.communicate(timeout=120)
    exit_secs = time.time() - killed_at
  finally:
    if proc.poll() is None:
      proc.kill()
  killed_exit = proc.returncode
  assert killed_exit != 0, output[-3000:]
  assert exit_secs < 60, exit_secs
  assert not os.path.exists(os.path.join(out, "eval_results.txt"))
  saved = max(checkpoint_steps(out))
  assert 0 < saved < TOTAL_STEPS

  # The same command again resumes from rank 0's checkpoint and ends at the total.
  proc = run_job("horovodrun", 2, args)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "starting at step %d" % saved in proc.stderr
  for folder in (out, os.path.join(out, "1")):
    state = json.load(open(os.path.join(folder, "train_state.json")))
    assert state["global_step"] == TOTAL_STEPS
  with open(os.path.join(out, "eval_results.txt")) as f:
    assert "global_step = %d" % TOTAL_STEPS in f.read()
  print("rank 1 killed after checkpoint %d; launcher exited %d after %.1fs" %
        (saved, killed_exit, exit_secs))


def test_rerun_of_finished_job_skips_training(tmp_path):
  task = write_task(str(tmp_path / "task"))
  out = str(tmp_path / "out")
  args = classifier_args(task, out, "--do_train", "--do_eval", "--train_batch_size=4",
                         "--num_train_epochs=2")
  first = run_job("horovodrun", 2, args)
  assert first.returncode == 0, first.stderr[-3000:]
  result = open(os.path.join(out, "eval_results.txt")).read()
  # Rank 1's folder lost (e.g. another node): it must still agree and not hang.
  import shutil
  shutil.rmtree(os.path.join(out, "1"))
  second = run_job("horovodrun", 2, args)
  assert second.returncode == 0, second.stderr[-3000:]
  assert "training already finished at step 25" in second.stderr
  assert open(os.path.join(out, "eval_results.txt")).read() == result


def test_second_job_on_same_output_dir_is_refused(tmp_path):
  task = write_task(str(tmp_path / "task"))
  out = str(tmp_path / "out")
  args = classifier_args(task, out, "--do_train", "--train_batch_size=1",
                         "--num_train_epochs=60")
  cmd = launcher_prefix("horovodrun", 2) + [os.path.join(ROOT, "run_classifier.py")] + args
  first = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
  try:
    deadline = time.time() + JOB_TIMEOUT
    while not os.path.exists(os.path.join(out, "train.tf_record")):
      assert first.poll() is None and time.time() < deadline
      time.sleep(0.5)
    second = run_job("horovodrun", 2, args, timeout=120)
    assert second.returncode != 0
    assert "is in use by another running job" in second.stderr
    assert first.poll() is None  # The first job was not disturbed.
  finally:
    first.kill()
    first.wait()
