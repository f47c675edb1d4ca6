"""BERT finetuning runner for classification, trained on many processes with Horovod.

One process:        python run_classifier.py --task_name=tsv --do_train ...
N processes, local: horovodrun -np N python run_classifier.py ...
N processes, MPI:   mpirun -np N -bind-to none -map-by slot python run_classifier.py ...
Several hosts:      horovodrun -np 8 -H host1:4,host2:4 python run_classifier.py ...

Every `# Horovod:` comment marks a point where distributed training differs from
Google's single-process script.
"""

import collections
import csv
import fcntl
import hashlib
import json
import logging
import os
import random
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import tensorflow as tf
import tensorflow_estimator as tf_estimator

from distributed import hvd
import modeling
import optimization
import tokenization
import train_metrics

tf1 = tf.compat.v1
LOG = train_metrics.LOG
# Exit codes: 0 every requested phase completed; 1 a failure while running (a dead
# peer, out of memory, ...); 2 bad input (flags, files, lines, labels, configs).
EXIT_BAD_INPUT = 2
RESULT_FILES = ("eval_results.txt", "test_results.tsv")
# Horovod's cycle on hosts without GPUs (see --horovod_cycle_time_ms).
CPU_HOROVOD_CYCLE_TIME_MS = 10.0
_LOCK_FILES = []  # Open lock files: held for the life of the process.

FLAGS = flags.FLAGS

## Required parameters
flags.DEFINE_string(
    "data_dir", None,
    "The input data dir. Should contain the .tsv files (or other data files) for the task.")
flags.DEFINE_string(
    "bert_config_file", None,
    "The config json file corresponding to the pre-trained BERT model. "
    "This specifies the model architecture.")
flags.DEFINE_string("task_name", None, "The name of the task to train.")
flags.DEFINE_string("vocab_file", None,
                    "The vocabulary file that the BERT model was trained on.")
flags.DEFINE_string(
    "output_dir", None,
    "The output directory where the model checkpoints and results will be written "
    "(rank 0; rank r > 0 keeps its TFRecords in output_dir/r).")

## Other parameters
flags.DEFINE_string(
    "init_checkpoint", None,
    "Initial checkpoint (usually from a pre-trained BERT model). Read on rank 0 only.")
flags.DEFINE_bool(
    "do_lower_case", True,
    "Whether to lower case the input text. Should be True for uncased models and "
    "False for cased models.")
flags.DEFINE_integer(
    "max_seq_length", 128,
    "The maximum total input sequence length after WordPiece tokenization. "
    "Sequences longer than this will be truncated, and shorter ones padded.")
flags.DEFINE_bool("do_train", False, "Whether to run training.")
flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set (rank 0).")
flags.DEFINE_bool("do_predict", False,
                  "Whether to run the model in inference mode on the test set (rank 0).")
flags.DEFINE_integer("train_batch_size", 32, "Batch size per process for training.")
flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.")
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
flags.DEFINE_integer("save_checkpoints_steps", 1000,
                     "How often to save the model checkpoint (rank 0).")
flags.DEFINE_integer("iterations_per_loop", 1000,
                     "Accepted for compatibility with Google's script; unused.")
flags.DEFINE_bool("use_tpu", False, "Accepted for compatibility; must stay False.")

## Horovod and run-control parameters
flags.DEFINE_integer(
    "seed", 12345,
    "Seed of the global example order (one shuffle, identical on every rank), of "
    "weight initialization and of the shuffle buffer.")
flags.DEFINE_bool(
    "scale_learning_rate", True,
    "Multiply the learning rate by the number of processes (the global batch is "
    "train_batch_size x processes).")
flags.DEFINE_integer(
    "train_shuffle_buffer", 100,
    "Shuffle buffer of the training input per process; 0 keeps the seeded global "
    "order exactly (every epoch in the same order).")
flags.DEFINE_integer(
    "intra_op_threads", 0,
    "CPU threads per process for one op; 0 = cores on this host / processes on "
    "this host.")
flags.DEFINE_integer("inter_op_threads", 2,
                     "CPU threads per process for running independent ops.")
flags.DEFINE_integer(
    "max_train_steps", 0,
    "If > 0, stop training after this many steps (caps the epoch-derived count).")
flags.DEFINE_float("log_every_secs", 10.0,
                   "Seconds between progress lines on rank 0.")
flags.DEFINE_integer("keep_checkpoint_max", 3, "Checkpoints kept by rank 0.")

## Speed options
flags.DEFINE_bool("use_xla", False, "Compile the training graph with XLA (JIT).")
flags.DEFINE_bool(
    "use_amp", False,
    "Mixed precision: float16 with dynamic loss scaling on GPUs, bfloat16 on CPUs "
    "that support it (avx512_bf16 or amx_bf16); variables stay float32.")
flags.DEFINE_bool("fp16_allreduce", False,
                  "Compress gradients to float16 for the Horovod allreduce.")
flags.DEFINE_enum(
    "embedding_allreduce", "auto", ["auto", "dense", "sparse"],
    "How ranks exchange the word-embedding gradient: 'dense' allreduces the whole "
    "[vocab_size, hidden] table, 'sparse' allgathers only the rows each batch "
    "used; 'auto' picks sparse when processes x train_batch_size x max_seq_length "
    "< vocab_size (fewer bytes) and no gradient accumulation is on.")
flags.DEFINE_float(
    "horovod_cycle_time_ms", 0.0,
    "Horovod's cycle (HOROVOD_CYCLE_TIME): how often ranks coordinate ready "
    "gradients. 0 = the HOROVOD_CYCLE_TIME environment variable if set, else "
    "%g ms on hosts without GPUs (each cycle wakes threads on the cores that "
    "compute) and Horovod's own default (1 ms) with GPUs." % CPU_HOROVOD_CYCLE_TIME_MS)
flags.DEFINE_integer(
    "gradient_accumulation_steps", 1,
    "Micro-batches of --train_batch_size per optimizer update (one allreduce per "
    "update); the global batch is train_batch_size x this x processes.")
flags.DEFINE_string(
    "export_dir", None,
    "If set, rank 0 writes a SavedModel of the final checkpoint here (serving "
    "signature: input_ids, input_mask, segment_ids -> probabilities).")


class InputError(ValueError):
  """Bad user input: a file, line, label or flag that cannot be used."""


class InputExample(object):
  """A single training/test example for simple sequence classification."""

  def __init__(self, guid, text_a, text_b=None, label=None):
    """Constructs a InputExample.

    Args:
      guid: Unique id for the example ("train-12").
      text_a: string. The untokenized text of the first sequence.
      text_b: (Optional) string. The untokenized text of the second sequence.
      label: (Optional) string. The label of the example.
    """
    self.guid = guid
    self.text_a = text_a
    self.text_b = text_b
    self.label = label


class InputFeatures(object):
  """A single set of features of data."""

  def __init__(self, input_ids, input_mask, segment_ids, label_id, is_real_example=True):
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.label_id = label_id
    self.is_real_example = is_real_example


class DataProcessor(object):
  """Base class for data converters for sequence classification data sets."""

  train_file = "train.tsv"
  dev_file = "dev.tsv"
  test_file = "test.tsv"

  def get_train_examples(self, data_dir):
    """Gets a collection of `InputExample`s for the train set."""
    return self._create_examples(self._read_tsv(data_dir, self.train_file), "train")

  def get_dev_examples(self, data_dir):
    """Gets a collection of `InputExample`s for the dev set."""
    return self._create_examples(self._read_tsv(data_dir, self.dev_file), "dev")

  def get_test_examples(self, data_dir):
    """Gets a collection of `InputExample`s for prediction."""
    return self._create_examples(self._read_tsv(data_dir, self.test_file), "test")

  def get_labels(self, data_dir=None, train_examples=None):
    """Gets the list of labels for this data set.

    Tasks whose labels come from the data use `train_examples` when given rather
    than reading the training file again.
    """
    raise NotImplementedError()

  def _create_examples(self, rows, set_type):
    raise NotImplementedError()

  @classmethod
  def _read_tsv(cls, data_dir, name, quotechar=None):
    """Reads a tab separated file into (path, line_number, fields) rows."""
    path = os.path.join(data_dir, name)
    text = read_text_file(path)
    reader = csv.reader(text.splitlines(), delimiter="\t", quotechar=quotechar)
    return [(path, i + 1, row) for i, row in enumerate(reader)]

  @staticmethod
  def _field(row, index):
    """Field `index` of a row, or an InputError naming the file and line."""
    path, line, fields = row
    if index >= len(fields):
      raise InputError("%s:%d: expected at least %d tab-separated fields, got %d" %
                       (path, line, index + 1, len(fields)))
    return tokenization.convert_to_unicode(fields[index])


def read_text_file(path):
  """Reads a UTF-8 text file, raising InputError naming it when that fails."""
  if not os.path.isfile(path):
    raise InputError("%s: no such file" % path)
  try:
    with open(path, "r", encoding="utf-8") as f:
      return f.read()
  except UnicodeDecodeError as e:
    raise InputError("%s: not valid UTF-8 (byte %d)" % (path, e.start))
  except OSError as e:
    raise InputError("%s: cannot read (%s)" % (path, e.strerror or e))


class TsvProcessor(DataProcessor):
  """Single-sentence task: `label<TAB>text` lines in train.tsv, dev.tsv, test.tsv.

  The label list is the sorted distinct labels of train.tsv.
  """

  def get_labels(self, data_dir=None, train_examples=None):
    if train_examples is None:
      train_examples = self.get_train_examples(data_dir)
    return sorted({ex.label for ex in train_examples})

  def _create_examples(self, rows, set_type):
    examples = []
    for row in rows:
      label, text = self._parse(row)
      examples.append(InputExample(guid="%s-%d" % (set_type, row[1]), text_a=text,
                                   label=label))
    return examples

  def _parse(self, row):
    path, line, fields = row
    if len(fields) != 2:
      raise InputError("%s:%d: expected 'label<TAB>text', got %d field(s)" %
                       (path, line, len(fields)))
    label, text = fields[0].strip(), fields[1].strip()
    if not label:
      raise InputError("%s:%d: empty label" % (path, line))
    if not text:
      raise InputError("%s:%d: empty text" % (path, line))
    return label, text

  @classmethod
  def _read_tsv(cls, data_dir, name, quotechar=None):
    """Reads `label<TAB>text` lines, skipping blank lines (no quoting)."""
    path = os.path.join(data_dir, name)
    rows = []
    for i, line in enumerate(read_text_file(path).split("\n")):
      line = line.rstrip("\r")
      if line.strip():
        rows.append((path, i + 1, line.split("\t")))
    return rows


class ColumnProcessor(DataProcessor):
  """A GLUE-style task whose fields sit at fixed columns of tab-separated files.

  Subclasses set `labels`, `columns` = (text_a, text_b or None, label) for the
  train and dev files and `test_columns` = (text_a, text_b or None) for the test
  file (column -1 is the last one), and which files start with a header line.
  """

  labels = ()
  columns = (0, None, 1)
  test_columns = (0, None)
  header = True
  test_header = True

  def get_labels(self, data_dir=None, train_examples=None):
    return list(self.labels)

  def _create_examples(self, rows, set_type):
    is_test = set_type == "test"
    a_col, b_col = (self.test_columns if is_test else self.columns)[:2]
    skip_first = self.test_header if is_test else self.header
    examples = []
    for i, row in enumerate(rows):
      if i == 0 and skip_first:
        continue
      # Test files carry no labels: the first label is a placeholder.
      label = self.labels[0] if is_test else self._column(row, self.columns[2])
      text_b = None if b_col is None else self._column(row, b_col)
      examples.append(InputExample("%s-%d" % (set_type, row[1]),
                                   self._column(row, a_col), text_b, label))
    return examples

  def _column(self, row, index):
    return self._field(row, len(row[2]) - 1 if index == -1 else index)


class ColaProcessor(ColumnProcessor):
  """Processor for the CoLA data set (GLUE version)."""
  labels = ("0", "1")
  columns = (3, None, 1)
  test_columns = (1, None)
  header = False


class MrpcProcessor(ColumnProcessor):
  """Processor for the MRPC data set (GLUE version)."""
  labels = ("0", "1")
  columns = (3, 4, 0)
  test_columns = (3, 4)


class MnliProcessor(ColumnProcessor):
  """Processor for the MultiNLI data set (GLUE version), matched dev/test."""
  dev_file = "dev_matched.tsv"
  test_file = "test_matched.tsv"
  labels = ("contradiction", "entailment", "neutral")
  columns = (8, 9, -1)
  test_columns = (8, 9)


class Sst2Processor(ColumnProcessor):
  """Processor for the SST-2 data set (GLUE version): `sentence<TAB>label`."""
  labels = ("0", "1")
  columns = (0, None, 1)
  test_columns = (1, None)


class QnliProcessor(ColumnProcessor):
  """Processor for the QNLI data set (GLUE version): question, sentence, label."""
  labels = ("entailment", "not_entailment")
  columns = (1, 2, 3)
  test_columns = (1, 2)


class RteProcessor(QnliProcessor):
  """Processor for the RTE data set (GLUE version): sentence1, sentence2, label."""


class QqpProcessor(ColumnProcessor):
  """Processor for the QQP data set (GLUE version): question1, question2, is_duplicate."""
  labels = ("0", "1")
  columns = (3, 4, 5)
  test_columns = (1, 2)


class XnliProcessor(DataProcessor):
  """Processor for the XNLI data set (Chinese by default, as in Google's script)."""

  language = "zh"

  def get_labels(self, data_dir=None, train_examples=None):
    return ["contradiction", "entailment", "neutral"]

  def get_train_examples(self, data_dir):
    rows = self._read_tsv(os.path.join(data_dir, "multinli"),
                          "multinli.train.%s.tsv" % self.language)
    examples = []
    for i, row in enumerate(rows):
      if i == 0:
        continue
      label = self._field(row, 2)
      if label == "contradictory":
        label = "contradiction"
      examples.append(InputExample("train-%d" % i, self._field(row, 0),
                                   self._field(row, 1), label))
    return examples

  def get_dev_examples(self, data_dir):
    rows = self._read_tsv(data_dir, "xnli.dev.tsv")
    examples = []
    for i, row in enumerate(rows):
      if i == 0 or self._field(row, 0) != self.language:
        continue
      examples.append(InputExample("dev-%d" % i, self._field(row, 6),
                                   self._field(row, 7), self._field(row, 1)))
    return examples

  def get_test_examples(self, data_dir):
    raise InputError("task xnli has no test set; use --do_eval")


PROCESSORS = {
    "cola": ColaProcessor,
    "mnli": MnliProcessor,
    "mrpc": MrpcProcessor,
    "qnli": QnliProcessor,
    "qqp": QqpProcessor,
    "rte": RteProcessor,
    "sst2": Sst2Processor,
    "xnli": XnliProcessor,
    "tsv": TsvProcessor,
}


def convert_single_example(ex_index, example, label_map, max_seq_length, tokenizer):
  """Converts a single `InputExample` into a single `InputFeatures`.

  Raises:
    InputError: if the example's label is not in `label_map`.
  """
  if example.label not in label_map:
    raise InputError("%s: label %r is not among the training labels %s" %
                     (example.guid, example.label, sorted(label_map)))
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
  if tokens_b:
    # [CLS], [SEP], [SEP] with "- 3".
    _truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
  elif len(tokens_a) > max_seq_length - 2:
    tokens_a = tokens_a[0:(max_seq_length - 2)]

  # (a) pair:   [CLS] is this jack ##son ##ville ? [SEP] no it is not . [SEP]
  #  type_ids:  0     0  0    0    0     0       0 0     1  1  1  1   1 1
  # (b) single: [CLS] the dog is hairy . [SEP]
  tokens = ["[CLS]"] + tokens_a + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  if tokens_b:
    tokens += tokens_b + ["[SEP]"]
    segment_ids += [1] * (len(tokens_b) + 1)

  input_ids = tokenizer.convert_tokens_to_ids(tokens)
  input_mask = [1] * len(input_ids)
  padding = max_seq_length - len(input_ids)
  input_ids += [0] * padding
  input_mask += [0] * padding
  segment_ids += [0] * padding

  if ex_index < 2:
    LOG.debug("*** Example %s ***\ntokens: %s\nlabel: %s", example.guid,
              " ".join(tokens), example.label)
  return InputFeatures(input_ids, input_mask, segment_ids, label_map[example.label])


def examples_fingerprint(examples, label_list, max_seq_length, tokenizer):
  """A hash of everything a TFRecord of `examples` depends on (cache key)."""
  h = hashlib.sha256()
  h.update(json.dumps([list(label_list), max_seq_length,
                       tokenizer.basic_tokenizer.do_lower_case]).encode("utf-8"))
  h.update("\n".join(tokenizer.vocab).encode("utf-8"))
  for ex in examples:
    h.update(("%s\0%s\0%s\0%s\n" % (ex.guid, ex.text_a, ex.text_b, ex.label)).encode(
        "utf-8"))
  return h.hexdigest()


def convert_examples_cached(examples, label_list, max_seq_length, tokenizer,
                            output_file):
  """Writes `output_file` unless it already holds exactly these examples' features.

  The key (inputs, labels, tokenizer settings, sequence length) is kept beside the
  file in `<output_file>.key`, so a re-run or a resume does not re-tokenize.

  Returns:
    True if the file was (re)written, False if the cached one was reused.
  """
  key = examples_fingerprint(examples, label_list, max_seq_length, tokenizer)
  key_file = output_file + ".key"
  if os.path.exists(output_file) and os.path.exists(key_file):
    with open(key_file) as f:
      if f.read().strip() == key:
        LOG.info("reusing %s (%d examples, same inputs)", output_file, len(examples))
        return False
  t0 = time.time()
  file_based_convert_examples_to_features(examples, label_list, max_seq_length,
                                          tokenizer, output_file)
  secs = max(time.time() - t0, 1e-6)
  LOG.info("converted %d examples to %s in %.1fs (%.0f examples/sec)", len(examples),
           output_file, secs, len(examples) / secs)
  train_metrics.atomic_write_text(key_file, key + "\n")
  return True


def file_based_convert_examples_to_features(examples, label_list, max_seq_length,
                                            tokenizer, output_file):
  """Converts `examples` to a TFRecord file (written under a temporary name first)."""
  label_map = {label: i for (i, label) in enumerate(label_list)}
  tmp_file = output_file + ".tmp-%d" % os.getpid()
  with tf.io.TFRecordWriter(tmp_file) as writer:
    for (ex_index, example) in enumerate(examples):
      feature = convert_single_example(ex_index, example, label_map, max_seq_length,
                                       tokenizer)
      writer.write(_features_to_tf_example(feature).SerializeToString())
  os.replace(tmp_file, output_file)


def _features_to_tf_example(feature):
  def int_feature(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

  features = collections.OrderedDict()
  features["input_ids"] = int_feature(feature.input_ids)
  features["input_mask"] = int_feature(feature.input_mask)
  features["segment_ids"] = int_feature(feature.segment_ids)
  features["label_ids"] = int_feature([feature.label_id])
  features["is_real_example"] = int_feature([int(feature.is_real_example)])
  return tf.train.Example(features=tf.train.Features(feature=features))


def file_based_input_fn_builder(input_file, seq_length, batch_size, is_training,
                                shuffle_buffer=0, seed=None):
  """Creates an `input_fn` over a TFRecord file.

  Training input repeats forever (the step count, identical on every rank, ends
  training) and drops the remainder so every batch has `batch_size` examples.

  Returns:
    input_fn() -> tf.data.Dataset of dicts of int32 Tensors of shape
    [batch_size, seq_length] ("input_ids", "input_mask", "segment_ids") and
    [batch_size] ("label_ids", "is_real_example").
  """
  name_to_features = {
      "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "label_ids": tf.io.FixedLenFeature([], tf.int64),
      "is_real_example": tf.io.FixedLenFeature([], tf.int64),
  }

  def _decode_batch(records):
    example = tf.io.parse_example(records, name_to_features)
    return {k: tf.cast(v, tf.int32) for k, v in example.items()}

  def input_fn(params=None):
    del params
    d = tf.data.TFRecordDataset(input_file)
    if is_training:
      d = d.repeat()
      if shuffle_buffer > 0:
        d = d.shuffle(buffer_size=shuffle_buffer, seed=seed)
    d = d.batch(batch_size, drop_remainder=is_training)
    # Parsing a batch takes about a millisecond; prefetch's thread does it while
    # the model computes. No autotuning: its background thread sleeps for up to
    # its optimization period (tens of seconds, growing with the run) and closing
    # the session waits for it, so train, eval and predict each ended 0-40 s late.
    d = d.map(_decode_batch).prefetch(2)
    options = tf.data.Options()
    options.autotune.enabled = False
    return d.with_options(options)

  return input_fn


def _truncate_seq_pair(tokens_a, tokens_b, max_length):
  """Truncates a sequence pair in place to the maximum length (longer one first)."""
  while len(tokens_a) + len(tokens_b) > max_length:
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids, labels,
                 num_labels, compute_type=tf.float32):
  """Creates a classification model: BERT's pooled output, dropout, a linear layer.

  Args:
    bert_config: `BertConfig`; its hidden_dropout_prob also drives the head dropout.
    is_training: bool.
    input_ids, input_mask, segment_ids: int32 Tensors of shape [batch_size, seq_length].
    labels: int32 Tensor of shape [batch_size].
    num_labels: int.
    compute_type: dtype of the encoder's activations (mixed precision).

  Returns:
    (loss, per_example_loss, logits, probabilities): a scalar mean loss and
    float32 Tensors of shape [batch_size], [batch_size, num_labels] x2.
  """
  model = modeling.BertModel(config=bert_config, is_training=is_training,
                             input_ids=input_ids, input_mask=input_mask,
                             token_type_ids=segment_ids, compute_type=compute_type)
  output_layer = model.get_pooled_output()
  hidden_size = output_layer.shape[-1]

  output_weights = tf1.get_variable(
      "output_weights", [num_labels, hidden_size],
      initializer=tf1.truncated_normal_initializer(stddev=0.02))
  output_bias = tf1.get_variable("output_bias", [num_labels],
                                 initializer=tf1.zeros_initializer())

  with tf1.name_scope("classifier_loss"):
    if is_training:
      output_layer = modeling.dropout(output_layer, bert_config.hidden_dropout_prob)
    logits = tf.matmul(output_layer, output_weights, transpose_b=True)
    logits = tf.nn.bias_add(logits, output_bias)
    probabilities = tf.nn.softmax(logits, axis=-1)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot_labels = tf.one_hot(labels, depth=num_labels, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
    loss = tf.reduce_mean(per_example_loss)
    return (loss, per_example_loss, logits, probabilities)


def metric_fn(per_example_loss, label_ids, logits, is_real_example, num_labels,
              task_name):
  """Eval metrics: accuracy and loss; F1 for binary tasks; MCC for CoLA.

  Args:
    per_example_loss: float32 [batch_size]; label_ids: int32 [batch_size];
    logits: float32 [batch_size, num_labels]; is_real_example: int32 [batch_size].

  Returns:
    dict of name -> (value_op, update_op).
  """
  predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
  weights = tf.cast(is_real_example, tf.float32)
  metrics = {
      "eval_accuracy": tf1.metrics.accuracy(label_ids, predictions, weights=weights),
      "eval_loss": tf1.metrics.mean(per_example_loss, weights=weights),
  }
  if num_labels == 2:
    tp = tf1.metrics.true_positives(label_ids, predictions, weights=weights)
    fp = tf1.metrics.false_positives(label_ids, predictions, weights=weights)
    fn = tf1.metrics.false_negatives(label_ids, predictions, weights=weights)
    tn = tf1.metrics.true_negatives(label_ids, predictions, weights=weights)
    update = tf.group(tp[1], fp[1], fn[1], tn[1])
    tp_v, fp_v, fn_v, tn_v = tp[0], fp[0], fn[0], tn[0]
    f1 = tf.math.divide_no_nan(2.0 * tp_v, 2.0 * tp_v + fp_v + fn_v)
    metrics["eval_f1"] = (f1, update)
    if task_name == "cola":
      denom = tf.sqrt((tp_v + fp_v) * (tp_v + fn_v) * (tn_v + fp_v) * (tn_v + fn_v))
      metrics["eval_mcc"] = (tf.math.divide_no_nan(tp_v * tn_v - fp_v * fn_v, denom),
                             update)
  return metrics


def model_fn_builder(bert_config, num_labels, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, task_name="tsv",
                     scale_learning_rate=True, training_hooks_fn=None,
                     compute_type=tf.float32, gradient_accumulation_steps=1,
                     fp16_allreduce=False, sparse_embedding_allreduce=False):
  """Returns the `model_fn` closure for the Estimator.

  Args:
    bert_config: `BertConfig`.
    num_labels: int.
    init_checkpoint: checkpoint path to initialize from, or None. Pass it on rank 0
      only: the broadcast hook copies rank 0's weights to the others.
    learning_rate: float, peak rate of one process.
    num_train_steps, num_warmup_steps: ints, identical on every rank.
    task_name: string, selects extra eval metrics.
    scale_learning_rate: bool, multiply the rate by the number of processes.
    training_hooks_fn: optional (loss, learning_rate) -> list of SessionRunHooks.
    compute_type: tf.float32, or tf.bfloat16 / tf.float16 for mixed precision
      (float16 adds dynamic loss scaling).
    gradient_accumulation_steps: int, micro-batches per optimizer update.
    fp16_allreduce: bool, compress gradients to float16 for the allreduce.
    sparse_embedding_allreduce: bool, allgather the word-embedding rows instead
      of allreducing the dense table.
  """

  def model_fn(features, labels, mode, params):
    del labels, params
    input_ids = features["input_ids"]
    input_mask = features["input_mask"]
    segment_ids = features["segment_ids"]
    label_ids = features["label_ids"]
    is_real_example = features["is_real_example"]

    is_training = (mode == tf_estimator.estimator.ModeKeys.TRAIN)
    (total_loss, per_example_loss, logits, probabilities) = create_model(
        bert_config, is_training, input_ids, input_mask, segment_ids, label_ids,
        num_labels, compute_type=compute_type if is_training else tf.float32)

    if init_checkpoint:
      tvars = tf1.trainable_variables()
      (assignment_map, _) = modeling.get_assignment_map_from_checkpoint(
          tvars, init_checkpoint)
      tf1.train.init_from_checkpoint(init_checkpoint, assignment_map)

    if mode == tf_estimator.estimator.ModeKeys.TRAIN:
      train_op, lr, grad_norm = optimization.create_optimizer(
          total_loss, learning_rate, num_train_steps, num_warmup_steps,
          scale_learning_rate=scale_learning_rate,
          gradient_accumulation_steps=gradient_accumulation_steps,
          fp16_allreduce=fp16_allreduce,
          dynamic_loss_scale=compute_type == tf.float16,
          sparse_embedding_allreduce=sparse_embedding_allreduce)
      tf1.summary.scalar("learning_rate", lr)
      tf1.summary.scalar("grad_global_norm", grad_norm)
      hooks = training_hooks_fn(total_loss, lr) if training_hooks_fn else []
      return tf_estimator.estimator.EstimatorSpec(
          mode=mode, loss=total_loss, train_op=train_op, training_hooks=hooks)
    if mode == tf_estimator.estimator.ModeKeys.EVAL:
      return tf_estimator.estimator.EstimatorSpec(
          mode=mode, loss=total_loss,
          eval_metric_ops=metric_fn(per_example_loss, label_ids, logits,
                                    is_real_example, num_labels, task_name))
    return tf_estimator.estimator.EstimatorSpec(
        mode=mode, predictions={"probabilities": probabilities})

  return model_fn


def shard_examples(examples, seed, rank, size):
  """One seeded shuffle of all examples (same on every rank), then every size-th.

  Rank r keeps global positions p with p % size == r, so batch k of every rank
  together is batch k of a single process with `size` times the batch.
  """
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
  steps = int(num_examples / (per_process_batch * size) * num_epochs)
  if max_train_steps > 0:
    steps = min(steps, max_train_steps)
  steps -= steps % accumulation_steps
  return steps, int(steps * warmup_proportion)


def cpu_threads_per_process(local_size, requested=0):
  """Intra-op threads for one of `local_size` processes sharing this host's cores."""
  if requested > 0:
    return requested
  try:
    cores = len(os.sched_getaffinity(0))
  except AttributeError:
    cores = os.cpu_count() or 1
  return max(1, cores // max(1, local_size))


def horovod_cycle_time_ms(requested, environ, gpu_available):
  """The HOROVOD_CYCLE_TIME to set before `hvd.init()`, or None to leave it.

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
  """Open MPI settings to add before `hvd.init()` on a CPU host: a dict, maybe empty.

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


def use_sparse_embedding_allreduce(mode, size, batch_size, seq_length, vocab_size,
                                   gradient_accumulation_steps):
  """Whether to allgather the word-embedding rows instead of allreducing the table.

  An allgather sends size x batch_size x seq_length rows (one per token, repeats
  included) to every rank; the dense allreduce moves the vocab_size-row table.
  """
  if mode != "auto":
    return mode == "sparse"  # validate_flags rejects sparse with accumulation.
  return gradient_accumulation_steps <= 1 and size * batch_size * seq_length < vocab_size


def make_session_config(gpu_available, local_rank, intra_op_threads, inter_op_threads,
                        use_xla=False):
  """The tf.compat.v1.ConfigProto of one process."""
  config = tf1.ConfigProto()
  if use_xla:
    config.graph_options.optimizer_options.global_jit_level = tf1.OptimizerOptions.ON_1
  if gpu_available:
    config.gpu_options.allow_growth = True
    # Horovod: pin one GPU to each process, by its rank on this host.
    config.gpu_options.visible_device_list = str(local_rank)
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


def read_label_list(path):
  """Reads `label_list.txt` (one label a line)."""
  labels = [line.rstrip("\n") for line in read_text_file(path).split("\n")]
  labels = [l for l in labels if l]
  if not labels:
    raise InputError("%s: no labels" % path)
  return labels


def latest_global_step(model_dir):
  """Global step of the newest checkpoint in `model_dir`, or 0."""
  ckpt = tf.train.latest_checkpoint(model_dir) if model_dir else None
  if not ckpt:
    return 0
  return int(tf.train.load_variable(ckpt, "global_step"))


class Job(object):
  """What `setup` derives from the flags, shared by the train/eval/predict phases."""

  def __init__(self, **kwargs):
    self.__dict__.update(kwargs)


def validate_flags(flags_obj):
  """Checks flag values that need no file access; raises InputError."""
  if flags_obj.use_tpu:
    raise InputError("--use_tpu: TPUs are not supported; this script runs on GPUs/CPUs")
  if not (flags_obj.do_train or flags_obj.do_eval or flags_obj.do_predict):
    raise InputError("at least one of --do_train, --do_eval or --do_predict must be set")
  for name in ("data_dir", "bert_config_file", "task_name", "vocab_file", "output_dir"):
    if not getattr(flags_obj, name):
      raise InputError("--%s is required" % name)
  if flags_obj.task_name.lower() not in PROCESSORS:
    raise InputError("--task_name=%s: unknown task (choose from %s)" %
                     (flags_obj.task_name, ", ".join(sorted(PROCESSORS))))
  for name in ("train_batch_size", "eval_batch_size", "predict_batch_size",
               "max_seq_length"):
    if getattr(flags_obj, name) <= 0:
      raise InputError("--%s must be positive, got %d" % (name, getattr(flags_obj, name)))
  for name in ("learning_rate", "num_train_epochs"):
    if getattr(flags_obj, name) <= 0:
      raise InputError("--%s must be positive, got %g" % (name, getattr(flags_obj, name)))
  if not 0.0 <= flags_obj.warmup_proportion < 1.0:
    raise InputError("--warmup_proportion must be in [0, 1), got %g" %
                     flags_obj.warmup_proportion)
  if flags_obj.max_seq_length < 3:
    raise InputError("--max_seq_length must be at least 3")
  if flags_obj.horovod_cycle_time_ms < 0:
    raise InputError("--horovod_cycle_time_ms must be >= 0, got %g" %
                     flags_obj.horovod_cycle_time_ms)
  if flags_obj.gradient_accumulation_steps < 1:
    raise InputError("--gradient_accumulation_steps must be at least 1, got %d" %
                     flags_obj.gradient_accumulation_steps)
  if (flags_obj.embedding_allreduce == "sparse" and
      flags_obj.gradient_accumulation_steps > 1):
    raise InputError("--embedding_allreduce=sparse does not work with "
                     "--gradient_accumulation_steps > 1 (Horovod accumulates dense "
                     "gradients); use auto or dense")


def check_checkpoint_matches(init_checkpoint, bert_config, num_labels):
  """Raises InputError if `init_checkpoint` is missing or its shapes differ from the model."""
  index = init_checkpoint + ".index"
  if not (os.path.exists(index) or os.path.exists(init_checkpoint)):
    raise InputError("--init_checkpoint=%s: no such checkpoint (%s not found)" %
                     (init_checkpoint, index))
  try:
    ckpt_shapes = dict(tf.train.list_variables(init_checkpoint))
  except (tf.errors.OpError, ValueError) as e:
    raise InputError("--init_checkpoint=%s: cannot read (%s)" %
                     (init_checkpoint, str(e).splitlines()[0]))
  expected = modeling.expected_checkpoint_shapes(bert_config, num_labels)
  found = 0
  for name, shape in expected.items():
    if name not in ckpt_shapes:
      continue
    found += 1
    if tuple(ckpt_shapes[name]) != tuple(shape):
      raise InputError("--init_checkpoint=%s: variable %s has shape %s, the config "
                       "needs %s" % (init_checkpoint, name, list(ckpt_shapes[name]),
                                     list(shape)))
  if found == 0:
    raise InputError("--init_checkpoint=%s: holds none of the BERT variables (e.g. %s)"
                     % (init_checkpoint, next(iter(expected))))


def lock_output_dir(output_dir):
  """Takes an exclusive lock on `output_dir` for the life of this process.

  The lock (flock) goes away with the process, however it ends, so a crashed job
  never blocks its own restart; a second live job on the same folder is refused.
  """
  tf.io.gfile.makedirs(output_dir)
  path = os.path.join(output_dir, ".run_classifier.lock")
  lock_file = open(path, "a+")
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


def setup(flags_obj, gpu_available, threads):
  """Validates inputs and derives the job; raises InputError on bad input.

  Every rank runs this before any collective operation. `gpu_available` and
  `threads` (intra-op threads per process) are what main() found and set.
  """
  validate_flags(flags_obj)
  if hvd.rank() == 0:
    lock_output_dir(flags_obj.output_dir)
  task_name = flags_obj.task_name.lower()
  bert_config = modeling.BertConfig.from_json_file(flags_obj.bert_config_file)
  if flags_obj.max_seq_length > bert_config.max_position_embeddings:
    raise InputError(
        "--max_seq_length=%d exceeds max_position_embeddings=%d of %s" %
        (flags_obj.max_seq_length, bert_config.max_position_embeddings,
         flags_obj.bert_config_file))
  tokenizer = tokenization.FullTokenizer(flags_obj.vocab_file, flags_obj.do_lower_case)
  if len(tokenizer.vocab) > bert_config.vocab_size:
    raise InputError("vocab_file %s has %d tokens, more than vocab_size=%d of %s" %
                     (flags_obj.vocab_file, len(tokenizer.vocab), bert_config.vocab_size,
                      flags_obj.bert_config_file))
  processor = PROCESSORS[task_name]()
  rank, size = hvd.rank(), hvd.size()
  # Horovod: rank 0 writes checkpoints and results in output_dir; rank r > 0 keeps
  # only its own TFRecords in output_dir/r so no two processes write the same file.
  work_dir = flags_obj.output_dir if rank == 0 else os.path.join(
      flags_obj.output_dir, str(rank))

  label_list_path = os.path.join(flags_obj.output_dir, "label_list.txt")
  train_examples = None
  if flags_obj.do_train:
    train_examples = processor.get_train_examples(flags_obj.data_dir)
    label_list = processor.get_labels(flags_obj.data_dir, train_examples)
    if not train_examples:
      raise InputError("%s: no training examples" %
                       os.path.join(flags_obj.data_dir, processor.train_file))
  elif task_name == "tsv" and os.path.exists(label_list_path):
    label_list = read_label_list(label_list_path)
  else:
    label_list = processor.get_labels(flags_obj.data_dir)

  eval_examples = predict_examples = None
  if flags_obj.do_eval and rank == 0:
    eval_examples = processor.get_dev_examples(flags_obj.data_dir)
    check_labels(eval_examples, label_list)
  if flags_obj.do_predict and rank == 0:
    predict_examples = processor.get_test_examples(flags_obj.data_dir)
    check_labels(predict_examples, label_list)
  if flags_obj.init_checkpoint and rank == 0:
    check_checkpoint_matches(flags_obj.init_checkpoint, bert_config, len(label_list))

  num_train_steps = num_warmup_steps = 0
  if train_examples is not None:
    num_train_steps, num_warmup_steps = compute_train_steps(
        len(train_examples), flags_obj.train_batch_size, size,
        flags_obj.num_train_epochs, flags_obj.warmup_proportion,
        flags_obj.max_train_steps, flags_obj.gradient_accumulation_steps)
    if num_train_steps < 1:
      raise InputError("%d training examples make no step of %d x %d processes; lower "
                       "--train_batch_size or raise --num_train_epochs" %
                       (len(train_examples), flags_obj.train_batch_size, size))

  compute_type = choose_compute_type(flags_obj.use_amp, gpu_available)
  # Horovod: where this process sits (cross_rank tells the host among hosts).
  placement = {"rank": rank, "size": size, "local_rank": hvd.local_rank(),
               "local_size": hvd.local_size(),
               "cross_rank": hvd.cross_rank() if size > 1 else 0}
  return Job(
      placement=placement, task_name=task_name, bert_config=bert_config, tokenizer=tokenizer,
      processor=processor, label_list=label_list, rank=rank, size=size,
      work_dir=work_dir, output_dir=flags_obj.output_dir,
      train_examples=train_examples, eval_examples=eval_examples,
      predict_examples=predict_examples, num_train_steps=num_train_steps,
      num_warmup_steps=num_warmup_steps, threads=0 if gpu_available else threads,
      compute_type=compute_type, gpu_available=gpu_available,
      sparse_embedding_allreduce=use_sparse_embedding_allreduce(
          flags_obj.embedding_allreduce, size, flags_obj.train_batch_size,
          flags_obj.max_seq_length, bert_config.vocab_size,
          flags_obj.gradient_accumulation_steps),
      session_config=make_session_config(gpu_available, hvd.local_rank(), threads,
                                         flags_obj.inter_op_threads, flags_obj.use_xla))


def check_labels(examples, label_list):
  """Raises InputError naming the first example whose label is not in `label_list`."""
  known = set(label_list)
  for ex in examples:
    if ex.label not in known:
      raise InputError("%s: label %r is not among the training labels %s" %
                       (ex.guid, ex.label, label_list))


def make_estimator(job, flags_obj, model_fn):
  """An Estimator for this rank. Only rank 0 saves checkpoints and summaries."""
  session_config = job.session_config
  if job.rank == 0:
    run_config = tf_estimator.estimator.RunConfig(
        model_dir=job.output_dir,
        tf_random_seed=flags_obj.seed,
        save_checkpoints_steps=flags_obj.save_checkpoints_steps,
        keep_checkpoint_max=flags_obj.keep_checkpoint_max,
        save_summary_steps=100,
        log_step_count_steps=None,
        session_config=session_config)
  else:
    # Horovod: save checkpoints only on worker 0 to prevent other workers from
    # corrupting them.
    run_config = tf_estimator.estimator.RunConfig(
        model_dir=job.work_dir,
        tf_random_seed=flags_obj.seed,
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        save_summary_steps=0,
        log_step_count_steps=None,
        session_config=session_config)
  return tf_estimator.estimator.Estimator(model_fn=model_fn, config=run_config)


def build_model_fn(job, flags_obj):
  """The model_fn for this rank (init checkpoint on rank 0 only)."""
  def training_hooks_fn(loss, lr):
    hooks = [train_metrics.FinalStepHook(
        os.path.join(job.work_dir, "train_state.json"), job.placement)]
    if job.rank == 0:
      hooks.append(train_metrics.ThroughputHook(
          loss, lr, job.num_train_steps, flags_obj.train_batch_size, job.size,
          job.threads, log_every_secs=flags_obj.log_every_secs,
          metrics_path=os.path.join(job.output_dir, "train_metrics.json"),
          summary_dir=job.output_dir))
    return hooks

  return model_fn_builder(
      bert_config=job.bert_config,
      num_labels=len(job.label_list),
      # Horovod: only rank 0 reads the initial checkpoint; the broadcast copies it.
      init_checkpoint=flags_obj.init_checkpoint if job.rank == 0 else None,
      learning_rate=flags_obj.learning_rate,
      num_train_steps=job.num_train_steps,
      num_warmup_steps=job.num_warmup_steps,
      task_name=job.task_name,
      scale_learning_rate=flags_obj.scale_learning_rate,
      training_hooks_fn=training_hooks_fn,
      compute_type=job.compute_type,
      gradient_accumulation_steps=flags_obj.gradient_accumulation_steps,
      fp16_allreduce=flags_obj.fp16_allreduce,
      sparse_embedding_allreduce=job.sparse_embedding_allreduce)


def describe_speed_options(job, flags_obj):
  """One line: device, threads and the speed options in force."""
  parts = ["GPU %d" % hvd.local_rank() if job.gpu_available else
           "CPU, %d intra-op threads per process" % job.threads]
  parts.append("compute %s" % job.compute_type.name)
  if flags_obj.use_xla:
    parts.append("XLA")
  if flags_obj.fp16_allreduce:
    parts.append("fp16 allreduce")
  if job.size > 1:
    parts.append("Horovod over %s" % ("MPI" if hvd.mpi_enabled() else "Gloo"))
    parts.append("word-embedding gradient %s" % (
        "allgathered (sparse)" if job.sparse_embedding_allreduce else "allreduced (dense)"))
  return ", ".join(parts)


def train(job, flags_obj):
  """Converts this rank's shard and trains to `num_train_steps` on every rank."""
  # Horovod: every rank sees the same seeded global order and keeps its own shard.
  shard = shard_examples(job.train_examples, flags_obj.seed, job.rank, job.size)
  train_file = os.path.join(job.work_dir, "train.tf_record")
  convert_examples_cached(shard, job.label_list, flags_obj.max_seq_length,
                          job.tokenizer, train_file)

  # Horovod: rank 0's checkpoint decides where training resumes; every rank learns
  # it, so all agree on the steps that remain (or that none remain).
  start_step = hvd.broadcast_object(
      latest_global_step(job.output_dir) if job.rank == 0 else None, root_rank=0,
      name="start_step")
  k = flags_obj.gradient_accumulation_steps
  LOG.info("training: %d examples, %d processes x batch %d%s = global batch %d, "
           "%d steps (%d warmup), starting at step %d; %s", len(job.train_examples),
           job.size, flags_obj.train_batch_size, " x %d accumulated" % k if k > 1 else "",
           job.size * flags_obj.train_batch_size * k, job.num_train_steps,
           job.num_warmup_steps, start_step, describe_speed_options(job, flags_obj))
  if start_step >= job.num_train_steps:
    LOG.info("training already finished at step %d; skipping", start_step)
    return
  estimator = make_estimator(job, flags_obj, build_model_fn(job, flags_obj))
  input_fn = file_based_input_fn_builder(
      train_file, flags_obj.max_seq_length, flags_obj.train_batch_size,
      is_training=True, shuffle_buffer=flags_obj.train_shuffle_buffer,
      seed=flags_obj.seed + job.rank)
  # Horovod: broadcast initial variable states from rank 0 to all other processes,
  # so every rank starts from the same weights (random or from init_checkpoint).
  hooks = [hvd.BroadcastGlobalVariablesHook(0)]
  estimator.train(input_fn=input_fn, max_steps=job.num_train_steps, hooks=hooks)


def evaluate(job, flags_obj):
  """Evaluates on the dev set (rank 0) and writes eval_results.txt."""
  eval_file = os.path.join(job.output_dir, "eval.tf_record")
  convert_examples_cached(job.eval_examples, job.label_list, flags_obj.max_seq_length,
                          job.tokenizer, eval_file)
  estimator = make_estimator(job, flags_obj, build_model_fn(job, flags_obj))
  input_fn = file_based_input_fn_builder(eval_file, flags_obj.max_seq_length,
                                         flags_obj.eval_batch_size, is_training=False)
  result = estimator.evaluate(input_fn=input_fn)
  lines = ["%s = %s\n" % (key, result[key]) for key in sorted(result)]
  LOG.info("eval results (%d examples): %s", len(job.eval_examples),
           ", ".join(l.strip() for l in lines))
  train_metrics.atomic_write_text(os.path.join(job.output_dir, "eval_results.txt"),
                                  "".join(lines))
  return result


def predict(job, flags_obj):
  """Predicts the test set (rank 0) and writes test_results.tsv."""
  predict_file = os.path.join(job.output_dir, "predict.tf_record")
  convert_examples_cached(job.predict_examples, job.label_list, flags_obj.max_seq_length,
                          job.tokenizer, predict_file)
  estimator = make_estimator(job, flags_obj, build_model_fn(job, flags_obj))
  input_fn = file_based_input_fn_builder(predict_file, flags_obj.max_seq_length,
                                         flags_obj.predict_batch_size, is_training=False)
  lines = []
  for prediction in estimator.predict(input_fn=input_fn):
    lines.append("\t".join(str(p) for p in prediction["probabilities"]) + "\n")
  if len(lines) != len(job.predict_examples):
    raise RuntimeError("predicted %d of %d test examples" %
                       (len(lines), len(job.predict_examples)))
  train_metrics.atomic_write_text(os.path.join(job.output_dir, "test_results.tsv"),
                                  "".join(lines))
  LOG.info("wrote %d predictions to %s", len(lines),
           os.path.join(job.output_dir, "test_results.tsv"))


def export_model(job, flags_obj):
  """Writes a SavedModel of rank 0's latest checkpoint to --export_dir."""
  import export  # pylint: disable=g-import-not-at-top  (export imports this module)
  checkpoint = tf.train.latest_checkpoint(job.output_dir)
  if not checkpoint:
    raise InputError("--export_dir: no checkpoint in %s to export" % job.output_dir)
  path = export.export_saved_model(
      bert_config=job.bert_config, label_list=job.label_list, checkpoint=checkpoint,
      export_dir=flags_obj.export_dir, max_seq_length=flags_obj.max_seq_length,
      vocab_file=flags_obj.vocab_file, do_lower_case=flags_obj.do_lower_case)
  LOG.info("exported SavedModel of %s to %s", checkpoint, path)


def configure_logging(rank):
  """Rank 0 logs progress; the other ranks log warnings and errors only."""
  handler = logging.StreamHandler(sys.stderr)
  handler.setFormatter(logging.Formatter("[%(asctime)s rank " + str(rank) +
                                         "] %(message)s", "%H:%M:%S"))
  LOG.handlers[:] = [handler]
  LOG.propagate = False
  LOG.setLevel(logging.INFO if rank == 0 else logging.WARNING)
  tf1.logging.set_verbosity(tf1.logging.ERROR)


def fail(message, code):
  """Prints one error line naming the problem and exits with `code`; all ranks call it."""
  sys.stderr.write("run_classifier.py: error (rank %d): %s\n" % (hvd.rank(), message))
  sys.stderr.flush()
  if hvd.size() > 1:
    # Horovod: a launcher kills the other ranks once one exits; let all print first.
    hvd.allgather_object(None)
  sys.exit(code)


def main(_):
  gpu_available = bool(tf.config.list_physical_devices("GPU"))
  cycle_ms = horovod_cycle_time_ms(FLAGS.horovod_cycle_time_ms, os.environ, gpu_available)
  if cycle_ms:
    # Horovod: read when hvd.init() starts the background thread.
    os.environ["HOROVOD_CYCLE_TIME"] = "%g" % cycle_ms
  # Horovod: read by MPI_Init inside hvd.init() (no effect under Gloo).
  os.environ.update(mpi_cpu_host_env(os.environ, gpu_available))
  # Horovod: initialize Horovod before anything else.
  hvd.init()
  # Horovod: processes on one host share its cores. TensorFlow's thread pools are
  # per process and made once, at the first op: size them before any op runs.
  threads = cpu_threads_per_process(hvd.local_size(), FLAGS.intra_op_threads)
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(FLAGS.inter_op_threads)
  if FLAGS.use_xla:
    # XLA auto-clustering on CPUs needs this flag as well as the session option.
    os.environ["TF_XLA_FLAGS"] = (os.environ.get("TF_XLA_FLAGS", "") +
                                  " --tf_xla_cpu_global_jit").strip()
  configure_logging(hvd.rank())
  try:
    job = setup(FLAGS, gpu_available, threads)
    error = None
  except (InputError, modeling.ConfigError, ValueError) as e:
    job, error = None, str(e)
  # Horovod: every rank learns every rank's input error before any training
  # collective, so a bad input ends all ranks promptly instead of hanging some.
  errors = [e for e in hvd.allgather_object(error) if e] if hvd.size() > 1 else (
      [error] if error else [])
  if errors:
    fail(error or errors[0], EXIT_BAD_INPUT)

  if job.rank == 0:
    # Results of an earlier run must not outlive a failure of this one.
    for name in RESULT_FILES:
      if tf.io.gfile.exists(os.path.join(job.output_dir, name)):
        tf.io.gfile.remove(os.path.join(job.output_dir, name))
    if FLAGS.do_train:
      train_metrics.atomic_write_text(os.path.join(job.output_dir, "label_list.txt"),
                                      "".join(l + "\n" for l in job.label_list))
  tf.io.gfile.makedirs(job.work_dir)

  if FLAGS.do_train:
    train(job, FLAGS)
  if job.rank == 0 and FLAGS.export_dir:
    export_model(job, FLAGS)
  # Horovod: evaluate and predict on rank 0 only; the other ranks are done.
  if job.rank == 0 and FLAGS.do_eval:
    evaluate(job, FLAGS)
  if job.rank == 0 and FLAGS.do_predict:
    predict(job, FLAGS)


def parse_flags(argv):
  """Parses flags; an unknown flag or a bad value is one error line and exit 2."""
  try:
    return FLAGS(argv)
  except flags.Error as e:
    if launched_process_count(os.environ) > 1:
      # Horovod: every rank has the same bad command line; fail() lets all of
      # them print it before any exits (a launcher kills the rest at the first exit).
      hvd.init()
      fail(str(e), EXIT_BAD_INPUT)
    sys.stderr.write("%s: error: %s\n" % (os.path.basename(argv[0]), e))
    sys.exit(EXIT_BAD_INPUT)


def launched_process_count(env):
  """How many processes the launcher started (horovodrun, mpirun or srun), else 1."""
  for name in ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
    if env.get(name, "").isdigit():
      return int(env[name])
  return 1


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
