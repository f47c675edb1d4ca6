"""Unit tests of distributed.py's single-process stand-in and its runtime helpers."""

import pytest
import tensorflow as tf

import distributed

tf1 = tf.compat.v1


@pytest.fixture
def stand_in(monkeypatch):
  """The stand-in, installed as distributed.hvd, outside any launcher."""
  for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
    monkeypatch.delenv(name, raising=False)
  fake = distributed._SingleProcessHorovod()  # pylint: disable=protected-access
  monkeypatch.setattr(distributed, "hvd", fake)
  return fake


def test_stand_in_is_one_process_of_size_one(stand_in):
  stand_in.init()
  assert (stand_in.rank(), stand_in.local_rank(), stand_in.cross_rank()) == (0, 0, 0)
  assert (stand_in.size(), stand_in.local_size()) == (1, 1)
  assert not stand_in.mpi_enabled()
  assert stand_in.broadcast_object({"step": 7}, root_rank=0, name="x") == {"step": 7}
  assert stand_in.allgather_object("e", name="y") == ["e"]
  assert stand_in.Compression.none is None and stand_in.Compression.fp16 is None
  hook = stand_in.BroadcastGlobalVariablesHook(0)
  assert isinstance(hook, tf1.train.SessionRunHook)


def test_stand_in_optimizer_is_the_optimizer_itself(stand_in):
  optimizer = tf1.train.GradientDescentOptimizer(0.1)
  assert stand_in.DistributedOptimizer(optimizer, sparse_as_dense=True) is optimizer
  with pytest.raises(RuntimeError, match="gradient accumulation needs horovod"):
    stand_in.DistributedOptimizer(optimizer, backward_passes_per_step=2)


@pytest.mark.parametrize("name", ["HOROVOD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"])
def test_stand_in_refuses_a_multi_process_launch(monkeypatch, name):
  monkeypatch.setenv(name, "2")
  fake = distributed._SingleProcessHorovod()  # pylint: disable=protected-access
  with pytest.raises(RuntimeError, match="horovod is not installed"):
    fake.init()


def test_gather_errors_and_fail_in_one_process(stand_in, capsys):
  assert distributed.gather_errors(None) == []
  assert distributed.gather_errors("bad line") == ["bad line"]
  with pytest.raises(SystemExit) as e:
    distributed.fail("bad line", distributed.EXIT_BAD_INPUT, program="prog.py")
  assert e.value.code == 2
  assert capsys.readouterr().err == "prog.py: error (rank 0): bad line\n"


def test_resume_step_is_rank_zeros_latest_checkpoint(stand_in, tmp_path):
  assert distributed.broadcast_resume_step(str(tmp_path), rank=0) == 0
  with tf.Graph().as_default():
    step = tf1.train.get_or_create_global_step()
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      sess.run(tf1.assign(step, 42))
      tf1.train.Saver().save(sess, str(tmp_path / "model.ckpt"), global_step=step)
  assert distributed.broadcast_resume_step(str(tmp_path), rank=0) == 42
  assert len(distributed.broadcast_hooks()) == 1


def test_output_dir_lock_refuses_a_second_holder(tmp_path):
  out = str(tmp_path / "out")
  distributed.lock_output_dir(out, lock_name=".test.lock")
  with pytest.raises(distributed.InputError, match="in use by another running job"):
    distributed.lock_output_dir(out, lock_name=".test.lock")
  assert open(str(tmp_path / "out" / ".test.lock")).read().strip().isdigit()


def runtime(rank, size):
  return distributed.Runtime(rank=rank, size=size, local_rank=rank, local_size=size,
                             cross_rank=0, gpu_available=False, threads=1,
                             session_config=distributed.make_session_config(
                                 False, 1, 2))


def test_only_rank_zero_saves_checkpoints_and_writes_metrics(tmp_path):
  chief = distributed.make_run_config(runtime(0, 2), "o", "o", 3, 10, 2)
  assert chief.model_dir == "o" and chief.save_checkpoints_steps == 10
  worker = distributed.make_run_config(runtime(1, 2), "o", "o/1", 3, 10, 2)
  assert worker.model_dir == "o/1" and worker.save_checkpoints_steps is None
  assert worker.save_checkpoints_secs is None and worker.tf_random_seed == 3 + 1
  assert distributed.work_dir_of("o", 0) == "o" and distributed.work_dir_of("o", 1) == "o/1"
  with tf.Graph().as_default():
    loss, lr = tf.constant(1.0), tf.constant(0.1)
    chief_hooks = distributed.training_hooks(runtime(0, 2), str(tmp_path),
                                             str(tmp_path), loss, lr, 5, 4, 10.0)
    worker_hooks = distributed.training_hooks(runtime(1, 2), str(tmp_path),
                                              str(tmp_path), loss, lr, 5, 4, 10.0)
  assert len(chief_hooks) == 2 and len(worker_hooks) == 1
  assert runtime(1, 2).placement == {
      "rank": 1, "size": 2, "local_rank": 1, "local_size": 2, "cross_rank": 0}
