"""Tests of pretraining_model.py and pretraining_data.py on a tiny model and tiny TFRecords."""

import numpy as np
import pytest
import tensorflow as tf

import modeling
import pretraining_data
import pretraining_model
from conftest import tiny_config
from pretraining_fixtures import PRED, SEQ, to_example, write_records, write_shards

tf1 = tf.compat.v1
NAMES = [name for name, _ in pretraining_data.FEATURE_LENGTHS]


def as_arrays(instances):
  """Feature dicts -> dict of arrays as the input_fn gives them."""
  out = {}
  for name in NAMES:
    dtype = np.float32 if name == "masked_lm_weights" else np.int32
    out[name] = np.array([inst[name] for inst in instances], dtype=dtype)
  return out


def build(config, batch, is_training=False, compute_type=tf.float32):
  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(1)
    features = {
        name: tf1.placeholder(tf.float32 if name == "masked_lm_weights" else tf.int32,
                              [batch, {"seq": SEQ, "pred": PRED}.get(length, length)],
                              name=name)
        for name, length in pretraining_data.FEATURE_LENGTHS}
    loss, outputs = pretraining_model.create_model(config, is_training, features,
                                                   compute_type=compute_type)
  return graph, features, loss, outputs


def test_variable_names_and_shapes_are_googles():
  config = modeling.BertConfig.from_dict(tiny_config())
  graph, _, _, _ = build(config, batch=2)
  with graph.as_default():
    found = {v.name[:-2]: tuple(v.shape.as_list()) for v in tf1.global_variables()}
  assert found == dict(pretraining_model.expected_checkpoint_shapes(config))
  # The literal names of the heads in Google's released checkpoints.
  vocab = config.vocab_size
  assert {n: s for n, s in found.items() if n.startswith("cls/")} == {
      "cls/predictions/transform/dense/kernel": (32, 32),
      "cls/predictions/transform/dense/bias": (32,),
      "cls/predictions/transform/LayerNorm/gamma": (32,),
      "cls/predictions/transform/LayerNorm/beta": (32,),
      "cls/predictions/output_bias": (vocab,),
      "cls/seq_relationship/output_weights": (2, 32),
      "cls/seq_relationship/output_bias": (2,),
  }
  # Every bert/ variable is the classifier's encoder (tied output: no extra table).
  assert {n for n in found if n.startswith("bert/")} == set(
      modeling.expected_checkpoint_shapes(config))


def test_gather_indexes():
  seq = np.arange(2 * 5 * 3, dtype=np.float32).reshape(2, 5, 3)
  pos = np.array([[0, 4], [2, 2]], dtype=np.int32)
  with tf.Graph().as_default(), tf1.Session() as sess:
    out = sess.run(pretraining_model.gather_indexes(tf.constant(seq), tf.constant(pos)))
  np.testing.assert_array_equal(out, [seq[0, 0], seq[0, 4], seq[1, 2], seq[1, 2]])


def test_losses_and_metrics_match_numpy(tmp_path):
  config = modeling.BertConfig.from_dict(tiny_config(dropout=0.0))
  instances = write_records(str(tmp_path / "a.tfrecord"), 6, seed=4)
  batch = as_arrays(instances)
  graph, features, loss, outputs = build(config, batch=6)
  with graph.as_default():
    metrics = pretraining_model.metric_fn(outputs, features)
    feed = {features[n]: batch[n] for n in NAMES}
    with tf1.Session() as sess:
      sess.run([tf1.global_variables_initializer(), tf1.local_variables_initializer()])
      values = sess.run([loss, outputs], feed)
      sess.run({k: v[1] for k, v in metrics.items()}, feed)
      metric_values = sess.run({k: v[0] for k, v in metrics.items()})
  total, out = values
  assert out["masked_lm_log_probs"].shape == (6 * PRED, config.vocab_size)
  assert out["next_sentence_log_probs"].shape == (6, 2)

  ids = batch["masked_lm_ids"].reshape(-1)
  w = batch["masked_lm_weights"].reshape(-1)
  assert 0 < w.sum() < w.size  # Some padding predictions, which must not count.
  mlm_lp = out["masked_lm_log_probs"]
  mlm_example = -mlm_lp[np.arange(ids.size), ids]
  np.testing.assert_allclose(out["masked_lm_example_loss"], mlm_example, rtol=1e-6)
  mlm_loss = (w * mlm_example).sum() / (w.sum() + 1e-5)
  np.testing.assert_allclose(out["masked_lm_loss"], mlm_loss, rtol=1e-5)
  labels = batch["next_sentence_labels"].reshape(-1)
  nsp_example = -out["next_sentence_log_probs"][np.arange(6), labels]
  np.testing.assert_allclose(out["next_sentence_loss"], nsp_example.mean(), rtol=1e-5)
  np.testing.assert_allclose(total, mlm_loss + nsp_example.mean(), rtol=1e-5)
  # A random model over the vocabulary starts near log(V).
  assert abs(mlm_loss - np.log(config.vocab_size)) < 1.0

  correct = (mlm_lp.argmax(-1) == ids).astype(np.float32)
  np.testing.assert_allclose(metric_values["masked_lm_accuracy"],
                             (w * correct).sum() / w.sum(), rtol=1e-5)
  np.testing.assert_allclose(metric_values["masked_lm_loss"],
                             (w * mlm_example).sum() / w.sum(), rtol=1e-5)
  np.testing.assert_allclose(
      metric_values["next_sentence_accuracy"],
      (out["next_sentence_log_probs"].argmax(-1) == labels).mean(), rtol=1e-5)
  np.testing.assert_allclose(metric_values["next_sentence_loss"], nsp_example.mean(),
                             rtol=1e-5)


def test_output_embeddings_are_tied():
  """The masked-LM logits use the word-embedding table: its gradient has a dense
  part from the output layer, not only the rows of the input tokens."""
  config = modeling.BertConfig.from_dict(tiny_config(dropout=0.0))
  graph, features, loss, _ = build(config, batch=2)
  with graph.as_default():
    table = [v for v in tf1.global_variables()
             if v.name == "bert/embeddings/word_embeddings:0"][0]
    grad = tf.convert_to_tensor(tf1.gradients(loss, table)[0])
    batch = as_arrays(write_records_in_memory(2))
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      g = sess.run(grad, {features[n]: batch[n] for n in NAMES})
  unused = sorted(set(range(config.vocab_size)) - set(batch["input_ids"].reshape(-1)))
  assert unused and np.all(np.abs(g[unused]).sum(axis=1) > 0)


def write_records_in_memory(n, seed=9):
  import random  # pylint: disable=g-import-not-at-top
  from pretraining_fixtures import make_instance  # pylint: disable=g-import-not-at-top
  rng = random.Random(seed)
  return [make_instance(rng) for _ in range(n)]


def test_bfloat16_compute_is_close_to_float32():
  config = modeling.BertConfig.from_dict(tiny_config(dropout=0.0))
  batch = as_arrays(write_records_in_memory(4))
  losses = []
  for compute_type in (tf.float32, tf.bfloat16):
    graph, features, loss, outputs = build(config, batch=4, compute_type=compute_type)
    with graph.as_default(), tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      losses.append(sess.run(loss, {features[n]: batch[n] for n in NAMES}))
      if compute_type == tf.bfloat16:
        # The vocabulary product really runs in bfloat16.
        assert any(op.type in ("MatMul", "BatchMatMulV2") and
                   op.outputs[0].dtype == tf.bfloat16 and
                   op.outputs[0].shape.as_list() == [4 * PRED, config.vocab_size]
                   for op in graph.get_operations())
  np.testing.assert_allclose(losses[1], losses[0], rtol=2e-2)


def read_all(input_fn):
  with tf.Graph().as_default():
    batch = tf1.data.make_one_shot_iterator(input_fn()).get_next()
    rows = []
    with tf1.Session() as sess:
      while True:
        try:
          rows.append(sess.run(batch))
        except tf.errors.OutOfRangeError:
          return rows


def take(input_fn, n):
  with tf.Graph().as_default():
    batch = tf1.data.make_one_shot_iterator(input_fn()).get_next()
    with tf1.Session() as sess:
      return [sess.run(batch) for _ in range(n)]


def test_input_fn_decodes_records_in_order(tmp_path):
  paths, instances = write_shards(str(tmp_path), 2, 5)
  rows = read_all(pretraining_data.input_fn_builder(paths, SEQ, PRED, 4, is_training=False))
  assert [len(r["input_ids"]) for r in rows] == [4, 4, 2]
  got = {n: np.concatenate([r[n] for r in rows]) for n in NAMES}
  expected = as_arrays(instances)
  for name in NAMES:
    np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    assert got[name].dtype == (np.float32 if name == "masked_lm_weights" else np.int32)
  assert got["next_sentence_labels"].shape == (10, 1)


def test_shard_files():
  files = ["a", "b", "c", "d", "e"]
  assert pretraining_data.shard_files(files, 1, 2) == (["b", "d"], False)
  assert pretraining_data.shard_files(files, 4, 5) == (["e"], False)
  assert pretraining_data.shard_files(files[:2], 2, 3) == (["a", "b"], True)


def test_record_sharding_makes_the_single_process_batches(tmp_path):
  """Fewer files than ranks: rank r keeps records p % size == r, so batch k of the
  2 ranks together holds the records of batch k of one process with batch 2b."""
  paths, _ = write_shards(str(tmp_path), 1, 23)
  def batches(rank, size, batch_size):
    return take(pretraining_data.input_fn_builder(
        paths, SEQ, PRED, batch_size, is_training=True, rank=rank, size=size), 6)
  one = batches(0, 1, 6)
  two = [batches(r, 2, 3) for r in range(2)]
  for k in range(6):  # Also past the end of the file (it repeats).
    merged = sorted(map(tuple, np.concatenate([two[0][k]["input_ids"],
                                               two[1][k]["input_ids"]])))
    assert merged == sorted(map(tuple, one[k]["input_ids"])), k
    assert not set(map(tuple, two[0][k]["input_ids"])) & set(
        map(tuple, two[1][k]["input_ids"]))


def test_file_sharding_reads_disjoint_files(tmp_path):
  paths, instances = write_shards(str(tmp_path), 3, 4)
  seen = []
  for rank in range(2):
    rows = take(pretraining_data.input_fn_builder(
        paths, SEQ, PRED, 2, is_training=True, rank=rank, size=2, shuffle_buffer=5,
        seed=rank), 8)
    seen.append({tuple(x) for r in rows for x in r["input_ids"]})
  by_file = [{tuple(inst["input_ids"]) for inst in instances[4 * i:4 * i + 4]}
             for i in range(3)]
  assert seen[0] == by_file[0] | by_file[2]
  assert seen[1] == by_file[1]


@pytest.mark.parametrize("num_files", [1, 3])
def test_start_step_continues_the_stream(tmp_path, num_files):
  """A run resumed at step s reads what the uninterrupted run read from step s on."""
  paths, _ = write_shards(str(tmp_path), num_files, 7)
  def batches(start_step, n):
    return take(pretraining_data.input_fn_builder(
        paths, SEQ, PRED, 2, is_training=True, rank=1, size=2, shuffle_buffer=4,
        seed=5, start_step=start_step), n)
  full = batches(0, 9)
  resumed = batches(4, 5)
  for k in range(5):
    np.testing.assert_array_equal(resumed[k]["input_ids"], full[4 + k]["input_ids"])


def test_expand_input_files(tmp_path):
  paths, _ = write_shards(str(tmp_path / "d"), 3, 1)
  pattern = str(tmp_path / "d" / "part-*")
  assert pretraining_data.expand_input_files(pattern) == paths
  assert pretraining_data.expand_input_files(
      "%s,%s" % (paths[2], pattern)) == paths
  with pytest.raises(pretraining_data.InputFileError, match="no file matches"):
    pretraining_data.expand_input_files(pattern + "," + str(tmp_path / "nope*"))
  # A hidden file (create_pretraining_data.py's shard being written) only by name.
  hidden = str(tmp_path / "d" / ".part-9.tmp-123")
  with open(hidden, "w") as f:
    f.write("truncated")
  assert pretraining_data.expand_input_files(str(tmp_path / "d" / "*")) == paths
  assert pretraining_data.expand_input_files(hidden) == [hidden]


def write_example(path, features):
  with tf.io.TFRecordWriter(path) as writer:
    writer.write(to_example(features).SerializeToString())


@pytest.mark.parametrize("breakage,message", [
    ("short_ids", "feature 'input_ids' has 10 values, expected 16 (--max_seq_length"),
    ("missing", "record 0 has no feature 'masked_lm_weights'"),
    ("preds", "feature 'masked_lm_ids' has 3 values, expected 5 "
              "(--max_predictions_per_seq"),
    ("empty", "no records"),
    ("text", "not a readable TFRecord file"),
])
def test_check_input_file_names_the_problem(tmp_path, breakage, message):
  path = str(tmp_path / "bad.tfrecord")
  instance = write_records_in_memory(1)[0]
  pred = PRED
  if breakage == "short_ids":
    instance["input_ids"] = instance["input_ids"][:10]
  elif breakage == "missing":
    del instance["masked_lm_weights"]
  elif breakage == "preds":
    pred = 5
  write_example(path, instance)
  if breakage == "empty":
    open(path, "w").close()
  elif breakage == "text":
    with open(path, "w") as f:
      f.write("this is a text file, not records\n" * 10)
  with pytest.raises(pretraining_data.InputFileError) as e:
    pretraining_data.check_input_file(path, SEQ, pred)
  assert message in str(e.value) and path in str(e.value)


def test_check_input_file_accepts_good_records(tmp_path):
  path = str(tmp_path / "good.tfrecord")
  write_records(path, 2, seed=1)
  pretraining_data.check_input_file(path, SEQ, PRED)
