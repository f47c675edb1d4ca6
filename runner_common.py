"""What run_classifier.py and run_pretraining.py share around their own task.

The flags both runners define with the same meaning, their checks, the fields of
the run plan that come from those flags, and the steps from a plan to an
Estimator and to the `model_fn_builder` arguments of either model. Each runner
keeps its own flags, `setup`, phases and `main`; `FLAGS` is read only there.
"""

import os

from absl import flags
import tensorflow as tf

import distributed
from distributed import InputError
import modeling
import optimization


def define_flags(flag_values):
  """Defines the flags both runners share with the same help text, and those of
  `distributed.define_runtime_flags`."""
  flags.DEFINE_string(
      "bert_config_file", None,
      "The config json file corresponding to the pre-trained BERT model. "
      "This specifies the model architecture.", flag_values=flag_values)
  flags.DEFINE_string(
      "init_checkpoint", None,
      "Initial checkpoint (usually from a pre-trained BERT model). Read on rank 0 only.",
      flag_values=flag_values)
  flags.DEFINE_bool("do_train", False, "Whether to run training.",
                    flag_values=flag_values)
  flags.DEFINE_integer("train_batch_size", 32, "Batch size per process for training.",
                       flag_values=flag_values)
  flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.",
                       flag_values=flag_values)
  flags.DEFINE_integer("save_checkpoints_steps", 1000,
                       "How often to save the model checkpoint (rank 0).",
                       flag_values=flag_values)
  flags.DEFINE_integer("iterations_per_loop", 1000,
                       "Accepted for compatibility with Google's script; unused.",
                       flag_values=flag_values)
  flags.DEFINE_bool("use_tpu", False, "Accepted for compatibility; must stay False.",
                    flag_values=flag_values)
  distributed.define_runtime_flags(flag_values)


def validate_flags(flags_obj, actions, required):
  """Checks the shared flags: no TPU, at least one of `actions` (e.g. "do_train")
  set, every flag named in `required` given, positive batch sizes and checkpoint
  interval; raises InputError."""
  if flags_obj.use_tpu:
    raise InputError("--use_tpu: TPUs are not supported; this script runs on GPUs/CPUs")
  if not any(getattr(flags_obj, name) for name in actions):
    options = ["--" + name for name in actions]
    raise InputError("at least one of %s or %s must be set" %
                     (", ".join(options[:-1]), options[-1]))
  for name in required:
    if not getattr(flags_obj, name):
      raise InputError("--%s is required" % name)
  # --save_checkpoints_steps=0 would train and save nothing: eval would then score the
  # initial weights.
  check_positive(flags_obj, ("train_batch_size", "eval_batch_size",
                             "save_checkpoints_steps"))


def _check_flags(flags_obj, names, ok, requirement):
  """Raises InputError naming the first of `names` whose value fails `ok`."""
  for name in names:
    value = getattr(flags_obj, name)
    if not ok(value):
      raise InputError(("--%s must be %s, got " + ("%g" if isinstance(value, float)
                                                    else "%d")) % (name, requirement, value))


def check_positive(flags_obj, names):
  """Raises InputError unless every flag of `names` is > 0."""
  _check_flags(flags_obj, names, lambda value: value > 0, "positive")


def check_non_negative(flags_obj, names):
  """Raises InputError unless every flag of `names` is >= 0."""
  _check_flags(flags_obj, names, lambda value: value >= 0, ">= 0")


def check_trained_model(output_dir, init_checkpoint, do_train, phases):
  """Raises InputError when evaluation or prediction would use untrained weights.

  Without --do_train the Estimator reads the newest checkpoint of `output_dir`, else
  --init_checkpoint; with neither it silently starts from the initial weights and
  would write eval_results.txt / test_results.tsv of a model that never trained.

  Args:
    output_dir: str, --output_dir.
    init_checkpoint: str or None, --init_checkpoint.
    do_train: bool, --do_train.
    phases: list of the flag names of the requested phases other than training,
      e.g. ["do_eval", "do_predict"] (empty: nothing to check).
  """
  if do_train or not phases or init_checkpoint:
    return
  if tf.train.latest_checkpoint(output_dir):
    return
  raise InputError(
      "%s without --do_train: --output_dir=%s holds no checkpoint and no "
      "--init_checkpoint is given (it would score untrained weights); add --do_train "
      "or point --output_dir at a trained run" %
      ("/".join("--" + name for name in phases), output_dir))


def check_output_dir_checkpoint(output_dir, expected):
  """Raises InputError unless the newest checkpoint in `output_dir` (if any) holds
  every variable of `expected` with its shape.

  The Estimator resumes training from that checkpoint and evaluates, predicts and
  exports with it, ahead of --init_checkpoint. One saved by another model (another
  bert_config.json, other labels, another objective) would fail inside TensorFlow's
  restore, on rank 0 alone, with a long traceback.

  Args:
    output_dir: str, --output_dir.
    expected: dict of variable name -> shape, the model's (e.g.
      `modeling.expected_checkpoint_shapes(config, num_labels)`).
  """
  checkpoint = tf.train.latest_checkpoint(output_dir)
  if not checkpoint:
    return
  try:
    saved = dict(tf.train.list_variables(checkpoint))
  except (tf.errors.OpError, ValueError) as e:
    raise InputError("--output_dir=%s: cannot read its checkpoint %s (%s)" %
                     (output_dir, checkpoint, str(e).splitlines()[0]))
  mismatches = modeling.shape_mismatches(saved, expected)
  if not mismatches:
    return
  name, saved_shape, shape = mismatches[0]
  problem = ("has no variable %s" % name if saved_shape is None else
             "holds %s with shape %s where this model has %s" % (
                 name, list(saved_shape), list(shape)))
  raise InputError(
      "--output_dir=%s: its checkpoint %s %s: it was saved by another model (another "
      "--bert_config_file, other labels or another objective); use a new --output_dir, "
      "or the settings it was trained with" %
      (output_dir, os.path.basename(checkpoint), problem))


def read_bert_config(bert_config_file, max_seq_length):
  """The `modeling.BertConfig` of `bert_config_file`; raises InputError if its
  position embeddings are fewer than `max_seq_length`."""
  bert_config = modeling.BertConfig.from_json_file(bert_config_file)
  if max_seq_length > bert_config.max_position_embeddings:
    raise InputError(
        "--max_seq_length=%d exceeds max_position_embeddings=%d of %s" %
        (max_seq_length, bert_config.max_position_embeddings, bert_config_file))
  return bert_config


class RunPlan(object):
  """What a runner's `setup` derives from the flags once; the phases read it, never
  the flags.

  Shared fields (`shared_plan_fields`): runtime (a `distributed.Runtime`), rank,
  size, output_dir (rank 0's checkpoints and results), work_dir (this rank's
  files), per_process_batch, accumulation_steps, global_batch, learning_rate,
  scale_learning_rate, seed, shuffle_buffer, init_checkpoint, keep_checkpoint_max,
  log_every_secs, compute_type, use_xla, fp16_allreduce, eval_batch_size. Each
  runner's `setup` adds its own (see its docstring).
  """

  def __init__(self, **kwargs):
    self.__dict__.update(kwargs)


def shared_plan_fields(flags_obj, runtime):
  """The `RunPlan` fields that both runners take from the same flags (a dict)."""
  k = flags_obj.gradient_accumulation_steps
  return dict(
      runtime=runtime, rank=runtime.rank, size=runtime.size,
      output_dir=flags_obj.output_dir,
      work_dir=distributed.work_dir_of(flags_obj.output_dir, runtime.rank),
      per_process_batch=flags_obj.train_batch_size, accumulation_steps=k,
      # Horovod: the global batch is every rank's micro-batches of one update.
      global_batch=runtime.size * flags_obj.train_batch_size * k,
      learning_rate=flags_obj.learning_rate,
      scale_learning_rate=flags_obj.scale_learning_rate, seed=flags_obj.seed,
      shuffle_buffer=flags_obj.train_shuffle_buffer,
      init_checkpoint=flags_obj.init_checkpoint,
      keep_checkpoint_max=flags_obj.keep_checkpoint_max,
      log_every_secs=flags_obj.log_every_secs,
      compute_type=distributed.choose_compute_type(flags_obj.use_amp,
                                                   runtime.gpu_available),
      use_xla=flags_obj.use_xla, fp16_allreduce=flags_obj.fp16_allreduce,
      eval_batch_size=flags_obj.eval_batch_size)


def start(setup_fn, flags_obj, result_files):
  """`main`'s first step: starts the runtime, derives the plan with
  `setup_fn(flags_obj, runtime)` and prepares the output folders; returns the plan.

  A bad input on any rank (InputError, InputFileError, ConfigError,
  CheckpointError) ends every rank with exit 2 before any collective.
  """
  runtime = distributed.init(flags_obj.horovod_cycle_time_ms,
                             flags_obj.intra_op_threads, flags_obj.inter_op_threads,
                             flags_obj.use_xla)
  # Horovod: every rank checks its inputs; one failure ends them all.
  plan = distributed.plan_or_exit(setup_fn, flags_obj, runtime)
  distributed.prepare_output_dirs(plan.rank, plan.output_dir, plan.work_dir,
                                  result_files)
  return plan


def model_fn_args(plan, unit="examples"):
  """The `model_fn_builder` arguments that both models take from a plan (a dict):
  bert_config, init_checkpoint (rank 0 only), optimizer_settings,
  training_hooks_fn (progress in `unit` per second) and compute_type."""
  return dict(
      bert_config=plan.bert_config,
      # Horovod: only rank 0 reads the initial checkpoint; the broadcast copies it.
      init_checkpoint=plan.init_checkpoint if plan.rank == 0 else None,
      optimizer_settings=optimization.OptimizerSettings(
          init_lr=plan.learning_rate, num_train_steps=plan.num_train_steps,
          num_warmup_steps=plan.num_warmup_steps,
          scale_learning_rate=plan.scale_learning_rate,
          gradient_accumulation_steps=plan.accumulation_steps,
          fp16_allreduce=plan.fp16_allreduce,
          dynamic_loss_scale=plan.compute_type == tf.float16,
          sparse_embedding_allreduce=plan.sparse_embedding_allreduce,
          optimizer_name=plan.optimizer_name, layer_lr_decay=plan.layer_lr_decay,
          trainable_pattern=plan.trainable_pattern),
      training_hooks_fn=distributed.training_hooks_fn(
          plan.runtime, plan.work_dir, plan.output_dir, plan.num_train_steps,
          plan.per_process_batch, plan.log_every_secs, unit=unit),
      compute_type=plan.compute_type)


def make_estimator(plan, model_fn):
  """An Estimator of `model_fn` for this rank. Only rank 0 saves checkpoints and
  summaries."""
  return distributed.make_estimator(
      plan.runtime, model_fn, plan.output_dir, plan.work_dir, plan.seed,
      plan.save_checkpoints_steps, plan.keep_checkpoint_max)
