"""BERT pretraining (masked LM + next sentence, or a contrastive objective), trained
on many processes with Horovod.

One process:        python run_pretraining.py --input_file=data/pretrain-*.tfrecord \
                      --bert_config_file=bert_config.json --output_dir=out --do_train
N processes, local: horovodrun -np N python run_pretraining.py ...
N processes, MPI:   mpirun -np N -bind-to none -map-by slot python run_pretraining.py ...
Several hosts:      horovodrun -np 8 -H host1:4,host2:4 python run_pretraining.py ...

The input is the TFRecords of create_pretraining_data.py. The checkpoints use
Google's variable names: a Google BERT checkpoint continues pretraining here
(--init_checkpoint), and run_classifier.py --init_checkpoint fine-tunes ours.
Every `# Horovod:` comment marks a point where distributed training differs from
Google's single-process script.
"""

import functools
import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

import contrastive_model
import distributed
from distributed import InputError
import modeling
import pretraining_data
import pretraining_model
import runner_common
import train_metrics

LOG = train_metrics.LOG
RESULT_FILES = ("eval_results.txt",)

FLAGS = flags.FLAGS
# --objective -> contrastive_model's positives.
CONTRASTIVE_POSITIVES = {"simcse": "dropout", "segment_pairs": "segments"}

## Required parameters (and --bert_config_file: runner_common.define_flags)
flags.DEFINE_string(
    "input_file", None,
    "Input TF example files (can be a glob or comma separated).")
flags.DEFINE_string(
    "output_dir", None,
    "The output directory where the model checkpoints will be written (rank 0; "
    "rank r > 0 keeps its own small files in output_dir/r).")

## Other parameters (and those of runner_common.define_flags: --init_checkpoint,
## --do_train, --train_batch_size, --eval_batch_size, --save_checkpoints_steps,
## --iterations_per_loop, --use_tpu)
flags.DEFINE_integer(
    "max_seq_length", 128,
    "The maximum total input sequence length after WordPiece tokenization. "
    "Sequences longer than this will be truncated, and sequences shorter "
    "than this will be padded. Must match data generation.")
flags.DEFINE_integer(
    "max_predictions_per_seq", 20,
    "Maximum number of masked LM predictions per sequence. "
    "Must match data generation.")
flags.DEFINE_bool("do_eval", False,
                  "Whether to run eval on the input files (rank 0).")
flags.DEFINE_float("learning_rate", 5e-5,
                   "The initial learning rate (for one process; see "
                   "--scale_learning_rate).")
flags.DEFINE_integer(
    "num_train_steps", 100000,
    "Number of training steps: global steps, each one batch of every process "
    "(with --gradient_accumulation_steps=k, k steps make one update).")
flags.DEFINE_integer("num_warmup_steps", 10000,
                     "Number of warmup steps (global steps, as --num_train_steps).")
flags.DEFINE_integer("max_eval_steps", 100,
                     "Maximum number of eval steps (0 = all the input once).")
flags.DEFINE_enum(
    "optimizer", "adamw", ["adamw", "lamb"],
    "The optimizer: 'adamw' (Google's Adam with decoupled weight decay) or 'lamb' "
    "(layer-wise adaptive rates for large batches, You et al. 2019).")
flags.DEFINE_enum(
    "objective", "masked_lm", ["masked_lm"] + list(CONTRASTIVE_POSITIVES),
    "'masked_lm': Google's masked LM + next sentence. Contrastive (the encoder "
    "alone, no cls/ heads, on the same records with the masks put back; each "
    "pair's first view against the second views of the global batch; the vector "
    "is the mean of the last layer, as run_classifier.py --pooling=mean): "
    "'simcse', unsupervised SimCSE (Gao et al. 2021), the first segment twice "
    "under dropout; 'segment_pairs', the first segment against its true next one.")
flags.DEFINE_float("contrastive_temperature", 0.05,
                   "Softmax temperature of the cosine similarities (contrastive "
                   "objectives).")
flags.DEFINE_string(
    "train_variables", None,
    "A regular expression: train only the variables whose names it matches "
    "(re.search), e.g. '^cls/' to fit new heads on a loaded encoder first; the "
    "others keep the values they were loaded with. Default: every variable.")

## Horovod and run-control parameters (and those of distributed.define_runtime_flags:
## threads, Horovod's cycle, --use_amp, --use_xla, --fp16_allreduce,
## --gradient_accumulation_steps, --scale_learning_rate, logging and checkpoints kept)
runner_common.define_flags(FLAGS)
# --help lists them with this script's.
flags.adopt_module_key_flags(runner_common)
flags.adopt_module_key_flags(distributed)
flags.DEFINE_integer(
    "seed", 12345,
    "Seed of weight initialization and of the input shuffles (the file order and "
    "the shuffle buffer of each rank).")
flags.DEFINE_integer(
    "train_shuffle_buffer", 100,
    "Shuffle buffer of the training input per process; 0 reads the records in the "
    "files' order (with fewer files than processes, the processes' batches then "
    "together make exactly the batches of one process).")


def validate_flags(flags_obj):
  """Checks flag values that need no file access; raises InputError."""
  runner_common.validate_flags(flags_obj, ("do_train", "do_eval"),
                               ("input_file", "bert_config_file", "output_dir"))
  distributed.validate_runtime_flags(flags_obj)
  runner_common.check_positive(
      flags_obj, ("max_seq_length", "max_predictions_per_seq", "num_train_steps"))
  runner_common.check_non_negative(
      flags_obj, ("num_warmup_steps", "max_eval_steps", "train_shuffle_buffer"))
  runner_common.check_positive(flags_obj, ("learning_rate", "contrastive_temperature"))
  if flags_obj.max_predictions_per_seq > flags_obj.max_seq_length:
    raise InputError("--max_predictions_per_seq=%d exceeds --max_seq_length=%d" %
                     (flags_obj.max_predictions_per_seq, flags_obj.max_seq_length))
  k = flags_obj.gradient_accumulation_steps
  for name in ("num_train_steps", "num_warmup_steps"):
    if getattr(flags_obj, name) % k:
      raise InputError("--%s=%d is not a multiple of --gradient_accumulation_steps=%d "
                       "(steps count micro-batches; a run ends on a whole update)" %
                       (name, getattr(flags_obj, name), k))


def check_init_checkpoint(init_checkpoint, bert_config):
  """Raises modeling.CheckpointError unless `init_checkpoint` holds pretraining
  variables (Google's or ours, or only bert/ ones) of this config's shapes."""
  modeling.check_checkpoint_shapes(
      init_checkpoint, pretraining_model.expected_checkpoint_shapes(bert_config))


def model_checkpoint_shapes(objective, bert_config):
  """Variable name -> shape of the model of `objective` (an OrderedDict)."""
  if objective in CONTRASTIVE_POSITIVES:
    return contrastive_model.expected_checkpoint_shapes(bert_config)
  return pretraining_model.expected_checkpoint_shapes(bert_config)


def check_train_variables(pattern, names):
  """Raises InputError unless `pattern` (--train_variables) is a regular
  expression that matches some of the model's variable `names`."""
  try:
    regex = re.compile(pattern)
  except re.error as e:
    raise InputError("--train_variables=%s is not a regular expression: %s" % (pattern, e))
  if not any(regex.search(name) for name in names):
    raise InputError("--train_variables=%s matches none of the model's variables "
                     "(they are named like %s and %s)" % (pattern, names[0], names[-1]))


def setup(flags_obj, runtime):
  """Validates inputs and derives the `runner_common.RunPlan`; raises InputError.

  The plan has the shared fields (see `runner_common.RunPlan`) and: bert_config,
  input_files, max_seq_length, max_predictions_per_seq, num_train_steps,
  num_warmup_steps, objective, contrastive_temperature, optimizer_name,
  layer_lr_decay (1.0), trainable_pattern (--train_variables),
  save_checkpoints_steps, max_eval_steps, sparse_embedding_allreduce (False).

  Called from `main` only. Every rank runs this before any collective operation.
  """
  validate_flags(flags_obj)
  # Horovod: rank 0 alone writes in output_dir; it holds the lock.
  if runtime.rank == 0:
    distributed.lock_output_dir(flags_obj.output_dir, lock_name=".run_pretraining.lock")
  bert_config = runner_common.read_bert_config(flags_obj.bert_config_file,
                                               flags_obj.max_seq_length)
  if flags_obj.train_variables is not None:
    check_train_variables(flags_obj.train_variables,
                          list(model_checkpoint_shapes(flags_obj.objective, bert_config)))
  input_files = pretraining_data.expand_input_files(flags_obj.input_file)
  # Horovod: each rank checks the files it reads; rank 0 reads them all for eval.
  to_check = set()
  if flags_obj.do_train:
    to_check.update(pretraining_data.shard_files(input_files, runtime.rank,
                                                 runtime.size)[0])
  if flags_obj.do_eval and runtime.rank == 0:
    to_check.update(input_files)
  for path in sorted(to_check):
    pretraining_data.check_input_file(path, flags_obj.max_seq_length,
                                      flags_obj.max_predictions_per_seq)
  # Horovod: only rank 0 reads the initial checkpoint; the broadcast copies it.
  if flags_obj.init_checkpoint and runtime.rank == 0:
    check_init_checkpoint(flags_obj.init_checkpoint, bert_config)
  # Horovod: rank 0 resumes and evaluates from its own checkpoints.
  if runtime.rank == 0:
    runner_common.check_trained_model(
        flags_obj.output_dir, flags_obj.init_checkpoint, flags_obj.do_train,
        ["do_eval"] if flags_obj.do_eval else [])
    runner_common.check_output_dir_checkpoint(
        flags_obj.output_dir, model_checkpoint_shapes(flags_obj.objective, bert_config))

  return runner_common.RunPlan(
      bert_config=bert_config, input_files=input_files,
      max_seq_length=flags_obj.max_seq_length,
      max_predictions_per_seq=flags_obj.max_predictions_per_seq,
      num_train_steps=flags_obj.num_train_steps,
      num_warmup_steps=flags_obj.num_warmup_steps,
      objective=flags_obj.objective,
      contrastive_temperature=flags_obj.contrastive_temperature,
      optimizer_name=flags_obj.optimizer, layer_lr_decay=1.0,
      trainable_pattern=flags_obj.train_variables,
      sparse_embedding_allreduce=False,
      # A checkpoint between two updates, never inside an accumulation window.
      save_checkpoints_steps=distributed.checkpoint_interval(
          flags_obj.save_checkpoints_steps, flags_obj.gradient_accumulation_steps),
      max_eval_steps=flags_obj.max_eval_steps or None,
      **runner_common.shared_plan_fields(flags_obj, runtime))


def make_estimator(plan):
  """An Estimator of the pretraining model (of `plan.objective`) for this rank."""
  args = runner_common.model_fn_args(plan, unit="sequences")
  if plan.objective in CONTRASTIVE_POSITIVES:
    return runner_common.make_estimator(plan, contrastive_model.model_fn_builder(
        temperature=plan.contrastive_temperature,
        positives=CONTRASTIVE_POSITIVES[plan.objective], rank=plan.rank,
        # Horovod: every rank's second views are negatives of every rank's queries,
        # and the loss divides by the mean count of queries of all ranks, so N
        # ranks x batch b train as one process with batch N x b.
        gather_fn=distributed.gather_over_processes if plan.size > 1 else None,
        **args))
  return runner_common.make_estimator(plan, pretraining_model.model_fn_builder(
      # Horovod: the masked-LM loss divides by the mean prediction count of all
      # ranks, so N ranks x batch b train as one process with batch N x b.
      mean_over_processes=distributed.average_over_processes if plan.size > 1 else None,
      **args))


def train(plan):
  """Trains to `num_train_steps` on every rank, resuming from rank 0's checkpoint."""
  k = plan.accumulation_steps
  LOG.info("pretraining: %s; %d processes x batch %d%s = global batch %d sequences, "
           "%d steps (%d warmup), %s, %s%s; %s",
           pretraining_data.describe_sharding(len(plan.input_files), plan.size),
           plan.size, plan.per_process_batch, " x %d accumulated" % k if k > 1 else "",
           plan.global_batch, plan.num_train_steps, plan.num_warmup_steps,
           plan.objective, plan.optimizer_name,
           "" if plan.trainable_pattern is None else
           ", training only the variables matching %r" % plan.trainable_pattern,
           distributed.describe(plan.runtime, plan.compute_type, plan.use_xla,
                                plan.fp16_allreduce))

  def input_fn_for_step(start_step):
    return pretraining_data.input_fn_builder(
        plan.input_files, plan.max_seq_length, plan.max_predictions_per_seq,
        plan.per_process_batch, is_training=True,
        # Horovod: this rank's files (or records), shuffled with a seed of its own.
        rank=plan.rank, size=plan.size, shuffle_buffer=plan.shuffle_buffer,
        seed=plan.seed + plan.rank, start_step=start_step)

  # Horovod: every rank resumes from rank 0's checkpoint and stops at the same step.
  distributed.train_to_step(lambda: make_estimator(plan), input_fn_for_step,
                            plan.output_dir, plan.rank, plan.num_train_steps, k)


def evaluate(plan):
  """Evaluates on the input files (rank 0) and writes eval_results.txt."""
  input_fn = pretraining_data.input_fn_builder(
      plan.input_files, plan.max_seq_length, plan.max_predictions_per_seq,
      plan.eval_batch_size, is_training=False)
  result = make_estimator(plan).evaluate(input_fn=input_fn, steps=plan.max_eval_steps)
  train_metrics.write_eval_results(os.path.join(plan.output_dir, "eval_results.txt"),
                                   result, "%d input files" % len(plan.input_files))
  return result


def main(_):
  # Horovod: a bad input on any rank ends every rank (exit 2) before any collective.
  plan = runner_common.start(setup, FLAGS, RESULT_FILES)

  if FLAGS.do_train:
    train(plan)
  # Horovod: evaluate on rank 0 only; the other ranks are done.
  if plan.rank == 0 and FLAGS.do_eval:
    evaluate(plan)


if __name__ == "__main__":
  # An unknown flag or a bad value is one error line and exit 2 on every rank.
  app.run(main, flags_parser=functools.partial(distributed.parse_flags_or_exit, FLAGS))
