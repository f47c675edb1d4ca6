"""Tests of create_pretraining_data.py on a tiny synthetic corpus."""

import json
import os
import random
import subprocess
import sys

import pytest

import create_pretraining_data as cpd
import tokenization

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# Words made of characters no other word uses, so a token's word is known.
WORDS = ["甲乙", "丙丁戊", "己", "庚辛", "壬癸子", "丑", "寅卯", "辰巳午", "未",
         "申酉", "戌亥", "天地玄黄", "宇", "宙洪", "荒日月"]
FIRST_CHARS = {w[0] for w in WORDS}
CHARS = sorted({c for w in WORDS for c in w}) + ["。"]


def _write_inputs(directory, num_documents=60, seed=0):
  """Writes vocab.txt and corpus.txt (Google's format); returns their paths."""
  rng = random.Random(seed)
  vocab = os.path.join(directory, "vocab.txt")
  with open(vocab, "w", encoding="utf-8") as handle:
    handle.write("\n".join(SPECIALS + CHARS) + "\n")
  corpus = os.path.join(directory, "corpus.txt")
  with open(corpus, "w", encoding="utf-8") as handle:
    for _ in range(num_documents):
      for _ in range(rng.randint(4, 9)):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 8))]
        handle.write(" ".join(words) + " 。\n")
      handle.write("\n")
  return vocab, corpus


def _documents_and_config(tmp_path, whole_word, max_seq_length=32,
                          max_predictions_per_seq=20):
  vocab, corpus = _write_inputs(str(tmp_path))
  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  documents = cpd.tokenize_documents(tokenizer, cpd.read_documents([corpus]))
  config = cpd.make_masking_config(tokenizer.vocab, max_seq_length,
                                   max_predictions_per_seq, 0.15, 0.1, whole_word)
  return documents, config, tokenizer


def _instances(tmp_path, whole_word, dupe_factor=20, **kwargs):
  documents, config, tokenizer = _documents_and_config(tmp_path, whole_word, **kwargs)
  instances = []
  for shard in range(3):
    instances += cpd.shard_instances(documents, shard, 3, dupe_factor, 7, config)
  return instances, config, tokenizer


def _original_ids(instance):
  ids = list(instance.input_ids)
  for position, label in zip(instance.masked_lm_positions, instance.masked_lm_ids):
    ids[position] = label
  return ids


def test_mask_rate_and_80_10_10(tmp_path):
  instances, config, _ = _instances(tmp_path, whole_word=False)
  masked = kept = replaced = tokens = 0
  for instance in instances:
    special = sum(1 for i in instance.input_ids if i in (config.cls_id, config.sep_id))
    tokens += len(instance.input_ids) - special
    for position, label in zip(instance.masked_lm_positions, instance.masked_lm_ids):
      value = instance.input_ids[position]
      if value == config.mask_id:
        masked += 1
      elif value == label:
        kept += 1
      else:
        replaced += 1
        assert value in config.replacement_ids
  predictions = masked + kept + replaced
  assert predictions > 5000
  assert abs(predictions / tokens - 0.15) < 0.01
  assert abs(masked / predictions - 0.8) < 0.02
  # A random replacement equals the original 1 time in 27 here.
  assert abs(kept / predictions - 0.1 - 0.1 / 27) < 0.015
  assert abs(replaced / predictions - 0.1 * 26 / 27) < 0.015


def test_positions_sorted_unique_and_never_special(tmp_path):
  instances, config, _ = _instances(tmp_path, whole_word=True, dupe_factor=3)
  for instance in instances:
    positions = instance.masked_lm_positions
    assert positions == sorted(set(positions))
    assert 1 <= len(positions) <= config.max_predictions_per_seq
    original = _original_ids(instance)
    assert all(original[p] not in (config.cls_id, config.sep_id) for p in positions)
    assert len(instance.input_ids) <= config.max_seq_length
    assert instance.input_ids[0] == config.cls_id
    assert instance.input_ids[-1] == config.sep_id


def _words_of(instance, config, tokenizer):
  """Groups of positions forming one word occurrence (cut at segment edges)."""
  groups = []
  previous_special = True
  for position, token_id in enumerate(_original_ids(instance)):
    if token_id in (config.cls_id, config.sep_id):
      previous_special = True
      continue
    token = tokenizer.inv_vocab[token_id]
    if previous_special or token in FIRST_CHARS or token == "。":
      groups.append([position])
    else:
      groups[-1].append(position)
    previous_special = False
  return groups


@pytest.mark.parametrize("whole_word", [True, False])
def test_whole_word_groups_masked_together(tmp_path, whole_word):
  instances, config, tokenizer = _instances(tmp_path, whole_word, dupe_factor=5)
  partial = 0
  for instance in instances:
    masked = set(instance.masked_lm_positions)
    for group in _words_of(instance, config, tokenizer):
      hit = masked.intersection(group)
      if hit and len(hit) != len(group):
        partial += 1
  if whole_word:
    assert partial == 0
  else:
    assert partial > 100  # the check above can see a split word


def test_next_sentence_balance_and_segments(tmp_path):
  instances, config, _ = _instances(tmp_path, whole_word=False, dupe_factor=10)
  random_next = sum(1 for i in instances if i.is_random_next)
  assert 0.45 < random_next / len(instances) < 0.6
  for instance in instances:
    first_sep = instance.input_ids.index(config.sep_id)
    length = len(instance.input_ids)
    assert instance.segment_ids == [0] * (first_sep + 1) + [1] * (length - first_sep - 1)


def test_single_sentence_documents_split_at_a_word(tmp_path):
  documents, config, tokenizer = _documents_and_config(tmp_path, whole_word=False)
  # Every sentence its own document, like the short reviews of the corpus.
  singles = [[sentence] for document in documents for sentence in document]
  sentences = {tuple(s.ids) for document in singles for s in document}
  instances = cpd.shard_instances(singles, 0, 1, 5, 11, config)
  actual = [i for i in instances if not i.is_random_next]
  assert 0.45 < len(actual) / len(instances) < 0.55
  for instance in actual:
    original = _original_ids(instance)
    first_sep = original.index(config.sep_id)
    a, b = original[1:first_sep], original[first_sep + 1:-1]
    assert tuple(a + b) in sentences  # B is the rest of A's sentence...
    assert tokenizer.inv_vocab[b[0]] in FIRST_CHARS | {"。"}  # ...from a word start
  random_next = [i for i in instances if i.is_random_next]
  lengths = [len(i.input_ids) for i in random_next]
  # Random text is taken from as many documents as it takes to fill up.
  assert sum(n == config.max_seq_length for n in lengths) / len(lengths) > 0.7


def test_short_sequences_appear(tmp_path):
  instances, config, _ = _instances(tmp_path, whole_word=False, dupe_factor=10)
  lengths = [len(i.input_ids) for i in instances]
  full = sum(1 for n in lengths if n >= config.max_seq_length - 2)
  assert full / len(lengths) > 0.6
  assert min(lengths) < config.max_seq_length // 2


def _run_script(tmp_path, output, **flags):
  vocab = os.path.join(str(tmp_path), "vocab.txt")
  corpus = os.path.join(str(tmp_path), "corpus.txt")
  if not os.path.exists(corpus):
    _write_inputs(str(tmp_path))
  args = {"input_file": corpus, "output_file": output, "vocab_file": vocab,
          "max_seq_length": 32, "max_predictions_per_seq": 6, "dupe_factor": 2,
          "random_seed": 3, "do_whole_word_mask": "true"}
  args.update(flags)
  command = [sys.executable, os.path.join(REPO, "create_pretraining_data.py")]
  command += ["--%s=%s" % kv for kv in sorted(args.items())]
  return subprocess.run(command, cwd=REPO, capture_output=True, text=True,
                        timeout=300, check=False)


def _read_records(path):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  records = []
  for raw in tf.compat.v1.io.tf_record_iterator(path):
    records.append(tf.train.Example.FromString(raw))
  return records


def test_script_deterministic_over_workers_and_google_features(tmp_path):
  outputs = {}
  for workers, seed in ((1, 3), (2, 3), (1, 4)):
    prefix = str(tmp_path / ("w%d_s%d" % (workers, seed)) / "out.tfrecord")
    result = _run_script(tmp_path, prefix, num_output_shards=3,
                         num_workers=workers, random_seed=seed)
    assert result.returncode == 0, result.stderr[-2000:]
    paths = ["%s-%05d-of-00003" % (prefix, i) for i in range(3)]
    assert sorted(os.listdir(os.path.dirname(prefix))) == sorted(
        os.path.basename(p) for p in paths)
    outputs[(workers, seed)] = [open(p, "rb").read() for p in paths]
  assert outputs[(1, 3)] == outputs[(2, 3)]
  assert outputs[(1, 3)] != outputs[(1, 4)]

  records = []
  for i in range(3):
    records += _read_records("%s-%05d-of-00003" % (tmp_path / "w1_s3" / "out.tfrecord", i))
  assert len(records) > 100
  lengths = {"input_ids": 32, "input_mask": 32, "segment_ids": 32,
             "masked_lm_positions": 6, "masked_lm_ids": 6,
             "masked_lm_weights": 6, "next_sentence_labels": 1}
  for example in records:
    feature = example.features.feature
    assert sorted(feature) == sorted(cpd.FEATURE_NAMES)
    for name, length in lengths.items():
      kind = "float_list" if name == "masked_lm_weights" else "int64_list"
      assert feature[name].WhichOneof("kind") == kind
      assert len(getattr(feature[name], kind).value) == length, name
    mask = list(feature["input_mask"].int64_list.value)
    ids = list(feature["input_ids"].int64_list.value)
    assert all((i != 0) == bool(m) for i, m in zip(ids, mask))
    weights = list(feature["masked_lm_weights"].float_list.value)
    positions = list(feature["masked_lm_positions"].int64_list.value)
    assert all((p != 0) == (w == 1.0) for p, w in zip(positions, weights))


def test_comma_list_output_and_bad_input(tmp_path):
  paths = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
  result = _run_script(tmp_path, ",".join(paths), num_workers=2)
  assert result.returncode == 0, result.stderr[-2000:]
  assert all(os.path.getsize(p) > 0 for p in paths)
  result = _run_script(tmp_path, str(tmp_path / "c.tfrecord"),
                       input_file=str(tmp_path / "missing*.txt"))
  assert result.returncode == 2
  assert "--input_file" in result.stderr.strip().splitlines()[-1]
  # Fewer documents than shards: some shards would be empty.
  (tmp_path / "two_documents.txt").write_text("good food\nnice\n\nbad movie\n")
  result = _run_script(tmp_path, str(tmp_path / "d.tfrecord"), num_output_shards=3,
                       input_file=str(tmp_path / "two_documents.txt"))
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
      "create_pretraining_data.py: error: 3 output shards for 2 documents (a blank line "
      "ends a document; each shard takes whole ones): use at most 2 (--num_output_shards)")
  assert not [p for p in os.listdir(str(tmp_path)) if p.startswith("d.tfrecord")]
  (tmp_path / "a_file").write_text("not a folder\n")
  result = _run_script(tmp_path, str(tmp_path / "a_file" / "c.tfrecord"))
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1].startswith(
      "create_pretraining_data.py: error: --output_file=%s: cannot create or write in %s" %
      (tmp_path / "a_file" / "c.tfrecord", tmp_path / "a_file"))


W = tokenization.WORD_START


def _write_unigram(path, pieces):
  """A JSON unigram vocab (tokenization.UnigramTokenizer) of [piece, score] rows."""
  spec = {"model": "unigram", "specials": SPECIALS, "unk_token": "[UNK]",
          "unk_score": -20.0, "normalization": {},
          "pieces": [[t, 0.0] for t in SPECIALS] + [list(p) for p in pieces]}
  with open(path, "w", encoding="utf-8") as handle:
    json.dump(spec, handle, ensure_ascii=False)
  return path


def test_a_bad_unigram_vocab_is_a_clear_error(tmp_path):
  vocab = tmp_path / "vocab.json"
  vocab.write_text('{"model": "unigram"}\n', encoding="utf-8")
  result = _run_script(tmp_path, str(tmp_path / "d.tfrecord"), vocab_file=str(vocab))
  assert result.returncode == 2
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("create_pretraining_data.py: error: --vocab_file")
  assert str(vocab) in last


def test_unigram_pieces_are_the_joined_texts_and_words_group_them(tmp_path):
  """A line is segmented as the text its words were cut from (no space between
  Chinese words, one between Latin ones); a piece that begins inside a word
  continues that word's group, so the words it spans are masked together."""
  tokenizer = tokenization.UnigramTokenizer(_write_unigram(
      str(tmp_path / "vocab.json"),
      [(W + "这家", -3.0), (W + "这", -2.0), ("家", -2.5), ("酒店", -4.0), ("酒", -3.0),
       ("店", -3.0), (W + "店", -3.0), ("很好", -1.0), ("很", -2.0), ("好", -2.0),
       ("ab", -1.0), (W + "ab", -1.0), (W + "4", -1.0), (W, -5.0)]))
  assert cpd.join_words(["这家酒", "店", "很好", "ab", "4"]) == ("这家酒店很好ab 4",
                                                              [0, 3, 4, 6, 9])
  sentence = cpd.tokenize_sentence(tokenizer, "这家酒 店  很好 ab 4")
  pieces = [W + "这家", "酒店", "很好", "ab", W + "4"]
  assert tokenizer.convert_ids_to_tokens(sentence.ids) == pieces
  assert pieces == tokenizer.tokenize("这家酒店很好ab 4")
  # "酒店" begins inside "这家酒": one group covers the words 这家酒 and 店.
  assert sentence.starts == [True, False, True, True, True]


def test_the_script_takes_a_unigram_vocab(tmp_path):
  """End to end with a .json vocab: every record's segments are pieces of the
  corpus text with its spaces removed, never [UNK]."""
  _write_inputs(str(tmp_path))
  pieces = [(c, -3.0) for c in CHARS] + [(W + c, -3.0) for c in CHARS]
  pieces += [(w, -2.0) for w in WORDS if len(w) > 1] + [("己丑", -1.0)]
  vocab = _write_unigram(str(tmp_path / "vocab.json"), pieces)
  output = str(tmp_path / "u.tfrecord")
  result = _run_script(tmp_path, output, vocab_file=vocab)
  assert result.returncode == 0, result.stderr[-2000:]
  tokenizer = tokenization.UnigramTokenizer(vocab)
  with open(str(tmp_path / "corpus.txt"), encoding="utf-8") as handle:
    text = handle.read().replace(" ", "").replace("\n", "")
  records = _read_records(output)
  assert len(records) > 50
  spanning = 0  # pieces across two words ("己" "丑"): only the joined text has them
  for record in records:
    feature = record.features.feature
    ids = list(feature["input_ids"].int64_list.value)
    for position, label in zip(feature["masked_lm_positions"].int64_list.value,
                               feature["masked_lm_ids"].int64_list.value):
      if position:
        ids[position] = label
    tokens = tokenizer.convert_ids_to_tokens([i for i in ids if i])
    assert "[UNK]" not in tokens
    spanning += tokens.count("己丑")
    first = tokens[1:tokens.index("[SEP]")]
    assert "".join(first).replace(W, "") in text
  assert spanning > 0


def test_a_failed_shard_leaves_no_file_behind(tmp_path, monkeypatch):
  # A shard is written under a hidden temporary name and renamed when complete: a
  # run that dies mid-shard leaves nothing a glob like 'out/*' would pick up.
  documents, config, _ = _documents_and_config(tmp_path, whole_word=False)
  out = tmp_path / "out"
  out.mkdir()
  paths = [str(out / "pretrain-0"), str(out / "pretrain-1")]
  cpd.create_shards(documents, paths, 2, 12345, config, num_workers=1)
  good = [_read_records(p) for p in paths]
  real_serialize, written = cpd.serialize_instance, []

  def fail_after_three(*args):
    if len(written) == 3:
      raise RuntimeError("disk full")
    written.append(1)
    return real_serialize(*args)

  monkeypatch.setattr(cpd, "serialize_instance", fail_after_three)
  again = [str(out / "again-0")]
  with pytest.raises(RuntimeError, match="disk full"):
    cpd.create_shards(documents, again, 2, 12345, config, num_workers=1)
  assert sorted(os.listdir(str(out))) == ["pretrain-0", "pretrain-1"]
  assert [_read_records(p) for p in paths] == good
