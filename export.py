"""Exports a fine-tuned classifier as a SavedModel for serving."""

import json
import os
import shutil

import tensorflow as tf

import classifier_model
import tokenization

tf1 = tf.compat.v1

SIGNATURE_NAME = "serving_default"
INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")
OUTPUT_NAME = "probabilities"
# Files beside the SavedModel that make it self-contained (vocabulary, labels and
# the preprocessing settings a client needs to build the inputs).
ASSETS_EXTRA = "assets.extra"
VOCAB_NAME = "vocab.txt"
UNIGRAM_VOCAB_NAME = "vocab.json"  # a SentencePiece unigram vocab keeps its suffix
LABELS_NAME = "label_list.txt"
CONFIG_NAME = "export_config.json"


def export_saved_model(bert_config, label_list, checkpoint, export_dir, max_seq_length,
                       vocab_file, do_lower_case, pooling="cls"):
  """Writes a SavedModel of the classifier in `checkpoint` to `export_dir`.

  The model is rebuilt in inference mode (no dropout) in a fresh graph and its
  variables are restored from `checkpoint` (optimizer slots and the global step
  are not needed and not exported).

  Signature "serving_default" (tag "serve"):
    inputs:  input_ids, input_mask, segment_ids: int32 [batch_size, max_seq_length]
    outputs: probabilities: float32 [batch_size, len(label_list)], rows sum to 1,
             column i is label_list[i].

  `<export_dir>/assets.extra/` holds vocab.txt (a copy of `vocab_file`; vocab.json
  for a unigram vocab, see tokenization.load_tokenizer),
  label_list.txt (one label a line, in column order) and export_config.json
  ({"max_seq_length", "do_lower_case", "labels"}).

  The export is atomic: it is built in `<export_dir>.tmp-<pid>` and renamed into
  place; an existing `export_dir` is moved aside first and deleted afterwards, so a
  reader sees either the old export or the new one, never a mix.

  Args:
    bert_config: `modeling.BertConfig` of the fine-tuned model.
    label_list: list of label strings, in the order of the classifier's outputs.
    checkpoint: checkpoint prefix to export (e.g. ".../model.ckpt-26").
    export_dir: directory to write (created or replaced).
    max_seq_length: int, the sequence length of the inputs.
    vocab_file: path of the WordPiece vocabulary used for fine-tuning.
    do_lower_case: bool, whether the tokenizer lower-cases its input.
    pooling: "cls" or "mean", the classifier's sentence vector (as trained).

  Returns:
    `export_dir`, the path written.

  Raises:
    ValueError: empty `label_list`, missing `vocab_file` or checkpoint.
  """
  label_list = [str(l) for l in label_list]
  if not label_list:
    raise ValueError("export_saved_model: empty label_list")
  if not os.path.isfile(vocab_file):
    raise ValueError("export_saved_model: vocab_file %s: no such file" % vocab_file)
  if not (tf.io.gfile.exists(checkpoint + ".index") or tf.io.gfile.exists(checkpoint)):
    raise ValueError("export_saved_model: checkpoint %s: not found" % checkpoint)

  export_dir = export_dir.rstrip(os.sep) or export_dir
  parent = os.path.dirname(os.path.abspath(export_dir))
  os.makedirs(parent, exist_ok=True)
  tmp_dir = "%s.tmp-%d" % (export_dir, os.getpid())
  if os.path.exists(tmp_dir):
    shutil.rmtree(tmp_dir)

  try:
    _build_saved_model(bert_config, len(label_list), checkpoint, tmp_dir,
                       max_seq_length, pooling)
    _write_assets_extra(tmp_dir, label_list, max_seq_length, vocab_file, do_lower_case)
  except BaseException:
    shutil.rmtree(tmp_dir, ignore_errors=True)
    raise
  _replace_dir(tmp_dir, export_dir)
  return export_dir


def _build_saved_model(bert_config, num_labels, checkpoint, out_dir, max_seq_length,
                       pooling):
  """Builds the inference graph, restores `checkpoint`, saves a SavedModel in `out_dir`."""
  graph = tf.Graph()
  with graph.as_default():
    inputs = {
        name: tf1.placeholder(tf.int32, [None, max_seq_length], name=name)
        for name in INPUT_NAMES
    }
    # Labels only feed the (unused) loss: zeros int32 [batch_size].
    labels = tf.zeros_like(inputs["input_ids"][:, 0])
    (_, _, _, probabilities) = classifier_model.create_model(
        bert_config, False, inputs["input_ids"], inputs["input_mask"],
        inputs["segment_ids"], labels=labels, num_labels=num_labels, pooling=pooling)
    probabilities = tf.identity(probabilities, name=OUTPUT_NAME)
    saver = tf1.train.Saver(var_list=tf1.global_variables())

    signature = tf1.saved_model.signature_def_utils.build_signature_def(
        inputs={k: tf1.saved_model.utils.build_tensor_info(v)
                for k, v in inputs.items()},
        outputs={OUTPUT_NAME: tf1.saved_model.utils.build_tensor_info(probabilities)},
        method_name=tf1.saved_model.signature_constants.PREDICT_METHOD_NAME)

    config = tf1.ConfigProto(device_count={"GPU": 0})
    with tf1.Session(graph=graph, config=config) as sess:
      saver.restore(sess, checkpoint)
      builder = tf1.saved_model.Builder(out_dir)
      builder.add_meta_graph_and_variables(
          sess, [tf1.saved_model.tag_constants.SERVING],
          signature_def_map={SIGNATURE_NAME: signature},
          strip_default_attrs=True)
      builder.save()


def _write_assets_extra(out_dir, label_list, max_seq_length, vocab_file, do_lower_case):
  """Copies the vocabulary and writes the labels and preprocessing settings."""
  extra = os.path.join(out_dir, ASSETS_EXTRA)
  os.makedirs(extra, exist_ok=True)
  name = UNIGRAM_VOCAB_NAME if tokenization.is_unigram_vocab(vocab_file) else VOCAB_NAME
  shutil.copyfile(vocab_file, os.path.join(extra, name))
  with open(os.path.join(extra, LABELS_NAME), "w", encoding="utf-8") as f:
    f.write("".join(l + "\n" for l in label_list))
  config = {"max_seq_length": int(max_seq_length), "do_lower_case": bool(do_lower_case),
            "labels": label_list}
  with open(os.path.join(extra, CONFIG_NAME), "w", encoding="utf-8") as f:
    json.dump(config, f, indent=2)
    f.write("\n")


def _replace_dir(new_dir, target):
  """Moves `new_dir` to `target`, replacing an existing `target` directory."""
  if not os.path.exists(target):
    os.replace(new_dir, target)
    return
  old_dir = "%s.old-%d" % (target, os.getpid())
  if os.path.exists(old_dir):
    shutil.rmtree(old_dir)
  os.replace(target, old_dir)
  try:
    os.replace(new_dir, target)
  except BaseException:
    os.replace(old_dir, target)  # Put the previous export back.
    shutil.rmtree(new_dir, ignore_errors=True)
    raise
  shutil.rmtree(old_dir, ignore_errors=True)


def load_assets_extra(export_dir):
  """Reads `(vocab_file, label_list, config)` from `<export_dir>/assets.extra/`.

  Returns:
    vocab_file: path of the vocabulary copy; label_list: list of strings;
    config: dict with "max_seq_length" (int), "do_lower_case" (bool), "labels".

  Raises:
    ValueError: a file is missing or the labels disagree with the config.
  """
  extra = os.path.join(export_dir, ASSETS_EXTRA)
  vocab = UNIGRAM_VOCAB_NAME
  if not os.path.isfile(os.path.join(extra, vocab)):
    vocab = VOCAB_NAME
  paths = [os.path.join(extra, n) for n in (vocab, LABELS_NAME, CONFIG_NAME)]
  for path in paths:
    if not os.path.isfile(path):
      raise ValueError("%s: no such file (not an export of export.py?)" % path)
  with open(paths[1], "r", encoding="utf-8") as f:
    label_list = [l.rstrip("\r") for l in f.read().split("\n") if l.strip()]
  try:
    with open(paths[2], "r", encoding="utf-8") as f:
      config = json.load(f)
  except ValueError as e:
    raise ValueError("%s: not valid JSON (%s)" % (paths[2], e))
  for key in ("max_seq_length", "do_lower_case", "labels"):
    if key not in config:
      raise ValueError("%s: missing key %r" % (paths[2], key))
  if list(config["labels"]) != label_list:
    raise ValueError("%s: labels %s differ from %s %s" %
                     (paths[2], config["labels"], paths[1], label_list))
  return paths[0], label_list, config
