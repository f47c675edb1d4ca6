"""Horovod for TensorFlow, or a single-process stand-in when Horovod is not installed.

`from distributed import hvd` gives the real `horovod.tensorflow` module whenever it
imports, so `horovodrun`/`mpirun` jobs always use it. Without Horovod (a laptop, a
single GPU) the scripts still run as one process of size 1 instead of failing at
import time.
"""

import os

import tensorflow as tf

try:
  import horovod.tensorflow as hvd  # pylint: disable=unused-import
  HOROVOD_AVAILABLE = True
except ImportError:  # pragma: no cover - exercised only where Horovod is absent.
  hvd = None
  HOROVOD_AVAILABLE = False


class _NoOpHook(tf.compat.v1.train.SessionRunHook):
  """Stands in for `hvd.BroadcastGlobalVariablesHook` in a single process."""

  def __init__(self, root_rank=0):
    del root_rank


class _Compression(object):
  """Mirrors `hvd.Compression` (nothing to compress without peers)."""
  none = None
  fp16 = None


class _SingleProcessHorovod(object):
  """The subset of `horovod.tensorflow` that this project uses, for one process."""
  Compression = _Compression
  BroadcastGlobalVariablesHook = _NoOpHook

  def __init__(self):
    launched = any(k in os.environ for k in ("HOROVOD_RANK", "OMPI_COMM_WORLD_SIZE",
                                             "PMI_SIZE"))
    self._size_env = launched

  def init(self):
    if self._size_env:
      raise RuntimeError(
          "this process was started by a multi-process launcher but horovod is not "
          "installed; run scripts/setup.sh")

  def rank(self):
    return 0

  def local_rank(self):
    return 0

  def size(self):
    return 1

  def local_size(self):
    return 1

  def broadcast_object(self, obj, root_rank=0, name=None):
    del root_rank, name
    return obj

  def allgather_object(self, obj, name=None):
    del name
    return [obj]

  def DistributedOptimizer(self, optimizer, **kwargs):  # pylint: disable=invalid-name
    if kwargs.get("backward_passes_per_step", 1) != 1:
      raise RuntimeError("gradient accumulation needs horovod; run scripts/setup.sh")
    return optimizer


if hvd is None:
  hvd = _SingleProcessHorovod()
