"""Embedding rows for the tokens a pretrained model's vocab lacks, from a corpus.

When `convert_hf_checkpoint.py --target_vocab_file` gives a model a new vocab
(an English model's layers for Chinese characters), only the shared tokens keep
a trained row. This module gives most of the others a row that already says
something: which tokens occur in similar contexts.

1. Count, in every line of a corpus, pairs of tokens at most `window` apart,
   weighted 1/distance (`cooccurrence`).
2. Positive pointwise mutual information of those counts, reduced to `dim`
   dimensions by a seeded randomized SVD (`ppmi_vectors`): tokens with similar
   neighbours get similar vectors.
3. A ridge regression from those vectors to the model's rows, fitted on the
   shared tokens, maps every new token that occurs in the corpus into the
   model's embedding space (`transfer_rows`). New tokens the corpus lacks keep
   the rows they had.

Only numpy, dense [V, V] matrices: for a 4,820-token vocab and a 3M-character corpus
it takes 7 seconds and 0.9 GB of memory; memory grows with V squared (about
40 bytes x V^2: 18 GB for a 21,128-token vocab).
"""

import numpy as np


def token_id_lines(path, tokenizer):
  """Yields one int64 array of token ids per non-empty line of a UTF-8 file.

  Args:
    path: text file, e.g. the pretraining corpus (one sentence a line).
    tokenizer: `tokenization.FullTokenizer` of the target vocab.
  """
  with open(path, "r", encoding="utf-8") as f:
    for line in f:
      tokens = tokenizer.tokenize(line)
      if tokens:
        yield np.asarray(tokenizer.convert_tokens_to_ids(tokens), np.int64)


def cooccurrence(id_lines, vocab_size, window=3):
  """Symmetric co-occurrence counts within lines, weighted 1/distance.

  Args:
    id_lines: iterable of int arrays, token ids of one line each.
    vocab_size: V.
    window: largest distance counted.

  Returns:
    float64 [V, V], counts[i, j] == counts[j, i].
  """
  ids, line = [], []
  for n, one in enumerate(id_lines):
    ids.append(one)
    line.append(np.full(len(one), n, np.int64))
  ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
  line = np.concatenate(line) if line else np.zeros(0, np.int64)
  flat = np.zeros(vocab_size * vocab_size, np.float64)
  for distance in range(1, window + 1):
    same = line[distance:] == line[:-distance]
    left, right = ids[:-distance][same], ids[distance:][same]
    for a, b in ((left, right), (right, left)):
      flat += np.bincount(a * vocab_size + b, minlength=vocab_size * vocab_size) / distance
  return flat.reshape(vocab_size, vocab_size)


def ppmi_vectors(counts, dim, seed=12345, power_iterations=4):
  """Token vectors: randomized rank-`dim` SVD of the positive PMI matrix.

  Args:
    counts: float [V, V] symmetric co-occurrence counts.
    dim: vector size (<= V).
    seed: seed of the random projection.
    power_iterations: subspace iterations (more: closer to the exact SVD).

  Returns:
    float64 [V, dim], U * sqrt(singular values); rows of unseen tokens are 0.
  """
  row = counts.sum(axis=1)
  seen = row > 0
  with np.errstate(divide="ignore", invalid="ignore"):
    pmi = np.log(counts * row.sum() / np.outer(row, row))
  ppmi = np.where(counts > 0, np.maximum(pmi, 0.0), 0.0)
  ppmi[~seen] = 0.0
  ppmi[:, ~seen] = 0.0
  rng = np.random.RandomState(seed)
  basis = np.linalg.qr(ppmi @ rng.normal(size=(ppmi.shape[1], dim)))[0]
  for _ in range(power_iterations):
    basis = np.linalg.qr(ppmi @ (ppmi.T @ basis))[0]
  u_small, singular, _ = np.linalg.svd(basis.T @ ppmi, full_matrices=False)
  return (basis @ u_small) * np.sqrt(singular)


def transfer_rows(table, vectors, shared, new, ridge=1.0):
  """Replaces rows `new` of `table` by a ridge map of `vectors` fitted on `shared`.

  Args:
    table: float [V, H] embedding table, rows `shared` trained. Changed in place.
    vectors: float [V, D] corpus vectors (`ppmi_vectors`); all-zero rows are
      tokens the corpus lacks and are left as they are.
    shared: int rows whose table row came from the model.
    new: int rows to replace.
    ridge: L2 penalty of the map (a column of ones gives it a bias).

  Returns:
    The rows actually replaced (those of `new` the corpus has).
  """
  shared = np.asarray(shared, np.int64)
  new = np.asarray(new, np.int64)
  new = new[np.abs(vectors[new]).sum(axis=1) > 0]
  features = np.hstack([vectors, np.ones((len(vectors), 1))])
  x, y = features[shared], table[shared].astype(np.float64)
  gram = x.T @ x + ridge * np.eye(x.shape[1])
  weights = np.linalg.solve(gram, x.T @ y)
  table[new] = (features[new] @ weights).astype(table.dtype)
  return new
