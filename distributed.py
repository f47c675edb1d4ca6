"""The Horovod runtime every entry point uses, and a single-process stand-in.

`from distributed import hvd` gives the real `horovod.tensorflow` module whenever it
imports, so `horovodrun`/`mpirun` jobs always use it. Without Horovod (a laptop, a
single GPU) the scripts still run as one process of size 1 instead of failing at
import time.

An entry point calls `init()` once (before any TensorFlow op) and gets a `Runtime`:
rank, size, device and session settings. The rest of this module is what every
distributed program needs around its own model: input errors gathered from every
rank before any collective (`gather_errors`, `fail`), the `output_dir` lock, the
resume-step broadcast, rank-0-only checkpoints and hooks, and the global step
count and example sharding that make every rank agree.
"""

import fcntl
import logging
import os
import random
import sys

from absl import flags
import tensorflow as tf
import tensorflow_estimator as tf_estimator

import train_metrics

try:
  import horovod.tensorflow as hvd  # pylint: disable=unused-import
  HOROVOD_AVAILABLE = True
except ImportError:  # pragma: no cover - exercised only where Horovod is absent.
  hvd = None
  HOROVOD_AVAILABLE = False


class _NoOpHook(tf.compat.v1.train.SessionRunHook):
  """Stands in for Horovod's `BroadcastGlobalVariablesHook` in a single process."""

  def __init__(self, root_rank=0):
    del root_rank


class _Compression(object):
  """Mirrors Horovod's `Compression` (nothing to compress without peers)."""
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

  def cross_rank(self):
    return 0

  def mpi_enabled(self):
    return False

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

tf1 = tf.compat.v1
LOG = train_metrics.LOG
# Exit codes: 0 every requested phase completed; 1 a failure while running (a dead
# peer, out of memory, ...); 2 bad input (flags, files, lines, labels, configs).
EXIT_BAD_INPUT = 2
# Horovod's cycle on hosts without GPUs (see --horovod_cycle_time_ms).
CPU_HOROVOD_CYCLE_TIME_MS = 10.0
_LOCK_FILES = []  # Open lock files: held for the life of the process.


class InputError(ValueError):
  """Bad user input: a file, line, label or flag that cannot be used."""


class Runtime(object):
  """Where this process sits and how it runs: what `init()` found and set.

  Attributes:
    rank, size, local_rank, local_size, cross_rank: ints (Horovod's placement).
    gpu_available: bool, a GPU is visible (this process uses GPU `local_rank`,
      the only one it sees: see `pin_gpu`).
    threads: int, intra-op CPU threads of this process (0 with a GPU).
    session_config: the tf.compat.v1.ConfigProto to give the Estimator.
    placement: dict of the five placement ints (for train_state.json).
  """

  def __init__(self, rank, size, local_rank, local_size, cross_rank, gpu_available,
               threads, session_config):
    self.rank = rank
    self.size = size
    self.local_rank = local_rank
    self.local_size = local_size
    self.cross_rank = cross_rank
    self.gpu_available = gpu_available
    self.threads = threads
    self.session_config = session_config
    self.placement = {"rank": rank, "size": size, "local_rank": local_rank,
                      "local_size": local_size, "cross_rank": cross_rank}

  @property
  def is_chief(self):
    return self.rank == 0


def init(cycle_time_ms=0.0, intra_op_threads=0, inter_op_threads=2,
         use_xla=False):
  """Starts Horovod, pins this process's device and threads, sets up logging.

  Call it once, first thing in `main`, before any TensorFlow op runs.

  Args:
    cycle_time_ms: float, HOROVOD_CYCLE_TIME to set; 0 picks the default
      (see `horovod_cycle_time_ms`).
    intra_op_threads: int, CPU threads per process for one op; 0 = this host's
      cores / processes on this host.
    inter_op_threads: int, CPU threads per process for independent ops.
    use_xla: bool, compile with XLA (JIT) on CPUs and GPUs.

  Returns:
    A `Runtime`.
  """
  gpu_available = bool(tf.config.list_physical_devices("GPU"))
  cycle_ms = horovod_cycle_time_ms(cycle_time_ms, os.environ, gpu_available)
  if cycle_ms:
    # Horovod: read when hvd.init() starts the background thread.
    os.environ["HOROVOD_CYCLE_TIME"] = "%g" % cycle_ms
  # Horovod: read by MPI_Init inside hvd.init() (no effect under Gloo).
  os.environ.update(mpi_cpu_host_env(os.environ, gpu_available))
  # Horovod: initialize Horovod before anything else.
  hvd.init()
  # One GPU per process, pinned before any eager op (an object collective, the
  # Estimator) maps GPU:0 for good.
  # Horovod: the process's rank on this host picks its GPU.
  pin_gpu(hvd.local_rank())
  # TensorFlow's thread pools are per process and made once, at the first op:
  # size them before any op runs.
  # Horovod: processes on one host share its cores.
  threads = cpu_threads_per_process(hvd.local_size(), intra_op_threads)
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads)
  if use_xla:
    enable_xla_on_cpu()
  # Horovod: where this process sits in the job.
  rank, size = hvd.rank(), hvd.size()
  # Horovod: its rank on this host picks its GPU (or its share of the cores).
  local_rank, local_size = hvd.local_rank(), hvd.local_size()
  # Horovod: cross_rank tells the host among hosts.
  cross_rank = hvd.cross_rank() if size > 1 else 0
  configure_logging(rank)
  return Runtime(
      rank=rank, size=size, local_rank=local_rank, local_size=local_size,
      cross_rank=cross_rank, gpu_available=gpu_available,
      threads=0 if gpu_available else threads,
      session_config=make_session_config(gpu_available, threads, inter_op_threads,
                                         use_xla))


def enable_xla_on_cpu():
  """Lets the session's `global_jit_level` cluster ops placed on CPUs too.

  That is TF_XLA_FLAGS=--tf_xla_cpu_global_jit, but TensorFlow parses that
  variable once and had done so by the time `main` ran, so setting it there
  changed nothing (measured: no cluster compiled): this sets the parsed flag
  itself, as TensorFlow's own XLA tests do. With TF_CPP_MIN_LOG_LEVEL=0 the
  first compiled step logs "Compiled cluster using XLA".
  """
  # pylint: disable=g-import-not-at-top
  from tensorflow.python.client import pywrap_tf_session
  pywrap_tf_session.TF_SetTfXlaCpuGlobalJit(True)


def configure_logging(rank):
  """Rank 0 logs progress; the other ranks log warnings and errors only."""
  handler = logging.StreamHandler(sys.stderr)
  handler.setFormatter(logging.Formatter("[%(asctime)s rank " + str(rank) +
                                         "] %(message)s", "%H:%M:%S"))
  LOG.handlers[:] = [handler]
  LOG.propagate = False
  # Horovod: only rank 0 reports progress.
  LOG.setLevel(logging.INFO if rank == 0 else logging.WARNING)
  tf1.logging.set_verbosity(tf1.logging.ERROR)


def define_runtime_flags(flag_values):
  """Defines the flags every entry point shares: threads, Horovod, speed, logging.

  Read in `main` only, like every flag: `init()` takes the thread and Horovod
  ones, the entry point's plan the others.
  """
  flags.DEFINE_bool(
      "scale_learning_rate", True,
      "Multiply the learning rate by the number of processes (the global batch is "
      "train_batch_size x processes).", flag_values=flag_values)
  flags.DEFINE_integer(
      "intra_op_threads", 0,
      "CPU threads per process for one op; 0 = cores on this host / processes on "
      "this host.", flag_values=flag_values)
  flags.DEFINE_integer("inter_op_threads", 2,
                       "CPU threads per process for running independent ops.",
                       flag_values=flag_values)
  flags.DEFINE_float("log_every_secs", 10.0,
                     "Seconds between progress lines on rank 0.", flag_values=flag_values)
  flags.DEFINE_integer("keep_checkpoint_max", 3, "Checkpoints kept by rank 0.",
                       flag_values=flag_values)
  flags.DEFINE_bool("use_xla", False, "Compile the training graph with XLA (JIT).",
                    flag_values=flag_values)
  flags.DEFINE_bool(
      "use_amp", False,
      "Mixed precision: float16 with dynamic loss scaling on GPUs, bfloat16 on CPUs "
      "that support it (avx512_bf16 or amx_bf16); variables stay float32.",
      flag_values=flag_values)
  flags.DEFINE_bool("fp16_allreduce", False,
                    "Compress gradients to float16 for the Horovod allreduce (each "
                    "divided by the number of processes before the sum).",
                    flag_values=flag_values)
  flags.DEFINE_float(
      "horovod_cycle_time_ms", 0.0,
      "Horovod's cycle (HOROVOD_CYCLE_TIME): how often ranks coordinate ready "
      "gradients. 0 = the HOROVOD_CYCLE_TIME environment variable if set, else "
      "%g ms on hosts without GPUs (each cycle wakes threads on the cores that "
      "compute) and Horovod's own default (1 ms) with GPUs." % CPU_HOROVOD_CYCLE_TIME_MS,
      flag_values=flag_values)
  flags.DEFINE_integer(
      "gradient_accumulation_steps", 1,
      "Micro-batches of --train_batch_size per optimizer update (one allreduce per "
      "update); the global batch is train_batch_size x this x processes.",
      flag_values=flag_values)


def validate_runtime_flags(flags_obj):
  """Checks the values of `define_runtime_flags`' flags; raises InputError."""
  if flags_obj.horovod_cycle_time_ms < 0:
    raise InputError("--horovod_cycle_time_ms must be >= 0, got %g" %
                     flags_obj.horovod_cycle_time_ms)
  if flags_obj.gradient_accumulation_steps < 1:
    raise InputError("--gradient_accumulation_steps must be at least 1, got %d" %
                     flags_obj.gradient_accumulation_steps)


def cpu_threads_per_process(local_size, requested=0, affinity=None, host_cpus=None):
  """Intra-op threads for one of `local_size` processes sharing this host's cores.

  This process may run on `affinity` of the `host_cpus` CPUs the job may use (its
  cgroup's cpuset). Unbound processes all see every CPU and divide them. A
  launcher that binds (srun --cpus-per-task, mpirun --bind-to core|socket) has
  shared them out already: about local_size x affinity / host_cpus processes
  (rounded up) share each bound set, so a process bound to its own cores uses all
  of them, and 4 processes bound to the 2 sockets of a host get half a socket each.
  """
  if requested > 0:
    return requested
  if affinity is None:
    try:
      affinity = len(os.sched_getaffinity(0))
    except AttributeError:
      affinity = os.cpu_count() or 1
  if host_cpus is None:
    host_cpus = max(allowed_cpu_count(), affinity)
  sharing = max(1, -(-max(1, local_size) * affinity // host_cpus))
  return max(1, affinity // sharing)


def allowed_cpu_count():
  """CPUs this job's cgroup may use (its cpuset), else all CPUs of the host."""
  for path in ("/sys/fs/cgroup/cpuset.cpus.effective",
               "/sys/fs/cgroup/cpuset/cpuset.effective_cpus"):
    try:
      with open(path) as f:
        text = f.read().strip()
    except OSError:
      continue
    count = 0
    for part in filter(None, text.split(",")):
      low, _, high = part.partition("-")
      count += int(high or low) - int(low) + 1
    if count:
      return count
  return os.cpu_count() or 1


def horovod_cycle_time_ms(requested, environ, gpu_available):
  """The HOROVOD_CYCLE_TIME to set before Horovod's `init()`, or None to leave it.

  Every cycle Horovod's background thread wakes and the ranks exchange a message,
  whether or not a gradient is ready. On a CPU host those wake-ups preempt the
  compute threads: at Horovod's 1 ms, 2 processes x 1 thread spent ~15% of each
  step of the default benchmark on them (12,000 context switches/s); 10 ms
  removes most of that and costs at most one cycle of latency per allreduce.
  """
  if requested > 0:
    return requested
  if "HOROVOD_CYCLE_TIME" in environ or gpu_available:
    return None
  return CPU_HOROVOD_CYCLE_TIME_MS


def mpi_cpu_host_env(environ, gpu_available):
  """Open MPI settings to add before Horovod's `init()` on a CPU host: a dict, maybe empty.

  Unless a host is oversubscribed, Open MPI spins while a rank waits, and Horovod
  waits in its background thread for every collective (its per-cycle negotiation
  included). On a CPU host that thread then takes cores from the compute threads:
  2 processes x 1 thread of the default benchmark spent 12-14% of each core
  spinning. mpi_yield_when_idle=1 makes a waiting rank yield its core instead
  (measured: 14.6 -> 16.4 examples/sec). Left alone with GPUs, or when set already
  (`mpirun --mca mpi_yield_when_idle ...` exports OMPI_MCA_mpi_yield_when_idle).
  """
  if gpu_available or "OMPI_MCA_mpi_yield_when_idle" in environ:
    return {}
  return {"OMPI_MCA_mpi_yield_when_idle": "1"}


def pin_gpu(local_rank):
  """Makes GPU `local_rank` of this host the only GPU this process sees.

  Horovod's TensorFlow 2 recipe. It must run before TensorFlow starts its runtime
  (the first eager op, e.g. Horovod's `broadcast_object`, or an Estimator): from then
  on every process would map GPU:0 to physical GPU 0, and a session's
  `visible_device_list` can no longer move it. Memory grows as needed.

  Returns:
    The pinned `tf.config.PhysicalDevice`, or None on a host without GPUs.
  """
  gpus = tf.config.list_physical_devices("GPU")
  if not gpus:
    return None
  # More processes than GPUs on a host: they share them round-robin.
  gpu = gpus[local_rank % len(gpus)]
  tf.config.experimental.set_memory_growth(gpu, True)
  tf.config.set_visible_devices(gpu, "GPU")
  return gpu


def make_session_config(gpu_available, intra_op_threads, inter_op_threads,
                        use_xla=False):
  """The tf.compat.v1.ConfigProto of one process (`pin_gpu` chose its GPU)."""
  config = tf1.ConfigProto()
  if use_xla:
    config.graph_options.optimizer_options.global_jit_level = tf1.OptimizerOptions.ON_1
  if gpu_available:
    config.gpu_options.allow_growth = True
  else:
    # Horovod: processes on one host share its cores; oversubscribing them is slow.
    config.intra_op_parallelism_threads = intra_op_threads
    config.inter_op_parallelism_threads = inter_op_threads
  return config


def cpu_supports_bfloat16():
  """Whether this CPU has native bfloat16 instructions (AVX512-BF16 or AMX-BF16)."""
  try:
    with open("/proc/cpuinfo") as f:
      flags_line = next((l for l in f if l.startswith("flags")), "")
  except OSError:
    return False
  cpu_flags = set(flags_line.split())
  return bool(cpu_flags & {"avx512_bf16", "amx_bf16"})


def choose_compute_type(use_amp, gpu_available):
  """tf.float32, or the mixed-precision type for this device; InputError if none."""
  if not use_amp:
    return tf.float32
  if gpu_available:
    return tf.float16
  if cpu_supports_bfloat16():
    return tf.bfloat16
  raise InputError("--use_amp: this CPU has no bfloat16 instructions (avx512_bf16 or "
                   "amx_bf16) and no GPU is visible; run without --use_amp")


def use_sparse_embedding_allreduce(mode, size, batch_size, seq_length, vocab_size,
                                   gradient_accumulation_steps, gpu_available=False,
                                   fp16_allreduce=False):
  """Whether to allgather the word-embedding rows instead of allreducing the table.

  An allgather sends size x batch_size x seq_length rows (one per token, repeats
  included) to every rank; the dense allreduce moves the vocab_size-row table.
  Never on GPUs: each rank sums the gathered rows into the dense gradient
  itself, with GPU scatter-adds whose order (so rounding) varies, and nothing
  re-syncs ranks whose updates then differ; the dense allreduce gives every rank
  the same bits. Never with --fp16_allreduce: Horovod cannot divide gathered
  rows before the float16 sum.

  Raises:
    InputError: for mode "sparse" where it cannot be used.
  """
  # Horovod: the embedding exchange rule (allgather rows vs. allreduce the table).
  if mode == "sparse":  # (validate_flags rejects it with accumulation)
    if gpu_available:
      raise InputError("--embedding_allreduce=sparse: on GPUs each rank would sum the "
                       "gathered rows in a varying order and ranks could drift apart; "
                       "use dense or auto")
    if fp16_allreduce:
      raise InputError("--embedding_allreduce=sparse does not work with "
                       "--fp16_allreduce (gathered rows cannot be divided before the "
                       "float16 sum); use dense or auto")
    return True
  if mode == "dense" or gpu_available or fp16_allreduce:
    return False
  return gradient_accumulation_steps <= 1 and size * batch_size * seq_length < vocab_size


def describe(runtime, compute_type, use_xla=False, fp16_allreduce=False,
             sparse_embedding_allreduce=False):
  """One line: device, threads and the speed options in force."""
  parts = ["GPU %d" % runtime.local_rank if runtime.gpu_available else
           "CPU, %d intra-op threads per process" % runtime.threads]
  parts.append("compute %s" % compute_type.name)
  if use_xla:
    parts.append("XLA")
  if fp16_allreduce:
    parts.append("fp16 allreduce")
  if runtime.size > 1:
    # Horovod: which controller carries the collectives.
    parts.append("Horovod over %s" % ("MPI" if hvd.mpi_enabled() else "Gloo"))
    parts.append("word-embedding gradient %s" % (
        "allgathered (sparse)" if sparse_embedding_allreduce else "allreduced (dense)"))
  return ", ".join(parts)


def launched_process_count(env):
  """How many processes the launcher started (horovodrun, mpirun or srun), else 1."""
  for name in ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
    if env.get(name, "").isdigit():
      return int(env[name])
  return 1


def gather_errors(error):
  """Every rank's input error (a string or None), gathered before any collective.

  Every rank calls this with its own error, or None: a bad input then ends all
  ranks promptly instead of leaving some waiting in a collective.

  Returns:
    The list of the non-empty errors of all ranks (empty when all are fine).
  """
  # Horovod: every rank learns every rank's input error before any training
  # collective, so a bad input ends all ranks promptly instead of hanging some.
  if hvd.size() > 1:  # Horovod: one process has no peers to hear from.
    return [e for e in hvd.allgather_object(error) if e]
  return [error] if error else []


def fail(message, code, program=None):
  """Prints one error line naming the problem and exits with `code`; all ranks call it."""
  program = program or os.path.basename(sys.argv[0])
  # Horovod: the line names the rank that printed it.
  sys.stderr.write("%s: error (rank %d): %s\n" % (program, hvd.rank(), message))
  sys.stderr.flush()
  # Horovod: a launcher kills the other ranks once one exits; let all print first.
  if hvd.size() > 1:
    hvd.allgather_object(None)  # Horovod: every rank reaches this before exiting.
  sys.exit(code)


def parse_flags_or_exit(flag_values, argv):
  """Parses `argv` into `flag_values`; a bad flag is one error line and exit 2."""
  try:
    return flag_values(argv)
  except flags.Error as e:
    if launched_process_count(os.environ) > 1:
      # Every rank has the same bad command line; fail() lets all of them print
      # it before any exits (a launcher kills the rest at the first exit).
      hvd.init()  # Horovod: init only to let fail() reach the other ranks.
      fail(str(e), EXIT_BAD_INPUT)
    sys.stderr.write("%s: error: %s\n" % (os.path.basename(argv[0]), e))
    sys.exit(EXIT_BAD_INPUT)


def lock_output_dir(output_dir, lock_name=".run_classifier.lock"):
  """Takes an exclusive lock on `output_dir` for the life of this process.

  Call it on rank 0 only. The lock (flock) goes away with the process, however it
  ends, so a crashed job never blocks its own restart; a second live job on the
  same folder is refused with an InputError.
  """
  path = os.path.join(output_dir, lock_name)
  try:
    tf.io.gfile.makedirs(output_dir)
    lock_file = open(path, "a+")
  except (tf.errors.OpError, OSError) as e:
    raise InputError("--output_dir=%s: cannot create it or write in it (%s)" %
                     (output_dir, str(e).splitlines()[0]))
  try:
    fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError:
    lock_file.seek(0)
    owner = lock_file.read().strip() or "unknown"
    lock_file.close()
    raise InputError("--output_dir=%s is in use by another running job (pid %s); wait "
                     "for it or choose another output_dir" % (output_dir, owner))
  lock_file.seek(0)
  lock_file.truncate()
  lock_file.write("%d\n" % os.getpid())
  lock_file.flush()
  _LOCK_FILES.append(lock_file)


def work_dir_of(output_dir, rank):
  """Rank 0 writes in `output_dir`; rank r > 0 keeps its own files in output_dir/r."""
  # Horovod: rank 0 writes checkpoints and results in output_dir; rank r > 0 keeps
  # only its own files in output_dir/r so no two processes write the same file.
  return output_dir if rank == 0 else os.path.join(output_dir, str(rank))


def latest_global_step(model_dir):
  """Global step of the newest checkpoint in `model_dir`, or 0."""
  ckpt = tf.train.latest_checkpoint(model_dir) if model_dir else None
  if not ckpt:
    return 0
  return int(tf.train.load_variable(ckpt, "global_step"))


def broadcast_resume_step(model_dir, rank):
  """The step training resumes at: rank 0's newest checkpoint, known to every rank."""
  # Rank 0's checkpoint decides where training resumes; every rank learns it, so
  # all agree on the steps that remain (or that none remain).
  # Horovod: broadcast rank 0's step.
  return hvd.broadcast_object(latest_global_step(model_dir) if rank == 0 else None,
                              root_rank=0, name="start_step")


def broadcast_hooks():
  """Training hooks that copy rank 0's initial variables to every rank."""
  # Every rank starts from the same weights (random or from init_checkpoint).
  # Horovod: broadcast initial variable states from rank 0 to all other processes.
  return [hvd.BroadcastGlobalVariablesHook(0)]


def training_hooks(runtime, work_dir, output_dir, loss, learning_rate, num_train_steps,
                   per_process_batch, log_every_secs, unit="examples"):
  """Hooks of one rank: its final-step record; on rank 0 also progress and metrics.

  Args:
    runtime: `Runtime`. work_dir: this rank's folder; output_dir: rank 0's.
    loss, learning_rate: scalar Tensors. num_train_steps, per_process_batch: ints.
    log_every_secs: float, seconds between progress lines.
    unit: the word for an example in the progress lines ("sequences").
  """
  hooks = [train_metrics.FinalStepHook(
      os.path.join(work_dir, "train_state.json"), runtime.placement)]
  # Horovod: progress, metrics and summaries come from rank 0 only.
  if runtime.rank == 0:
    hooks.append(train_metrics.ThroughputHook(
        loss, learning_rate, num_train_steps, per_process_batch, runtime.size,
        runtime.threads, log_every_secs=log_every_secs,
        metrics_path=os.path.join(output_dir, "train_metrics.json"),
        summary_dir=output_dir, unit=unit))
  return hooks


def average_over_processes(tensor):
  """The elementwise mean of `tensor` over all processes, in the graph.

  A collective: every rank must run it at the same step (training, not rank 0's
  eval). Call it with size > 1 only (the single-process stand-in has no allreduce).

  Args:
    tensor: a float Tensor that is not a gradient, e.g. a count of this rank's batch.
  """
  # Horovod: an allreduce (average) of a value of the forward pass.
  return hvd.allreduce(tensor, op=hvd.Average, name="average_over_processes")


def gather_over_processes(tensor):
  """The rows of `tensor` from every process, concatenated in rank order, in the graph.

  A collective like `average_over_processes` (size > 1 only). Its gradient gives
  each rank, for its own rows, the sum of every rank's gradient of them, so that
  with the optimizer's average the update is that of one process with the
  batches joined. (Horovod's own allgather gradient averages instead, and gathers
  the row counts in the backward pass, which deadlocked under the Estimator.)

  Args:
    tensor: a float Tensor of shape [B, ...], B the same on every rank.

  Returns:
    Tensor of shape [size * B, ...]; rank r's rows are r * B ... (r + 1) * B - 1.
  """
  rank = hvd.rank()  # Horovod: this rank's rows in the gathered tensor.

  @tf.custom_gradient
  def gather(x):
    def grad(dy):
      # Horovod: the gathered rows' gradients summed over ranks; keep this rank's.
      total = hvd.allreduce(dy, op=hvd.Sum, name="gather_over_processes_grad")
      rows = tf.shape(x)[0]
      return total[rank * rows:(rank + 1) * rows]
    # Horovod: an allgather of a value of the forward pass.
    return hvd.allgather(x, name="gather_over_processes"), grad

  return gather(tensor)


def plan_or_exit(setup_fn, *args):
  """`setup_fn(*args)` on every rank; a bad input on any rank ends all with exit 2.

  Returns:
    What setup_fn returned (only when no rank raised a ValueError, the base of
    InputError and of the modules' own input errors).
  """
  try:
    plan, error = setup_fn(*args), None
  except ValueError as e:
    plan, error = None, str(e)
  # Horovod: every rank learns every rank's input error before any collective.
  errors = gather_errors(error)
  if errors:
    fail(error or errors[0], EXIT_BAD_INPUT)
  return plan


def prepare_output_dirs(rank, output_dir, work_dir, result_files):
  """Rank 0 removes earlier `result_files` from `output_dir`; every rank makes work_dir.

  Results of an earlier run must not outlive a failure of this one.
  """
  # Horovod: rank 0 owns output_dir's results.
  if rank == 0:
    for name in result_files:
      if tf.io.gfile.exists(os.path.join(output_dir, name)):
        tf.io.gfile.remove(os.path.join(output_dir, name))
  tf.io.gfile.makedirs(work_dir)


def training_hooks_fn(runtime, work_dir, output_dir, num_train_steps, per_process_batch,
                      log_every_secs, unit="examples"):
  """The (loss, learning_rate) -> hooks function a model_fn_builder takes (see
  `training_hooks`)."""
  def hooks_fn(loss, learning_rate):
    return training_hooks(runtime, work_dir, output_dir, loss, learning_rate,
                          num_train_steps, per_process_batch, log_every_secs, unit=unit)
  return hooks_fn


def make_estimator(runtime, model_fn, output_dir, work_dir, seed, save_checkpoints_steps,
                   keep_checkpoint_max):
  """An Estimator for this rank (see `make_run_config`: rank 0 alone saves)."""
  return tf_estimator.estimator.Estimator(
      model_fn=model_fn, config=make_run_config(runtime, output_dir, work_dir, seed,
                                                save_checkpoints_steps,
                                                keep_checkpoint_max))


def train_to_step(estimator_fn, input_fn_for_step, output_dir, rank, num_train_steps,
                  accumulation_steps=1):
  """Trains every rank to `num_train_steps` from rank 0's latest checkpoint.

  Args:
    estimator_fn: () -> this rank's Estimator (made only when steps remain).
    input_fn_for_step: start_step -> the training input_fn.
    output_dir: rank 0's checkpoint folder. rank: this rank.
    num_train_steps: int, the global step every rank stops at.
    accumulation_steps: int, micro-batches per update; a checkpoint inside an
      accumulation window is a bad input (exit 2 on every rank).

  Returns:
    The step training started at (num_train_steps or more: nothing was left).
  """
  # Horovod: rank 0's checkpoint decides where training resumes, on every rank.
  start_step = broadcast_resume_step(output_dir, rank)
  if start_step >= num_train_steps:
    LOG.info("training already finished at step %d; skipping", start_step)
    return start_step
  if start_step % accumulation_steps:
    # Every rank knows start_step, so every rank stops here alike.
    fail("%s: checkpoint at step %d is not a multiple of --gradient_accumulation_steps=%d "
         "(saved by a run with other settings); resume with those settings or use a "
         "new --output_dir" % (output_dir, start_step, accumulation_steps),
         EXIT_BAD_INPUT)
  LOG.info("starting at step %d, training to step %d", start_step, num_train_steps)
  # Horovod: every rank starts from rank 0's weights (random or init_checkpoint).
  estimator_fn().train(input_fn=input_fn_for_step(start_step), max_steps=num_train_steps,
                       hooks=broadcast_hooks())
  return start_step


def make_run_config(runtime, output_dir, work_dir, seed, save_checkpoints_steps,
                    keep_checkpoint_max):
  """The Estimator's RunConfig of this rank: only rank 0 saves checkpoints, summaries."""
  # Horovod: a graph seed per rank, so dropout masks differ between ranks as
  # between the examples of one large batch (the initial weights are rank 0's
  # everywhere: the broadcast hook copies them).
  config = {"tf_random_seed": seed + runtime.rank, "log_step_count_steps": None,
            "session_config": runtime.session_config}
  if runtime.rank == 0:
    config.update(model_dir=output_dir, save_checkpoints_steps=save_checkpoints_steps,
                  keep_checkpoint_max=keep_checkpoint_max, save_summary_steps=100)
  else:
    # Horovod: save checkpoints only on worker 0 to prevent other workers from
    # corrupting them.
    config.update(model_dir=work_dir, save_checkpoints_steps=None,
                  save_checkpoints_secs=None, save_summary_steps=0)
  return tf_estimator.estimator.RunConfig(**config)


def checkpoint_interval(save_checkpoints_steps, accumulation_steps):
  """`save_checkpoints_steps` rounded up to a multiple of `accumulation_steps`.

  Horovod keeps a window's accumulated gradients in local variables that no
  checkpoint holds: a checkpoint inside a window would resume with a new window,
  shifting every later update. At multiples of k it falls between two updates.
  """
  k = max(1, accumulation_steps)
  return -(-save_checkpoints_steps // k) * k


def resume_position(start_step, per_process_batch, shard_size, shuffle_buffer):
  """Examples of this rank's training stream that steps before `start_step` used.

  A resumed run skips them, so it sees what an uninterrupted run would have seen.
  Without a shuffle buffer the stream is the shard over and over: only the part
  of the current epoch is skipped (the same position, less reading).
  """
  used = start_step * per_process_batch
  return used % shard_size if shuffle_buffer <= 0 else used


def shard_examples(examples, seed, rank, size):
  """One seeded shuffle of all examples (same on every rank), then every size-th.

  Rank r keeps global positions p with p % size == r, so batch k of every rank
  together is batch k of a single process with `size` times the batch.
  """
  # Horovod: every rank sees the same seeded global order and keeps its own shard.
  order = list(range(len(examples)))
  random.Random(seed).shuffle(order)
  return [examples[i] for p, i in enumerate(order) if p % size == rank]


def compute_train_steps(num_examples, per_process_batch, size, num_epochs,
                        warmup_proportion, max_train_steps=0, accumulation_steps=1):
  """Steps from the global example count: identical on every rank.

  With gradient accumulation a step is one micro-batch, and the count is a whole
  number of optimizer updates (a multiple of `accumulation_steps`).

  Returns:
    (num_train_steps, num_warmup_steps).
  """
  # Horovod: the global step count divides the examples by the global batch, so
  # every rank stops at the same step.
  steps = int(num_examples / (per_process_batch * size) * num_epochs)
  if max_train_steps > 0:
    steps = min(steps, max_train_steps)
  steps -= steps % accumulation_steps
  return steps, int(steps * warmup_proportion)
