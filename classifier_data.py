"""Classification data: task processors, featurization, the TFRecord cache, input_fn."""

import collections
import csv
import hashlib
import json
import os
import time

import tensorflow as tf

from distributed import InputError
import input_pipeline
import tokenization
import train_metrics

LOG = train_metrics.LOG


class InputExample(object):
  """A single training/test example for simple sequence classification."""

  def __init__(self, guid, text_a, text_b=None, label=None, teacher_probs=None):
    """Constructs a InputExample.

    Args:
      guid: Unique id for the example ("train-12").
      text_a: string. The untokenized text of the first sequence.
      text_b: (Optional) string. The untokenized text of the second sequence.
      label: (Optional) string. The label of the example.
      teacher_probs: (Optional) list of float, a teacher model's probability of
        each label (label list order), the soft target of distillation.
    """
    self.guid = guid
    self.text_a = text_a
    self.text_b = text_b
    self.label = label
    self.teacher_probs = teacher_probs


class InputFeatures(object):
  """A single set of features of data."""

  def __init__(self, input_ids, input_mask, segment_ids, label_id, is_real_example=True,
               teacher_probs=None):
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.label_id = label_id
    self.is_real_example = is_real_example
    self.teacher_probs = teacher_probs


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
  """Reads a UTF-8 text file, raising InputError naming it when that fails.

  A leading byte order mark (Excel's and Notepad's UTF-8) is dropped: it would
  otherwise stick to the first line's label.
  """
  if not os.path.isfile(path):
    raise InputError("%s: no such file" % path)
  try:
    with open(path, "r", encoding="utf-8-sig") as f:
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
  train and dev files (`dev_columns` if the dev file differs) and `test_columns`
  = (text_a, text_b or None) for the test file (column -1 is the last one), and
  which files start with a header line. `label_aliases` maps a label spelling of
  the files to the label; `_keep` may skip rows.
  """

  labels = ()
  columns = (0, None, 1)
  dev_columns = None
  test_columns = (0, None)
  header = True
  test_header = True
  label_aliases = {}

  def get_labels(self, data_dir=None, train_examples=None):
    return list(self.labels)

  def _create_examples(self, rows, set_type):
    is_test = set_type == "test"
    if is_test:
      a_col, b_col = self.test_columns
    else:
      a_col, b_col, label_col = (self.dev_columns if set_type == "dev" and
                                 self.dev_columns else self.columns)
    skip_first = self.test_header if is_test else self.header
    examples = []
    for i, row in enumerate(rows):
      if (i == 0 and skip_first) or not self._keep(row, set_type):
        continue
      # Test files carry no labels: the first label is a placeholder.
      label = self.labels[0] if is_test else self._column(row, label_col)
      text_b = None if b_col is None else self._column(row, b_col)
      examples.append(InputExample(self._guid(set_type, i, row),
                                   self._column(row, a_col), text_b,
                                   self.label_aliases.get(label, label)))
    return examples

  def _keep(self, row, set_type):
    """Whether `row` of the `set_type` file makes an example (all rows here)."""
    del row, set_type
    return True

  def _guid(self, set_type, index, row):
    """The example id: the set and the line number of `row` ("train-12")."""
    del index
    return "%s-%d" % (set_type, row[1])

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


class XnliProcessor(ColumnProcessor):
  """Processor for the XNLI data set (Chinese by default, as in Google's script):
  training on the machine-translated MultiNLI, dev on this language's XNLI rows."""

  language = "zh"
  train_file = "multinli/multinli.train.%s.tsv" % language
  dev_file = "xnli.dev.tsv"
  labels = ("contradiction", "entailment", "neutral")
  columns = (0, 1, 2)
  dev_columns = (6, 7, 1)
  # The translated MultiNLI spells one label differently.
  label_aliases = {"contradictory": "contradiction"}

  def _keep(self, row, set_type):
    """The dev file holds every language: keep this one's rows."""
    return set_type != "dev" or self._field(row, 0) == self.language

  def _guid(self, set_type, index, row):
    """As Google's script: the set and the row's index in the file ("dev-3")."""
    del row
    return "%s-%d" % (set_type, index)

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
  return InputFeatures(input_ids, input_mask, segment_ids, label_map[example.label],
                       teacher_probs=example.teacher_probs)


def examples_fingerprint(examples, label_list, max_seq_length, tokenizer):
  """A hash of everything a TFRecord of `examples` depends on (cache key)."""
  h = hashlib.sha256()
  h.update(json.dumps([list(label_list), max_seq_length,
                       tokenizer.do_lower_case]).encode("utf-8"))
  h.update("\n".join(tokenizer.vocab).encode("utf-8"))
  scores = getattr(tokenizer, "scores", None)  # a unigram model's piece scores
  if scores:
    h.update(repr(sorted((k, float(v)) for k, v in scores.items())).encode("utf-8"))
  for ex in examples:
    h.update(("%s\0%s\0%s\0%s\0%s\n" % (ex.guid, ex.text_a, ex.text_b, ex.label,
                                       ex.teacher_probs)).encode("utf-8"))
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
  if feature.teacher_probs is not None:
    features["teacher_probs"] = tf.train.Feature(
        float_list=tf.train.FloatList(value=list(feature.teacher_probs)))
  return tf.train.Example(features=tf.train.Features(feature=features))


def length_order(examples):
  """Indices of `examples` from the shortest text to the longest (characters of
  text_a and text_b; ties keep the input order)."""
  return sorted(range(len(examples)),
                key=lambda i: len(examples[i].text_a) + len(examples[i].text_b or ""))


# The [batch_size, seq_length] features of a classifier record.
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")


def file_based_input_fn_builder(input_file, seq_length, batch_size, is_training,
                                shuffle_buffer=0, seed=None, skip_examples=0,
                                num_teacher_labels=0, group_by_length=False):
  """Creates an `input_fn` over a TFRecord file.

  Training input repeats forever (the step count, identical on every rank, ends
  training) and drops the remainder so every batch has `batch_size` examples.
  It starts `skip_examples` into that (shuffled) stream: where a resumed run
  would have been had it not stopped.

  Returns:
    input_fn() -> tf.data.Dataset of dicts of int32 Tensors of shape
    [batch_size, seq_length] ("input_ids", "input_mask", "segment_ids") and
    [batch_size] ("label_ids", "is_real_example"); with `num_teacher_labels` > 0
    also a float32 Tensor [batch_size, num_teacher_labels] ("teacher_probs").
    With `group_by_length` the sequence features are cut after each batch's
    longest real sequence (`input_pipeline.trim_batch`: [batch_size, L], L <=
    seq_length) and training batches hold examples of similar length
    (`input_pipeline.bucket_and_decode`).
  """
  name_to_features = {
      "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "label_ids": tf.io.FixedLenFeature([], tf.int64),
      "is_real_example": tf.io.FixedLenFeature([], tf.int64),
  }
  if num_teacher_labels:
    name_to_features["teacher_probs"] = tf.io.FixedLenFeature([num_teacher_labels],
                                                              tf.float32)

  def _decode_batch(records):
    example = tf.io.parse_example(records, name_to_features)
    return {k: v if v.dtype == tf.float32 else tf.cast(v, tf.int32)
            for k, v in example.items()}

  def input_fn(params=None):
    del params
    d = tf.data.TFRecordDataset(input_file)
    if is_training:
      d = d.repeat()
      if shuffle_buffer > 0:
        d = d.shuffle(buffer_size=shuffle_buffer, seed=seed)
      if skip_examples:
        d = d.skip(skip_examples)
    if group_by_length and is_training:
      return input_pipeline.bucket_and_decode(d, batch_size, seq_length, _decode_batch,
                                              SEQUENCE_FEATURES)
    return input_pipeline.batch_and_decode(
        d, batch_size, is_training, _decode_batch,
        trim_keys=SEQUENCE_FEATURES if group_by_length else None)

  return input_fn


def _truncate_seq_pair(tokens_a, tokens_b, max_length):
  """Truncates a sequence pair in place to the maximum length (longer one first)."""
  while len(tokens_a) + len(tokens_b) > max_length:
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def read_label_list(path):
  """Reads `label_list.txt` (one label a line)."""
  labels = [line.rstrip("\n") for line in read_text_file(path).split("\n")]
  labels = [l for l in labels if l]
  if not labels:
    raise InputError("%s: no labels" % path)
  return labels


def check_labels(examples, label_list, path):
  """Raises InputError naming `path` and its first example whose label is unknown."""
  known = set(label_list)
  for ex in examples:
    if ex.label not in known:
      raise InputError("%s: %s: label %r is not among the training labels %s" %
                       (path, ex.guid, ex.label, label_list))


def attach_teacher_probs(path, examples, label_list):
  """Sets each example's `teacher_probs` from a teacher file.

  The file (as `data/baseline_ngram.py --teacher_file` writes it) is tab-separated:
  a header `guid<TAB>label...` naming every label of `label_list` (any order), then
  one `guid<TAB>probability...` row per example. Rows of other ids are ignored.

  Raises:
    InputError: naming the file (and line) of a malformed header or row, a
      probability outside [0, 1] or a row not summing to 1, or the first example
      that has no row.
  """
  lines = read_text_file(path).split("\n")
  header = lines[0].rstrip("\r").split("\t")
  if header[0] != "guid" or sorted(header[1:]) != sorted(label_list):
    raise InputError("%s:1: expected the header 'guid<TAB>label...' with the labels %s, "
                     "got %r" % (path, label_list, lines[0][:200]))
  order = [header.index(label) - 1 for label in label_list]
  rows = {}
  for number, line in enumerate(lines[1:], 2):
    fields = line.rstrip("\r").split("\t")
    if not line.strip():
      continue
    try:
      if len(fields) != len(header):
        raise ValueError("%d fields, expected %d" % (len(fields), len(header)))
      probs = [float(f) for f in fields[1:]]
      if not all(0.0 <= p <= 1.0 for p in probs) or abs(sum(probs) - 1.0) > 1e-3:
        raise ValueError("probabilities must be in [0, 1] and sum to 1")
    except ValueError as e:
      raise InputError("%s:%d: %s" % (path, number, e))
    rows[fields[0]] = [probs[i] for i in order]
  for ex in examples:
    if ex.guid not in rows:
      raise InputError("%s: no row for training example %s" % (path, ex.guid))
    ex.teacher_probs = rows[ex.guid]
