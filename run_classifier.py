"""BERT finetuning runner for classification, trained on many processes with Horovod.

One process:        python run_classifier.py --task_name=tsv --do_train ...
N processes, local: horovodrun -np N python run_classifier.py ...
N processes, MPI:   mpirun -np N -bind-to none -map-by slot python run_classifier.py ...
Several hosts:      horovodrun -np 8 -H host1:4,host2:4 python run_classifier.py ...

Every `# Horovod:` comment marks a point where distributed training differs from
Google's single-process script.
"""

import functools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import tensorflow as tf

import classifier_data
import classifier_model
import distributed
import export
from distributed import InputError
import modeling
import runner_common
import tokenization
import train_metrics

LOG = train_metrics.LOG
RESULT_FILES = ("eval_results.txt", "test_results.tsv")
POOLING_FILE = "pooling.txt"

FLAGS = flags.FLAGS

## Required parameters (and --bert_config_file: runner_common.define_flags)
flags.DEFINE_string(
    "data_dir", None,
    "The input data dir. Should contain the .tsv files (or other data files) for the task.")
flags.DEFINE_string("task_name", None, "The name of the task to train.")
flags.DEFINE_string("vocab_file", None,
                    "The vocabulary file that the BERT model was trained on.")
flags.DEFINE_string(
    "output_dir", None,
    "The output directory where the model checkpoints and results will be written "
    "(rank 0; rank r > 0 keeps its TFRecords in output_dir/r).")

## Other parameters (and those of runner_common.define_flags: --init_checkpoint,
## --do_train, --train_batch_size, --eval_batch_size, --save_checkpoints_steps,
## --iterations_per_loop, --use_tpu)
flags.DEFINE_bool(
    "do_lower_case", True,
    "Whether to lower case the input text. Should be True for uncased models and "
    "False for cased models.")
flags.DEFINE_integer(
    "max_seq_length", 128,
    "The maximum total input sequence length after WordPiece tokenization. "
    "Sequences longer than this will be truncated, and shorter ones padded.")
flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set (rank 0).")
flags.DEFINE_bool("do_predict", False,
                  "Whether to run the model in inference mode on the test set (rank 0).")
flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predict.")
flags.DEFINE_float("learning_rate", 5e-5,
                   "The initial learning rate for Adam (for one process; see "
                   "--scale_learning_rate).")
flags.DEFINE_float("num_train_epochs", 3.0,
                   "Total number of training epochs to perform.")
flags.DEFINE_float(
    "warmup_proportion", 0.1,
    "Proportion of training to perform linear learning rate warmup for. "
    "E.g., 0.1 = 10% of training.")
flags.DEFINE_float(
    "layer_lr_decay", 1.0,
    "Layer-wise learning-rate decay, in (0, 1]: the pooler and classifier train at "
    "--learning_rate, encoder layer i of L at decay^(L - i) times it, the embeddings "
    "at decay^(L + 1). 1.0 (the default, Google's): one rate for all.")

## Horovod and run-control parameters (and those of distributed.define_runtime_flags)
runner_common.define_flags(FLAGS)
# --help lists them with this script's.
flags.adopt_module_key_flags(runner_common)
flags.adopt_module_key_flags(distributed)
flags.DEFINE_integer(
    "seed", 12345,
    "Seed of the global example order (one shuffle, identical on every rank), of "
    "weight initialization and of the shuffle buffer.")
flags.DEFINE_integer(
    "train_shuffle_buffer", 100,
    "Shuffle buffer of the training input per process; 0 keeps the seeded global "
    "order exactly (every epoch in the same order).")
flags.DEFINE_integer(
    "max_train_steps", 0,
    "If > 0, stop training after this many steps (caps the epoch-derived count).")

## Speed options (the shared ones: distributed.define_runtime_flags)
flags.DEFINE_enum(
    "embedding_allreduce", "auto", ["auto", "dense", "sparse"],
    "How ranks exchange the word-embedding gradient: 'dense' allreduces the whole "
    "[vocab_size, hidden] table, 'sparse' allgathers only the rows each batch "
    "used; 'auto' picks sparse when processes x train_batch_size x max_seq_length "
    "< vocab_size (fewer bytes), on CPUs, without gradient accumulation or "
    "--fp16_allreduce.")
flags.DEFINE_enum(
    "pooling", "cls", list(classifier_model.POOLINGS),
    "The sentence vector the classifier reads: 'cls', BERT's pooler over the [CLS] "
    "token (Google's), or 'mean', the mean of the last layer over the real tokens. "
    "Recorded in output_dir/pooling.txt; later runs on that output_dir must match.")
flags.DEFINE_string(
    "teacher_file", None,
    "Distillation: a file of a teacher model's probabilities for the training "
    "examples (header 'guid<TAB>label...', then 'guid<TAB>probability...' per "
    "example; data/baseline_ngram.py --teacher_file writes one). The training loss "
    "mixes the label's cross-entropy with the teacher's, see --teacher_weight.")
flags.DEFINE_float(
    "teacher_weight", 0.5,
    "With --teacher_file: each training example's loss is (1 - w) x cross-entropy "
    "with its label + w x cross-entropy with the teacher's probabilities, w in [0, 1].")
flags.DEFINE_bool(
    "group_by_length", False,
    "Compute on little padding: training batches hold examples of similar length "
    "(buckets of 16 positions), and every batch (train, eval, predict) is cut after "
    "its longest example. Several times faster where most texts are much shorter "
    "than --max_seq_length. Batches then differ from the default's, so N processes "
    "no longer train exactly as one with N times the batch.")
flags.DEFINE_string(
    "export_dir", None,
    "If set, rank 0 writes a SavedModel of the final checkpoint here (serving "
    "signature: input_ids, input_mask, segment_ids -> probabilities).")


def validate_flags(flags_obj):
  """Checks flag values that need no file access; raises InputError."""
  runner_common.validate_flags(
      flags_obj, ("do_train", "do_eval", "do_predict"),
      ("data_dir", "bert_config_file", "task_name", "vocab_file", "output_dir"))
  if flags_obj.task_name.lower() not in classifier_data.PROCESSORS:
    raise InputError("--task_name=%s: unknown task (choose from %s)" %
                     (flags_obj.task_name, ", ".join(sorted(classifier_data.PROCESSORS))))
  runner_common.check_positive(flags_obj, ("predict_batch_size", "max_seq_length"))
  runner_common.check_non_negative(flags_obj, ("max_train_steps", "train_shuffle_buffer"))
  runner_common.check_positive(flags_obj, ("learning_rate", "num_train_epochs"))
  if not 0.0 < flags_obj.layer_lr_decay <= 1.0:
    raise InputError("--layer_lr_decay must be in (0, 1], got %g" %
                     flags_obj.layer_lr_decay)
  if not 0.0 <= flags_obj.teacher_weight <= 1.0:
    raise InputError("--teacher_weight must be in [0, 1], got %g" %
                     flags_obj.teacher_weight)
  if not 0.0 <= flags_obj.warmup_proportion < 1.0:
    raise InputError("--warmup_proportion must be in [0, 1), got %g" %
                     flags_obj.warmup_proportion)
  if flags_obj.max_seq_length < 3:
    raise InputError("--max_seq_length must be at least 3")
  distributed.validate_runtime_flags(flags_obj)
  if (flags_obj.embedding_allreduce == "sparse" and
      flags_obj.gradient_accumulation_steps > 1):
    raise InputError("--embedding_allreduce=sparse does not work with "
                     "--gradient_accumulation_steps > 1 (Horovod accumulates dense "
                     "gradients); use auto or dense")


def check_checkpoint_matches(init_checkpoint, bert_config, num_labels):
  """Raises modeling.CheckpointError if `init_checkpoint` is missing or its shapes
  differ from the model's."""
  modeling.check_checkpoint_shapes(
      init_checkpoint, modeling.expected_checkpoint_shapes(bert_config, num_labels))


def check_pooling(output_dir, pooling):
  """Raises InputError if output_dir/pooling.txt records another --pooling."""
  path = os.path.join(output_dir, POOLING_FILE)
  if not os.path.exists(path):
    return
  with open(path, encoding="utf-8") as f:
    recorded = f.read().strip()
  if recorded != pooling:
    raise InputError("--pooling=%s, but %s says the model in --output_dir was trained "
                     "with --pooling=%s (pass that, or use another --output_dir)" %
                     (pooling, path, recorded))


def no_step_message(num_examples, flags_obj, size):
  """Why training makes no optimizer update: one line naming the flags to change."""
  batch = "%d x %d processes" % (flags_obj.train_batch_size, size)
  steps, _ = distributed.compute_train_steps(
      num_examples, flags_obj.train_batch_size, size, flags_obj.num_train_epochs, 0.0,
      flags_obj.max_train_steps)
  if steps < 1:
    return ("%d training examples make no step of %s; lower --train_batch_size or "
            "raise --num_train_epochs" % (num_examples, batch))
  if flags_obj.max_train_steps == steps:
    cause, fix = "--max_train_steps=%d" % steps, "raise --max_train_steps"
  else:
    cause = "%d training examples x %g epochs make %d steps of %s" % (
        num_examples, flags_obj.num_train_epochs, steps, batch)
    fix = "raise --num_train_epochs"
  return ("%s: fewer than one update of --gradient_accumulation_steps=%d steps; lower "
          "--gradient_accumulation_steps or %s" % (
              cause, flags_obj.gradient_accumulation_steps, fix))


def setup(flags_obj, runtime):
  """Validates inputs and derives the `runner_common.RunPlan`; raises InputError.

  The plan has the shared fields (see `runner_common.RunPlan`) and: task_name,
  bert_config, tokenizer, processor, label_list, vocab_file, do_lower_case,
  max_seq_length, train/eval/predict_examples (or None), num_train_steps,
  num_warmup_steps, optimizer_name ("adamw"), layer_lr_decay, trainable_pattern
  (None: every variable), save_checkpoints_steps,
  sparse_embedding_allreduce, predict_batch_size, export_dir, pooling,
  teacher_weight, num_teacher_labels (0 without --teacher_file).

  Called from `main` only. Every rank runs this before any collective operation.
  """
  validate_flags(flags_obj)
  # Horovod: rank 0 alone writes in output_dir; it holds the lock.
  if runtime.rank == 0:
    distributed.lock_output_dir(flags_obj.output_dir)
  task_name = flags_obj.task_name.lower()
  bert_config = runner_common.read_bert_config(flags_obj.bert_config_file,
                                               flags_obj.max_seq_length)
  tokenizer = tokenization.load_tokenizer(flags_obj.vocab_file, flags_obj.do_lower_case)
  if len(tokenizer.vocab) > bert_config.vocab_size:
    raise InputError("vocab_file %s has %d tokens, more than vocab_size=%d of %s" %
                     (flags_obj.vocab_file, len(tokenizer.vocab), bert_config.vocab_size,
                      flags_obj.bert_config_file))
  processor = classifier_data.PROCESSORS[task_name]()
  rank, size = runtime.rank, runtime.size

  check_pooling(flags_obj.output_dir, flags_obj.pooling)
  label_list_path = os.path.join(flags_obj.output_dir, "label_list.txt")
  train_examples = None
  if flags_obj.do_train:
    train_examples = processor.get_train_examples(flags_obj.data_dir)
    label_list = processor.get_labels(flags_obj.data_dir, train_examples)
    if not train_examples:
      raise InputError("%s: no training examples" %
                       os.path.join(flags_obj.data_dir, processor.train_file))
  elif task_name == "tsv" and os.path.exists(label_list_path):
    label_list = classifier_data.read_label_list(label_list_path)
  else:
    label_list = processor.get_labels(flags_obj.data_dir)
  if train_examples is not None:
    train_path = os.path.join(flags_obj.data_dir, processor.train_file)
    # Every split's labels are checked here, before any collective: a bad label
    # found in train() would end one rank alone, mid-training.
    classifier_data.check_labels(train_examples, label_list, train_path)
    # Horovod: every rank needs a non-empty shard; an empty one would stop at once
    # and leave the others waiting in their first allreduce.
    if len(train_examples) < size:
      raise InputError("%s: %d training example%s for %d processes; every process "
                       "needs at least one (start fewer processes)" %
                       (train_path, len(train_examples),
                        "" if len(train_examples) == 1 else "s", size))
    if flags_obj.teacher_file:
      classifier_data.attach_teacher_probs(flags_obj.teacher_file, train_examples,
                                           label_list)

  eval_examples = predict_examples = None
  # Horovod: evaluation and prediction run on rank 0 only.
  if flags_obj.do_eval and rank == 0:
    eval_examples = processor.get_dev_examples(flags_obj.data_dir)
    classifier_data.check_labels(eval_examples, label_list,
                                 os.path.join(flags_obj.data_dir, processor.dev_file))
  if flags_obj.do_predict and rank == 0:
    predict_examples = processor.get_test_examples(flags_obj.data_dir)
    classifier_data.check_labels(predict_examples, label_list,
                                 os.path.join(flags_obj.data_dir, processor.test_file))
  # Horovod: only rank 0 reads the initial checkpoint; the broadcast copies it.
  if flags_obj.init_checkpoint and rank == 0:
    check_checkpoint_matches(flags_obj.init_checkpoint, bert_config, len(label_list))
  # Horovod: rank 0 resumes, evaluates and predicts from its own checkpoints.
  if rank == 0:
    runner_common.check_trained_model(
        flags_obj.output_dir, flags_obj.init_checkpoint, flags_obj.do_train,
        [name for name in ("do_eval", "do_predict") if getattr(flags_obj, name)])
    runner_common.check_output_dir_checkpoint(
        flags_obj.output_dir,
        modeling.expected_checkpoint_shapes(bert_config, len(label_list)))

  num_train_steps = num_warmup_steps = 0
  if train_examples is not None:
    num_train_steps, num_warmup_steps = distributed.compute_train_steps(
        len(train_examples), flags_obj.train_batch_size, size,
        flags_obj.num_train_epochs, flags_obj.warmup_proportion,
        flags_obj.max_train_steps, flags_obj.gradient_accumulation_steps)
    if num_train_steps < 1:
      raise InputError(no_step_message(len(train_examples), flags_obj, size))

  save_checkpoints_steps = distributed.checkpoint_interval(
      flags_obj.save_checkpoints_steps, flags_obj.gradient_accumulation_steps)
  if flags_obj.do_train and save_checkpoints_steps != flags_obj.save_checkpoints_steps:
    LOG.info("--save_checkpoints_steps=%d rounded up to %d, a multiple of "
             "--gradient_accumulation_steps=%d (accumulated gradients are not in "
             "checkpoints, so checkpoints fall between updates)",
             flags_obj.save_checkpoints_steps, save_checkpoints_steps,
             flags_obj.gradient_accumulation_steps)

  return runner_common.RunPlan(
      task_name=task_name, bert_config=bert_config, tokenizer=tokenizer,
      processor=processor, label_list=label_list, vocab_file=flags_obj.vocab_file,
      do_lower_case=flags_obj.do_lower_case, max_seq_length=flags_obj.max_seq_length,
      train_examples=train_examples, eval_examples=eval_examples,
      predict_examples=predict_examples,
      num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps,
      optimizer_name="adamw", layer_lr_decay=flags_obj.layer_lr_decay,
      trainable_pattern=None, save_checkpoints_steps=save_checkpoints_steps,
      sparse_embedding_allreduce=distributed.use_sparse_embedding_allreduce(
          flags_obj.embedding_allreduce, size, flags_obj.train_batch_size,
          flags_obj.max_seq_length, bert_config.vocab_size,
          flags_obj.gradient_accumulation_steps, runtime.gpu_available,
          flags_obj.fp16_allreduce),
      predict_batch_size=flags_obj.predict_batch_size,
      group_by_length=flags_obj.group_by_length,
      export_dir=flags_obj.export_dir, pooling=flags_obj.pooling,
      teacher_weight=flags_obj.teacher_weight,
      num_teacher_labels=(len(label_list) if flags_obj.teacher_file and train_examples
                          else 0),
      **runner_common.shared_plan_fields(flags_obj, runtime))


def make_estimator(plan):
  """An Estimator of the classifier for this rank."""
  return runner_common.make_estimator(plan, classifier_model.model_fn_builder(
      num_labels=len(plan.label_list), task_name=plan.task_name, pooling=plan.pooling,
      teacher_weight=plan.teacher_weight, **runner_common.model_fn_args(plan)))


def train(plan):
  """Converts this rank's shard and trains to `num_train_steps` on every rank."""
  # Horovod: every rank sees the same seeded global order and keeps its own shard.
  shard = distributed.shard_examples(plan.train_examples, plan.seed, plan.rank,
                                     plan.size)
  train_file = os.path.join(plan.work_dir, "train.tf_record")
  classifier_data.convert_examples_cached(shard, plan.label_list, plan.max_seq_length,
                                          plan.tokenizer, train_file)

  k = plan.accumulation_steps
  LOG.info("training: %d examples, %d processes x batch %d%s = global batch %d, "
           "%d steps (%d warmup%s%s); %s", len(plan.train_examples),
           plan.size, plan.per_process_batch, " x %d accumulated" % k if k > 1 else "",
           plan.global_batch, plan.num_train_steps, plan.num_warmup_steps,
           ", layer-wise rate decay %g" % plan.layer_lr_decay
           if plan.layer_lr_decay != 1.0 else "",
           ", teacher weight %g" % plan.teacher_weight if plan.num_teacher_labels else "",
           distributed.describe(plan.runtime, plan.compute_type, plan.use_xla,
                                plan.fp16_allreduce, plan.sparse_embedding_allreduce))

  def input_fn_for_step(start_step):
    return classifier_data.file_based_input_fn_builder(
        train_file, plan.max_seq_length, plan.per_process_batch, is_training=True,
        # Horovod: a seed per rank, so the ranks' shuffle buffers differ.
        shuffle_buffer=plan.shuffle_buffer, seed=plan.seed + plan.rank,
        skip_examples=distributed.resume_position(start_step, plan.per_process_batch,
                                                  len(shard), plan.shuffle_buffer),
        num_teacher_labels=plan.num_teacher_labels,
        group_by_length=plan.group_by_length)

  # Horovod: every rank resumes from rank 0's checkpoint and stops at the same step.
  distributed.train_to_step(lambda: make_estimator(plan), input_fn_for_step,
                            plan.output_dir, plan.rank, plan.num_train_steps, k)


def inference_input(plan, examples, file_name, batch_size):
  """Converts eval or predict examples (rank 0) and builds their input_fn.

  With --group_by_length they run shortest first, so each batch is cut short.

  Returns:
    (order, input_fn): order[j] is the index in `examples` of the j-th example
    the input_fn yields.
  """
  order = (classifier_data.length_order(examples) if plan.group_by_length
           else list(range(len(examples))))
  path = os.path.join(plan.output_dir, file_name)
  classifier_data.convert_examples_cached([examples[i] for i in order], plan.label_list,
                                          plan.max_seq_length, plan.tokenizer, path)
  return order, classifier_data.file_based_input_fn_builder(
      path, plan.max_seq_length, batch_size, is_training=False,
      group_by_length=plan.group_by_length)


def evaluate(plan):
  """Evaluates on the dev set (rank 0) and writes eval_results.txt."""
  _, input_fn = inference_input(plan, plan.eval_examples, "eval.tf_record",
                                plan.eval_batch_size)
  result = make_estimator(plan).evaluate(input_fn=input_fn)
  train_metrics.write_eval_results(os.path.join(plan.output_dir, "eval_results.txt"),
                                   result, "%d examples" % len(plan.eval_examples))
  return result


def predict(plan):
  """Predicts the test set (rank 0) and writes test_results.tsv in input order."""
  order, input_fn = inference_input(plan, plan.predict_examples, "predict.tf_record",
                                    plan.predict_batch_size)
  probabilities = [prediction["probabilities"]
                   for prediction in make_estimator(plan).predict(input_fn=input_fn)]
  if len(probabilities) != len(order):
    raise RuntimeError("predicted %d of %d test examples" %
                       (len(probabilities), len(order)))
  lines = [None] * len(order)
  for position, row in zip(order, probabilities):
    lines[position] = "\t".join(str(p) for p in row) + "\n"
  train_metrics.atomic_write_text(os.path.join(plan.output_dir, "test_results.tsv"),
                                  "".join(lines))
  LOG.info("wrote %d predictions to %s", len(lines),
           os.path.join(plan.output_dir, "test_results.tsv"))


def export_model(plan):
  """Writes a SavedModel of rank 0's latest checkpoint to --export_dir."""
  checkpoint = tf.train.latest_checkpoint(plan.output_dir)
  if not checkpoint:
    raise InputError("--export_dir: no checkpoint in %s to export" % plan.output_dir)
  path = export.export_saved_model(
      bert_config=plan.bert_config, label_list=plan.label_list, checkpoint=checkpoint,
      export_dir=plan.export_dir, max_seq_length=plan.max_seq_length,
      vocab_file=plan.vocab_file, do_lower_case=plan.do_lower_case,
      pooling=plan.pooling)
  LOG.info("exported SavedModel of %s to %s", checkpoint, path)


def main(_):
  # Horovod: a bad input on any rank ends every rank (exit 2) before any collective.
  plan = runner_common.start(setup, FLAGS, RESULT_FILES)
  # Horovod: rank 0 owns output_dir's labels.
  if plan.rank == 0 and FLAGS.do_train:
    train_metrics.atomic_write_text(os.path.join(plan.output_dir, "label_list.txt"),
                                    "".join(l + "\n" for l in plan.label_list))
    train_metrics.atomic_write_text(os.path.join(plan.output_dir, POOLING_FILE),
                                    plan.pooling + "\n")

  if FLAGS.do_train:
    train(plan)
  if plan.rank == 0 and plan.export_dir:
    export_model(plan)
  # Horovod: evaluate and predict on rank 0 only; the other ranks are done.
  if plan.rank == 0 and FLAGS.do_eval:
    evaluate(plan)
  if plan.rank == 0 and FLAGS.do_predict:
    predict(plan)


if __name__ == "__main__":
  # An unknown flag or a bad value is one error line and exit 2 on every rank.
  app.run(main, flags_parser=functools.partial(distributed.parse_flags_or_exit, FLAGS))
