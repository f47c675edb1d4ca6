#!/usr/bin/env python
"""Converts a Hugging Face BERT checkpoint (safetensors) to a Google BERT checkpoint.

Reads `model.safetensors`, `config.json` and `vocab.txt` from a Hugging Face model
folder (no PyTorch needed) and writes what `run_classifier.py` expects:

  O/bert_model.ckpt.index, O/bert_model.ckpt.data-*   TF checkpoint, Google names
  O/bert_config.json                                  Google's config keys
  O/vocab.txt                                         copied unchanged

Usage:

  python scripts/convert_hf_checkpoint.py --model_dir path/to/hf_model \\
      --output_dir path/to/google_model [--allow_missing_pooler] \\
      [--target_vocab_file path/to/other_vocab.txt [--new_rows_corpus corpus.txt]]

  python run_classifier.py ... --init_checkpoint=O/bert_model.ckpt \\
      --bert_config_file=O/bert_config.json --vocab_file=O/vocab.txt

Names may carry a `bert.` prefix or not (sentence-transformers models have none);
LayerNorm parameters may be `weight`/`bias` or the older `gamma`/`beta`. Linear
`weight` [out, in] becomes `kernel` [in, out]; embedding tables are copied as is.
Ignored on purpose (listed as skipped): `embeddings.position_ids` buffers and the
pre-training heads `cls.*`. Any other tensor that maps to no Google variable, any
Google variable the file lacks, and any shape mismatch is an error.

Hugging Face's `hidden_act` "gelu" is the exact (erf) GELU, here "gelu_exact";
"gelu_new" / "gelu_pytorch_tanh" are the tanh approximation, here "gelu".

`--target_vocab_file` swaps the vocabulary (e.g. an English model's layers for a
Chinese vocab, to continue pretraining with `run_pretraining.py --init_checkpoint`): the
word embedding table gets one row per line of that file, copied from the model where the
model's vocab has the same token and drawn from the truncated normal of
`initializer_range` (seeded) where it does not; vocab_size and the written vocab.txt are
the new ones. Every other tensor is converted unchanged. With `--new_rows_corpus FILE`
the rows of new tokens that FILE contains are instead mapped from their contexts there
into the model's embedding space (scripts/embedding_transfer.py).

Errors print one line `convert_hf_checkpoint.py: error: ...` on stderr, exit code 2.
"""

import argparse
import collections
import json
import os
import re
import shutil
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (ROOT, os.path.join(ROOT, "scripts")):
  if _path not in sys.path:
    sys.path.insert(0, _path)

import embedding_transfer  # pylint: disable=wrong-import-position
import modeling  # pylint: disable=wrong-import-position
import tokenization  # pylint: disable=wrong-import-position

PROG = "convert_hf_checkpoint.py"
CKPT_NAME = "bert_model.ckpt"
CORPUS_DIM = 128  # size of the corpus vectors of --new_rows_corpus

# Hugging Face `hidden_act` -> modeling.py `hidden_act`.
HF_ACTIVATIONS = {
    "gelu": "gelu_exact",
    "gelu_new": "gelu",
    "gelu_pytorch_tanh": "gelu",
    "relu": "relu",
    "tanh": "tanh",
    "linear": "linear",
}

# Hugging Face BertConfig defaults for keys a config.json may omit.
HF_DEFAULTS = {
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
}

MODEL_LAYER_NORM_EPS = 1e-12

# Tensors deliberately not converted: (pattern on the name without `bert.`, reason).
IGNORED = [
    (re.compile(r"^embeddings\.position_ids$"), "position_ids buffer"),
    (re.compile(r"^cls\."), "pre-training (MLM/NSP) head"),
]

_LINEAR = r"(?P<p>attention\.self\.(?:query|key|value)|attention\.output\.dense|" \
          r"intermediate\.dense|output\.dense)"
_LN_SCOPE = r"(?P<p>attention\.output|output)"
# (pattern on the name without `bert.`, Google name template, transpose?)
_RULES = [
    (r"embeddings\.(?P<t>word_embeddings|position_embeddings|token_type_embeddings)"
     r"\.weight", "bert/embeddings/{t}", False),
    (r"embeddings\.LayerNorm\.(?:weight|gamma)", "bert/embeddings/LayerNorm/gamma", False),
    (r"embeddings\.LayerNorm\.(?:bias|beta)", "bert/embeddings/LayerNorm/beta", False),
    (r"encoder\.layer\.(?P<n>\d+)\." + _LINEAR + r"\.weight",
     "bert/encoder/layer_{n}/{p}/kernel", True),
    (r"encoder\.layer\.(?P<n>\d+)\." + _LINEAR + r"\.bias",
     "bert/encoder/layer_{n}/{p}/bias", False),
    (r"encoder\.layer\.(?P<n>\d+)\." + _LN_SCOPE + r"\.LayerNorm\.(?:weight|gamma)",
     "bert/encoder/layer_{n}/{p}/LayerNorm/gamma", False),
    (r"encoder\.layer\.(?P<n>\d+)\." + _LN_SCOPE + r"\.LayerNorm\.(?:bias|beta)",
     "bert/encoder/layer_{n}/{p}/LayerNorm/beta", False),
    (r"pooler\.dense\.weight", "bert/pooler/dense/kernel", True),
    (r"pooler\.dense\.bias", "bert/pooler/dense/bias", False),
]
_RULES = [(re.compile("^" + pattern + "$"), template, transpose)
          for pattern, template, transpose in _RULES]

POOLER_NAMES = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")


class ConversionError(Exception):
  """A problem with the input model; the message is printed as one line."""


def load_hf_model(model_dir):
  """Reads `model.safetensors` and `config.json` from `model_dir`.

  Returns:
    (tensors, hf_config): dict name -> numpy array, and the parsed config dict.
  """
  paths = {name: os.path.join(model_dir, name)
           for name in ("model.safetensors", "config.json", "vocab.txt")}
  for path in paths.values():
    if not os.path.isfile(path):
      raise ConversionError("%s not found" % path)
  try:
    with open(paths["config.json"], "r", encoding="utf-8") as f:
      hf_config = json.load(f)
  except (OSError, ValueError) as e:
    raise ConversionError("%s: cannot read (%s)" % (paths["config.json"], e))
  if not isinstance(hf_config, dict):
    raise ConversionError("%s: expected a JSON object" % paths["config.json"])
  try:
    from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ConversionError("reading model.safetensors needs the safetensors package: "
                          "install it with `pip install -r requirements.txt` "
                          "(or `pip install safetensors==0.4.5`)")
  try:
    tensors = load_file(paths["model.safetensors"])
  except Exception as e:  # pylint: disable=broad-except
    raise ConversionError("%s: cannot read (%s)" % (
        paths["model.safetensors"], str(e).splitlines()[0] if str(e) else type(e).__name__))
  return tensors, hf_config


def hf_config_to_bert_config(hf_config):
  """Translates a Hugging Face BERT `config.json` dict into a `modeling.BertConfig`."""
  model_type = hf_config.get("model_type", "bert")
  if model_type != "bert":
    raise ConversionError("config.json: model_type %r is not supported (only \"bert\")"
                          % model_type)
  position_type = hf_config.get("position_embedding_type", "absolute")
  if position_type != "absolute":
    raise ConversionError("config.json: position_embedding_type %r is not supported "
                          "(only \"absolute\")" % position_type)
  missing = [k for k in modeling.REQUIRED_CONFIG_KEYS if k not in hf_config]
  if missing:
    raise ConversionError("config.json: missing keys %s" % ", ".join(missing))
  values = dict(HF_DEFAULTS)
  values.update({k: v for k, v in hf_config.items() if k in HF_DEFAULTS and v is not None})
  eps = values["layer_norm_eps"]
  if not np.isclose(float(eps), MODEL_LAYER_NORM_EPS, rtol=1e-6, atol=0.0):
    raise ConversionError("config.json: layer_norm_eps %r is not supported (modeling.py "
                          "uses %g)" % (eps, MODEL_LAYER_NORM_EPS))
  act = values["hidden_act"]
  if not isinstance(act, str) or act.lower() not in HF_ACTIVATIONS:
    raise ConversionError("config.json: hidden_act %r is not supported (choose from %s)"
                          % (act, ", ".join(sorted(HF_ACTIVATIONS))))
  config = modeling.BertConfig(
      vocab_size=hf_config["vocab_size"],
      hidden_size=hf_config["hidden_size"],
      num_hidden_layers=hf_config["num_hidden_layers"],
      num_attention_heads=hf_config["num_attention_heads"],
      intermediate_size=hf_config["intermediate_size"],
      hidden_act=HF_ACTIVATIONS[act.lower()],
      hidden_dropout_prob=values["hidden_dropout_prob"],
      attention_probs_dropout_prob=values["attention_probs_dropout_prob"],
      max_position_embeddings=values["max_position_embeddings"],
      type_vocab_size=values["type_vocab_size"],
      initializer_range=values["initializer_range"])
  try:
    config.validate("config.json")
  except modeling.ConfigError as e:
    raise ConversionError(str(e))
  return config


def google_name(hf_name):
  """The Google variable name for a Hugging Face tensor name and whether to transpose.

  Returns:
    (name, transpose), or None if no rule matches.
  """
  short = hf_name[len("bert."):] if hf_name.startswith("bert.") else hf_name
  for pattern, template, transpose in _RULES:
    m = pattern.match(short)
    if m:
      parts = {k: v.replace(".", "/") for k, v in m.groupdict().items()}
      return template.format(**parts), transpose
  return None


def ignore_reason(hf_name):
  """Why `hf_name` is deliberately not converted, or None if it should be."""
  short = hf_name[len("bert."):] if hf_name.startswith("bert.") else hf_name
  for pattern, reason in IGNORED:
    if pattern.search(short):
      return reason
  return None


def truncated_normal(shape, stddev, rng):
  """Normal(0, stddev) samples redrawn until within 2 stddev (as TF's initializer)."""
  out = rng.normal(0.0, stddev, size=shape)
  bad = np.abs(out) > 2 * stddev
  while bad.any():
    out[bad] = rng.normal(0.0, stddev, size=int(bad.sum()))
    bad = np.abs(out) > 2 * stddev
  return out.astype(np.float32)


def map_weights(tensors, config, allow_missing_pooler=False, seed=12345):
  """Maps Hugging Face tensors to Google variable names, checking names and shapes.

  Args:
    tensors: dict Hugging Face name -> numpy array.
    config: `modeling.BertConfig` the tensors must fit.
    allow_missing_pooler: initialize an absent pooler instead of failing.
    seed: random seed of that initialization.

  Returns:
    (weights, skipped, initialized): OrderedDict Google name -> float32 array in
    `expected_checkpoint_shapes` order, list of (hf_name, reason) not converted,
    list of Google names that were initialized rather than converted.
  """
  expected = modeling.expected_checkpoint_shapes(config)
  found, source, skipped = {}, {}, []
  for hf_name in sorted(tensors):
    reason = ignore_reason(hf_name)
    if reason is not None:
      skipped.append((hf_name, reason))
      continue
    mapped = google_name(hf_name)
    if mapped is None or mapped[0] not in expected:
      raise ConversionError("tensor %s maps to no BERT variable%s" % (
          hf_name, "" if mapped is None else " (would be %s, which the config does "
          "not have)" % mapped[0]))
    name, transpose = mapped
    if name in source:
      raise ConversionError("tensors %s and %s both map to %s" %
                            (source[name], hf_name, name))
    value = np.asarray(tensors[hf_name])
    if not np.issubdtype(value.dtype, np.floating):
      raise ConversionError("tensor %s has dtype %s, expected a float type" %
                            (hf_name, value.dtype))
    if transpose:
      if value.ndim != 2:
        raise ConversionError("tensor %s (for %s) has shape %s, expected a matrix" %
                              (hf_name, name, list(value.shape)))
      value = value.T
    if tuple(value.shape) != tuple(expected[name]):
      raise ConversionError(
          "shape mismatch for %s (from %s): checkpoint has %s%s, config needs %s" %
          (name, hf_name, list(value.shape), " after transposing" if transpose else "",
           list(expected[name])))
    found[name] = np.ascontiguousarray(value, dtype=np.float32)
    source[name] = hf_name

  initialized = []
  missing = [name for name in expected if name not in found]
  if allow_missing_pooler and all(n in missing for n in POOLER_NAMES):
    rng = np.random.RandomState(seed)
    h = config.hidden_size
    found["bert/pooler/dense/kernel"] = truncated_normal(
        (h, h), config.initializer_range, rng)
    found["bert/pooler/dense/bias"] = np.zeros((h,), np.float32)
    initialized = list(POOLER_NAMES)
    missing = [name for name in missing if name not in POOLER_NAMES]
  if missing:
    hint = (" (pass --allow_missing_pooler to initialize a new pooler)"
            if any(n in POOLER_NAMES for n in missing) else "")
    more = " and %d more" % (len(missing) - 5) if len(missing) > 5 else ""
    raise ConversionError("the model file lacks %s%s%s" %
                          (", ".join(missing[:5]), more, hint))
  weights = collections.OrderedDict((name, found[name]) for name in expected)
  return weights, skipped, initialized


def swap_vocab(weights, source_tokens, target_tokens, stddev, seed=12345):
  """Re-indexes the word embedding table from `source_tokens` to `target_tokens`.

  Args:
    weights: OrderedDict Google name -> array; "bert/embeddings/word_embeddings"
      is [vocab_size, hidden], row i for `source_tokens[i]`. Changed in place.
    source_tokens: dict token -> row of the model's vocab (tokenization.load_vocab).
    target_tokens: dict token -> row 0, 1, ... of the new vocab.
    stddev: truncated-normal stddev of rows the model's vocab lacks.
    seed: random seed of those rows.

  Returns:
    int array, the rows (of the new table) copied from the model.
  """
  name = "bert/embeddings/word_embeddings"
  table = weights[name]
  new = truncated_normal((len(target_tokens), table.shape[1]), stddev,
                         np.random.RandomState(seed))
  kept = []
  for token, i in target_tokens.items():
    if source_tokens.get(token, table.shape[0]) < table.shape[0]:
      new[i] = table[source_tokens[token]]
      kept.append(i)
  weights[name] = new
  return np.asarray(kept, np.int64)


def corpus_rows(weights, kept, vocab_file, corpus_file):
  """Rows of new tokens from their contexts in `corpus_file` (embedding_transfer).

  Args:
    weights: as for `swap_vocab`, after it; the table is changed in place.
    kept: rows `swap_vocab` copied from the model.
    vocab_file: the target vocab.
    corpus_file: text, one sentence a line.

  Returns:
    The number of rows replaced.
  """
  table = weights["bert/embeddings/word_embeddings"]
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  try:
    counts = embedding_transfer.cooccurrence(
        embedding_transfer.token_id_lines(corpus_file, tokenizer), table.shape[0])
    if not counts.any():
      raise ConversionError("%s has no two vocab tokens on one line" % corpus_file)
    vectors = embedding_transfer.ppmi_vectors(counts, min(CORPUS_DIM, table.shape[0]))
  except MemoryError as e:
    raise ConversionError("not enough memory for --new_rows_corpus with %d tokens (about "
                          "%.1f GB)" % (table.shape[0], 40e-9 * table.shape[0] ** 2)) from e
  others = np.setdiff1d(np.arange(table.shape[0]), kept)
  return len(embedding_transfer.transfer_rows(table, vectors, kept, others))


def write_checkpoint(weights, checkpoint_prefix):
  """Writes `weights` (Google name -> array) with a tf.compat.v1 Saver.

  Each variable takes its array's dtype (float32 for converted weights; also
  int64 `global_step` from scripts/average_checkpoints.py). Values are fed through
  placeholders, so large tables never enter the GraphDef.

  Returns:
    The checkpoint prefix written (e.g. `O/bert_model.ckpt`).
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  tf1 = tf.compat.v1
  graph = tf.Graph()
  with graph.as_default():
    variables, feeds, assigns = collections.OrderedDict(), {}, []
    for name, value in weights.items():
      dtype = tf.as_dtype(value.dtype)
      var = tf1.get_variable(name, shape=value.shape, dtype=dtype,
                             initializer=tf1.zeros_initializer(), use_resource=False)
      if var.op.name != name:
        raise ConversionError("internal error: variable %s was named %s" %
                              (name, var.op.name))
      placeholder = tf1.placeholder(dtype, shape=value.shape)
      assigns.append(tf1.assign(var, placeholder))
      feeds[placeholder] = value
      variables[name] = var
    saver = tf1.train.Saver(var_list=variables)
    with tf1.Session(graph=graph) as sess:
      sess.run(assigns, feed_dict=feeds)
      return saver.save(sess, checkpoint_prefix, write_meta_graph=False)


def write_bert_config(config, path):
  """Writes `config` as Google's `bert_config.json` (its eleven keys only)."""
  keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
          "intermediate_size", "hidden_act", "hidden_dropout_prob",
          "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
          "initializer_range")
  with open(path, "w", encoding="utf-8") as f:
    json.dump({k: getattr(config, k) for k in keys}, f, indent=2)
    f.write("\n")


def check_vocab(vocab_path, config):
  """Raises if `vocab.txt` has more entries than the embedding table has rows."""
  with open(vocab_path, "r", encoding="utf-8") as f:
    n = sum(1 for line in f if line.strip())
  if n > config.vocab_size:
    raise ConversionError("%s has %d entries but vocab_size is %d" %
                          (vocab_path, n, config.vocab_size))
  return n


def load_vocab(path):
  """tokenization.load_vocab (token -> row), its errors as ConversionError."""
  try:
    return tokenization.load_vocab(path)
  except ValueError as e:
    raise ConversionError(str(e)) from e


def parse_args(argv):
  """Parses the command line."""
  parser = argparse.ArgumentParser(
      prog=PROG, description="Convert a Hugging Face BERT (safetensors) model folder "
      "to a Google BERT checkpoint, bert_config.json and vocab.txt.")
  parser.add_argument("--model_dir", required=True,
                      help="folder with model.safetensors, config.json and vocab.txt")
  parser.add_argument("--output_dir", required=True, help="folder to write to")
  parser.add_argument("--allow_missing_pooler", action="store_true",
                      help="initialize the pooler (zeros bias, truncated-normal kernel) "
                      "if the model has none, instead of failing")
  parser.add_argument("--target_vocab_file", default=None,
                      help="write the model for this vocab instead of its own: "
                      "embedding rows of shared tokens are copied, the others "
                      "initialized")
  parser.add_argument("--new_rows_corpus", default=None,
                      help="with --target_vocab_file: initialize the rows of new "
                      "tokens from their contexts in this text file (one sentence a "
                      "line), mapped into the model's embedding space; new tokens it "
                      "lacks stay random (memory: about 40 bytes x vocab size squared)")
  args = parser.parse_args(argv)
  if args.new_rows_corpus and not args.target_vocab_file:
    parser.error("--new_rows_corpus needs --target_vocab_file")
  return args


def main(argv=None):
  """Runs the conversion; returns the exit code (0, or 2 on an error)."""
  args = parse_args(argv)
  try:
    tensors, hf_config = load_hf_model(args.model_dir)
    config = hf_config_to_bert_config(hf_config)
    vocab_src = os.path.join(args.model_dir, "vocab.txt")
    n_vocab = check_vocab(vocab_src, config)
    weights, skipped, initialized = map_weights(
        tensors, config, allow_missing_pooler=args.allow_missing_pooler)
    swapped = None
    if args.target_vocab_file:
      target = load_vocab(args.target_vocab_file)
      kept = swap_vocab(weights, load_vocab(vocab_src), target, config.initializer_range)
      swapped = "vocab swapped to %s: %d of %d token embeddings copied from the model" % (
          args.target_vocab_file, len(kept), len(target))
      if args.new_rows_corpus:
        replaced = corpus_rows(weights, kept, args.target_vocab_file, args.new_rows_corpus)
        swapped += ", %d from their contexts in %s" % (replaced, args.new_rows_corpus)
      swapped += ", the others initialized (stddev %g)" % config.initializer_range
      vocab_src = args.target_vocab_file
      config.vocab_size = n_vocab = len(target)
    os.makedirs(args.output_dir, exist_ok=True)
    prefix = write_checkpoint(weights, os.path.join(args.output_dir, CKPT_NAME))
    write_bert_config(config, os.path.join(args.output_dir, "bert_config.json"))
    vocab_dst = os.path.join(args.output_dir, "vocab.txt")
    if os.path.abspath(vocab_src) != os.path.abspath(vocab_dst):
      shutil.copyfile(vocab_src, vocab_dst)
  except (ConversionError, OSError) as e:
    message = " ".join(str(e).split())
    sys.stderr.write("%s: error: %s\n" % (PROG, message))
    return 2
  for hf_name, reason in skipped:
    print("skipped %s (%s)" % (hf_name, reason))
  for name in initialized:
    sys.stderr.write("%s: warning: %s is not in the model file; initialized it "
                     "(zeros bias, truncated-normal kernel, stddev %g)\n" %
                     (PROG, name, config.initializer_range))
  if swapped:
    print(swapped)
  print("converted %d tensors (%d parameters, hidden_act %s, vocab %d/%d) to %s" % (
      len(weights) - len(initialized), sum(v.size for v in weights.values()),
      config.hidden_act, n_vocab, config.vocab_size, prefix))
  return 0


if __name__ == "__main__":
  sys.exit(main())
