"""Unit tests of run_classifier.py: processors, sharding, step counts, features."""

import os
import types

import numpy as np
import pytest
import tensorflow as tf

import classifier_data
import distributed
import run_classifier as rc
import runner_common
import tokenization
from conftest import VOCAB


def write(path, text):
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return str(path)


def test_tsv_processor_reads_labels_and_texts(tmp_path):
  write(tmp_path / "train.tsv", "1\tgood movie\n0\tbad food\n\n1\tnice\n")
  proc = classifier_data.TsvProcessor()
  examples = proc.get_train_examples(str(tmp_path))
  assert [(e.label, e.text_a) for e in examples] == [
      ("1", "good movie"), ("0", "bad food"), ("1", "nice")]
  assert proc.get_labels(str(tmp_path)) == ["0", "1"]
  assert examples[2].guid == "train-4"  # guid carries the file's line number


def test_files_saved_with_a_byte_order_mark_read_as_without(tmp_path):
  # Excel's "CSV UTF-8" and Notepad write a BOM first: it stuck to the first label
  # (a third class "\ufeff1" of one example), to the first token of vocab.txt, and
  # made bert_config.json "not valid JSON".
  import modeling  # pylint: disable=import-outside-toplevel
  bom = "\ufeff"
  write(tmp_path / "train.tsv", bom + "1\tgood movie\n0\tbad food\n")
  proc = classifier_data.TsvProcessor()
  assert proc.get_labels(str(tmp_path)) == ["0", "1"]
  write(tmp_path / "vocab.txt", bom + "\n".join(VOCAB) + "\n")
  vocab = tokenization.load_vocab(str(tmp_path / "vocab.txt"))
  assert list(vocab)[:2] == VOCAB[:2] and vocab[VOCAB[0]] == 0
  write(tmp_path / "bert_config.json", bom + '{"vocab_size": 20, "hidden_size": 8, '
        '"num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16}')
  assert modeling.BertConfig.from_json_file(str(tmp_path / "bert_config.json")).hidden_size == 8


@pytest.mark.parametrize("content, message", [
    ("1\tgood\nbad line without tab\n", "train.tsv:2: expected 'label<TAB>text'"),
    ("1\tgood\n0\t   \n", "train.tsv:2: empty text"),
    ("1\tgood\n\tbad\n", "train.tsv:2: empty label"),
    ("1\tgood\textra\n", "train.tsv:1: expected 'label<TAB>text', got 3"),
])
def test_tsv_processor_names_file_and_line(tmp_path, content, message):
  write(tmp_path / "train.tsv", content)
  with pytest.raises(rc.InputError, match=message):
    classifier_data.TsvProcessor().get_train_examples(str(tmp_path))


def test_missing_and_non_utf8_files(tmp_path):
  with pytest.raises(rc.InputError, match="train.tsv: no such file"):
    classifier_data.TsvProcessor().get_train_examples(str(tmp_path))
  (tmp_path / "train.tsv").write_bytes(b"1\t\xff\xfe bad\n")
  with pytest.raises(rc.InputError, match="not valid UTF-8"):
    classifier_data.TsvProcessor().get_train_examples(str(tmp_path))


def test_shards_are_a_partition_of_one_seeded_order():
  examples = list(range(11))
  shards = [distributed.shard_examples(examples, seed=5, rank=r, size=3) for r in range(3)]
  assert sorted(sum(shards, [])) == examples
  assert [len(s) for s in shards] == [4, 4, 3]
  single = distributed.shard_examples(examples, seed=5, rank=0, size=1)
  # Position p of the global order goes to rank p % size.
  assert [single[p] for p in range(0, 11, 3)] == shards[0]
  assert [single[p] for p in range(1, 11, 3)] == shards[1]
  assert distributed.shard_examples(examples, seed=6, rank=0, size=1) != single


def test_train_steps_come_from_the_global_count():
  assert distributed.compute_train_steps(101, 4, 2, 3.0, 0.1) == (37, 3)
  assert distributed.compute_train_steps(101, 8, 1, 3.0, 0.1) == (37, 3)
  assert distributed.compute_train_steps(1000, 10, 2, 1.0, 0.0, max_train_steps=7) == (7, 0)


def test_convert_single_example(tmp_path):
  tok = tokenization.FullTokenizer(write(tmp_path / "vocab.txt", "\n".join(VOCAB) + "\n"))
  ex = classifier_data.InputExample("dev-1", "Good movie", "the food", label="1")
  f = classifier_data.convert_single_example(0, ex, {"0": 0, "1": 1}, 8, tok)
  ids = [VOCAB.index(t) for t in ["[CLS]", "good", "movie", "[SEP]", "the", "food",
                                  "[SEP]"]]
  assert f.input_ids == ids + [0]
  assert f.input_mask == [1] * 7 + [0]
  assert f.segment_ids == [0, 0, 0, 0, 1, 1, 1, 0]
  assert f.label_id == 1
  with pytest.raises(rc.InputError, match="dev-1: label 'x' is not among"):
    classifier_data.convert_single_example(
        0, classifier_data.InputExample("dev-1", "good", label="x"), {"0": 0, "1": 1}, 8, tok)


def test_input_fn_batches_and_does_not_autotune(tmp_path):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  tok = tokenization.FullTokenizer(write(tmp_path / "vocab.txt", "\n".join(VOCAB) + "\n"))
  examples = [classifier_data.InputExample("t-%d" % i, "good movie", label=str(i % 2))
              for i in range(5)]
  path = str(tmp_path / "train.tf_record")
  classifier_data.file_based_convert_examples_to_features(examples, ["0", "1"], 8, tok, path)
  train = classifier_data.file_based_input_fn_builder(path, 8, 2, is_training=True, seed=1)()
  batches = list(train.take(4).as_numpy_iterator())  # repeats; full batches only
  assert [b["input_ids"].shape for b in batches] == [(2, 8)] * 4
  assert sorted(b["label_ids"].tolist() for b in batches[:2]) == [[0, 1], [0, 1]]
  evaluation = classifier_data.file_based_input_fn_builder(path, 8, 2, is_training=False)()
  assert [len(b["label_ids"]) for b in evaluation.as_numpy_iterator()] == [2, 2, 1]
  # tf.data's autotuning thread made closing a session wait up to its
  # optimization period (observed 17-40 s at the end of training).
  for dataset in (train, evaluation):
    assert dataset.options().autotune.enabled is False
    assert dataset.element_spec["input_ids"].dtype == tf.int32


def test_truncation_keeps_cls_and_sep(tmp_path):
  tok = tokenization.FullTokenizer(write(tmp_path / "vocab.txt", "\n".join(VOCAB) + "\n"))
  ex = classifier_data.InputExample("t", "good " * 20, label="0")
  f = classifier_data.convert_single_example(0, ex, {"0": 0}, 6, tok)
  assert f.input_ids == [VOCAB.index(t) for t in ["[CLS]"] + ["good"] * 4 + ["[SEP]"]]


def test_cpu_threads_divide_cores_among_local_processes():
  cores = len(os.sched_getaffinity(0))
  assert distributed.cpu_threads_per_process(1) == cores
  assert distributed.cpu_threads_per_process(cores) == 1
  assert distributed.cpu_threads_per_process(4 * cores) == 1
  assert distributed.cpu_threads_per_process(2, requested=3) == 3
  config = distributed.make_session_config(False, 1, 2)
  assert config.intra_op_parallelism_threads == 1
  # The GPU is pinned by pin_gpu, before any op; the session must not move it.
  gpu = distributed.make_session_config(True, 1, 2)
  assert gpu.gpu_options.visible_device_list == "" and gpu.gpu_options.allow_growth


def test_horovod_cycle_time_defaults_to_10ms_on_cpu_hosts_only():
  assert distributed.horovod_cycle_time_ms(0, {}, gpu_available=False) == 10.0
  assert distributed.horovod_cycle_time_ms(0, {}, gpu_available=True) is None  # Horovod's own
  # horovodrun --cycle-time-ms (or the user) set the variable: left alone.
  assert distributed.horovod_cycle_time_ms(0, {"HOROVOD_CYCLE_TIME": "3"}, False) is None
  assert distributed.horovod_cycle_time_ms(2.5, {"HOROVOD_CYCLE_TIME": "3"}, True) == 2.5


def test_mpi_ranks_yield_when_idle_on_cpu_hosts_only():
  assert distributed.mpi_cpu_host_env({}, gpu_available=False) == {
      "OMPI_MCA_mpi_yield_when_idle": "1"}
  assert distributed.mpi_cpu_host_env({}, gpu_available=True) == {}
  # Set by the user or by `mpirun --mca mpi_yield_when_idle 0`: left alone.
  assert distributed.mpi_cpu_host_env({"OMPI_MCA_mpi_yield_when_idle": "0"}, False) == {}


def test_launched_process_count_reads_the_launchers_variables():
  assert distributed.launched_process_count({}) == 1
  assert distributed.launched_process_count({"HOROVOD_SIZE": "4"}) == 4  # horovodrun
  assert distributed.launched_process_count({"OMPI_COMM_WORLD_SIZE": "8"}) == 8  # mpirun
  assert distributed.launched_process_count({"PMI_SIZE": "2"}) == 2  # srun
  assert distributed.launched_process_count({"HOROVOD_SIZE": ""}) == 1


def test_embedding_allreduce_auto_compares_gathered_rows_with_vocab():
  # 2 x 16 x 128 = 4096 gathered rows < 30522: allgather; 8 x 32 x 128 > 30522: dense.
  assert distributed.use_sparse_embedding_allreduce("auto", 2, 16, 128, 30522, 1)
  assert not distributed.use_sparse_embedding_allreduce("auto", 8, 32, 128, 30522, 1)
  assert not distributed.use_sparse_embedding_allreduce("auto", 2, 16, 128, 30522, 2)
  assert distributed.use_sparse_embedding_allreduce("sparse", 8, 32, 128, 30522, 1)
  assert not distributed.use_sparse_embedding_allreduce("dense", 2, 16, 128, 30522, 1)


def test_glue_processors(tmp_path):
  write(tmp_path / "train.tsv",
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tHe said.\tShe said.\n")
  ex = classifier_data.MrpcProcessor().get_train_examples(str(tmp_path))
  assert [(e.label, e.text_a, e.text_b) for e in ex] == [("1", "He said.", "She said.")]
  write(tmp_path / "train.tsv", "gj04\t1\t\tOur friends won't buy this.\n")
  ex = classifier_data.ColaProcessor().get_train_examples(str(tmp_path))
  assert [(e.label, e.text_a) for e in ex] == [("1", "Our friends won't buy this.")]
  write(tmp_path / "train.tsv", "gj04\t1\n")
  with pytest.raises(rc.InputError, match="train.tsv:1: expected at least 4"):
    classifier_data.ColaProcessor().get_train_examples(str(tmp_path))


GLUE_FIXTURES = {
    # task: (train.tsv, test.tsv, expected train (label, a, b), expected test (a, b))
    "sst2": ("sentence\tlabel\nit is good\t1\n", "index\tsentence\n0\tso bad\n",
             ("1", "it is good", None), ("so bad", None)),
    "qnli": ("index\tquestion\tsentence\tlabel\n0\tWho?\tHe did.\tentailment\n",
             "index\tquestion\tsentence\n0\tWhy?\tBecause.\n",
             ("entailment", "Who?", "He did."), ("Why?", "Because.")),
    "rte": ("index\tsentence1\tsentence2\tlabel\n0\tA cat.\tAn animal.\tentailment\n",
            "index\tsentence1\tsentence2\n0\tA dog.\tA cat.\n",
            ("entailment", "A cat.", "An animal."), ("A dog.", "A cat.")),
    "qqp": ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n5\t1\t2\tHow?\tWhy?\t0\n",
            "id\tquestion1\tquestion2\n0\tWhen?\tWhere?\n",
            ("0", "How?", "Why?"), ("When?", "Where?")),
    "mnli": ("index\tp\tg\ts1b\ts2b\ts1p\ts2p\tgenre\tA man.\tA person.\tentailment\n"
             "0\t\t\t\t\t\t\tfiction\tA man.\tA person.\tentailment\n",
             "index\tp\tg\ts1b\ts2b\ts1p\ts2p\tgenre\ts1\ts2\n"
             "0\t\t\t\t\t\t\tfiction\tIt rains.\tIt is wet.\n",
             ("entailment", "A man.", "A person."), ("It rains.", "It is wet.")),
}


@pytest.mark.parametrize("task", sorted(GLUE_FIXTURES))
def test_glue_pair_and_single_sentence_tasks(tmp_path, task):
  train, test, want_train, want_test = GLUE_FIXTURES[task]
  proc = classifier_data.PROCESSORS[task]()
  write(tmp_path / "train.tsv", train)
  write(tmp_path / proc.test_file, test)
  ex = proc.get_train_examples(str(tmp_path))
  assert [(e.label, e.text_a, e.text_b) for e in ex] == [want_train]
  assert want_train[0] in proc.get_labels()
  ex = proc.get_test_examples(str(tmp_path))
  assert [(e.text_a, e.text_b) for e in ex] == [want_test]
  assert ex[0].label == proc.get_labels()[0]
  # A short line is an error naming the file and line.
  write(tmp_path / "train.tsv", train.splitlines()[0] + "\nonly-one-field\n")
  with pytest.raises(rc.InputError, match="train.tsv:2: expected at least"):
    proc.get_train_examples(str(tmp_path))


def flag_values(**overrides):
  """The flags' defaults plus `overrides`, as validate_flags reads them."""
  values = {name: rc.FLAGS[name].default for name in rc.FLAGS}
  values.update(data_dir="d", bert_config_file="c", task_name="tsv", vocab_file="v",
                output_dir="o", do_train=True)
  values.update(overrides)
  return types.SimpleNamespace(**values)


@pytest.mark.parametrize("overrides,message", [
    ({"horovod_cycle_time_ms": -1.0}, "--horovod_cycle_time_ms must be >= 0"),
    ({"embedding_allreduce": "sparse", "gradient_accumulation_steps": 2},
     "--embedding_allreduce=sparse does not work with --gradient_accumulation_steps"),
])
def test_speed_flag_conflicts_are_input_errors(overrides, message):
  rc.validate_flags(flag_values())  # the defaults are valid
  with pytest.raises(rc.InputError, match=message):
    rc.validate_flags(flag_values(**overrides))


@pytest.mark.parametrize("overrides,message", [
    ({"save_checkpoints_steps": 0}, "--save_checkpoints_steps must be positive, got 0"),
    ({"max_train_steps": -5}, "--max_train_steps must be >= 0, got -5"),
    ({"train_shuffle_buffer": -1}, "--train_shuffle_buffer must be >= 0, got -1"),
])
def test_step_and_buffer_counts_out_of_range_are_input_errors(overrides, message):
  rc.validate_flags(flag_values())
  with pytest.raises(rc.InputError, match=message):
    rc.validate_flags(flag_values(**overrides))


@pytest.mark.parametrize("value", [0.0, -0.5, 1.5])
def test_layer_lr_decay_outside_zero_one_is_an_input_error(value):
  with pytest.raises(rc.InputError, match=r"--layer_lr_decay must be in \(0, 1\], got %g" % value):
    rc.validate_flags(flag_values(layer_lr_decay=value))


def _train_examples(tmp_path, n=3):
  task = tmp_path / "task"
  task.mkdir()
  write(task / "train.tsv", "".join("%d\tgood movie %d\n" % (i % 2, i) for i in range(n)))
  return classifier_data.TsvProcessor().get_train_examples(str(task))


def test_teacher_file_rows_follow_the_header_labels(tmp_path):
  examples = _train_examples(tmp_path)
  path = write(tmp_path / "teacher.tsv", "guid\t1\t0\ntrain-1\t0.25\t0.75\n"
               "train-3\t1.0\t0.0\n\ntrain-2\t0.5\t0.5\ntrain-9\t0.5\t0.5\n")
  classifier_data.attach_teacher_probs(path, examples, ["0", "1"])
  assert [ex.teacher_probs for ex in examples] == [[0.75, 0.25], [0.5, 0.5], [0.0, 1.0]]


@pytest.mark.parametrize("content, message", [
    ("train-1\t0.5\t0.5\n", "teacher.tsv:1: expected the header"),
    ("guid\t0\t2\ntrain-1\t0.5\t0.5\n", "teacher.tsv:1: expected the header"),
    ("guid\t0\t1\ntrain-1\t0.5\n", "teacher.tsv:2: 2 fields, expected 3"),
    ("guid\t0\t1\ntrain-1\t0.5\tx\n", "teacher.tsv:2: could not convert"),
    ("guid\t0\t1\ntrain-1\t0.5\t0.5\ntrain-2\t0.9\t0.9\n", "teacher.tsv:3: probabilit"),
    ("guid\t0\t1\ntrain-1\tnan\t0.5\n", "teacher.tsv:2: probabilit"),
    ("guid\t0\t1\ntrain-1\t0.5\t0.5\ntrain-3\t0.5\t0.5\n",
     "teacher.tsv: no row for training example train-2"),
])
def test_bad_teacher_files_name_the_file_and_line(tmp_path, content, message):
  examples = _train_examples(tmp_path)
  path = write(tmp_path / "teacher.tsv", content)
  with pytest.raises(classifier_data.InputError, match=message):
    classifier_data.attach_teacher_probs(path, examples, ["0", "1"])


def test_teacher_probabilities_reach_the_input_fn(tmp_path):
  examples = _train_examples(tmp_path, n=4)
  for i, ex in enumerate(examples):
    ex.teacher_probs = [0.1 * i, 1.0 - 0.1 * i]
  vocab = write(tmp_path / "vocab.txt", "\n".join(VOCAB) + "\n")
  tokenizer = tokenization.FullTokenizer(vocab, True)
  record = str(tmp_path / "train.tf_record")
  assert classifier_data.convert_examples_cached(examples, ["0", "1"], 8, tokenizer, record)
  batch = next(iter(classifier_data.file_based_input_fn_builder(
      record, 8, 4, is_training=False, num_teacher_labels=2)()))
  assert batch["teacher_probs"].dtype.name == "float32"
  np.testing.assert_allclose(batch["teacher_probs"].numpy(),
                             [[0.0, 1.0], [0.1, 0.9], [0.2, 0.8], [0.3, 0.7]], rtol=1e-6)
  assert batch["label_ids"].numpy().tolist() == [0, 1, 0, 1]
  # Other teacher probabilities are another cache key: the file is rewritten.
  examples[0].teacher_probs = [0.5, 0.5]
  assert classifier_data.convert_examples_cached(examples, ["0", "1"], 8, tokenizer, record)
  assert not classifier_data.convert_examples_cached(examples, ["0", "1"], 8, tokenizer,
                                                     record)


def test_no_step_message_names_the_flag_that_leaves_no_update():
  def flags(**kw):
    values = dict(train_batch_size=8, num_train_epochs=1.0, max_train_steps=0,
                  gradient_accumulation_steps=1)
    values.update(kw)
    return types.SimpleNamespace(**values)
  assert rc.no_step_message(10, flags(), 2) == (
      "10 training examples make no step of 8 x 2 processes; lower "
      "--train_batch_size or raise --num_train_epochs")
  # 40 examples make 2 steps of 8 x 2 processes: not one update of 4 steps.
  assert rc.no_step_message(40, flags(gradient_accumulation_steps=4), 2) == (
      "40 training examples x 1 epochs make 2 steps of 8 x 2 processes: fewer than "
      "one update of --gradient_accumulation_steps=4 steps; lower "
      "--gradient_accumulation_steps or raise --num_train_epochs")
  assert rc.no_step_message(
      400, flags(gradient_accumulation_steps=4, max_train_steps=3), 2).startswith(
          "--max_train_steps=3: fewer than one update of "
          "--gradient_accumulation_steps=4 steps; lower --gradient_accumulation_steps "
          "or raise --max_train_steps")


def test_eval_or_predict_without_a_trained_model_is_an_input_error(tmp_path):
  empty = str(tmp_path / "empty")
  os.makedirs(empty)
  with pytest.raises(rc.InputError, match=(
      "--do_eval/--do_predict without --do_train: --output_dir=%s holds no checkpoint "
      "and no --init_checkpoint is given" % empty)):
    runner_common.check_trained_model(empty, None, False, ["do_eval", "do_predict"])
  # Training first, an initial checkpoint, or nothing to evaluate: nothing to refuse.
  runner_common.check_trained_model(empty, None, True, ["do_eval"])
  runner_common.check_trained_model(empty, "/some/model.ckpt", False, ["do_eval"])
  runner_common.check_trained_model(empty, None, False, [])
  # A trained run's output_dir.
  trained = str(tmp_path / "trained")
  with tf.Graph().as_default():
    tf.compat.v1.train.create_global_step()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      tf.compat.v1.train.Saver().save(sess, os.path.join(trained, "model.ckpt"),
                                      global_step=3)
  runner_common.check_trained_model(trained, None, False, ["do_eval", "do_predict"])


def save_variables(folder, shapes, step=3):
  """Writes model.ckpt-`step` in `folder` holding zero variables of `shapes`."""
  with tf.Graph().as_default():
    for name, shape in shapes.items():
      tf.compat.v1.get_variable(name, shape, initializer=tf.compat.v1.zeros_initializer())
    tf.compat.v1.train.create_global_step()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      tf.compat.v1.train.Saver().save(sess, os.path.join(folder, "model.ckpt"),
                                      global_step=step)


def test_output_dir_checkpoint_of_another_model_is_an_input_error(tmp_path):
  import contrastive_model  # pylint: disable=import-outside-toplevel
  import modeling  # pylint: disable=import-outside-toplevel
  import pretraining_model  # pylint: disable=import-outside-toplevel
  config = modeling.BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=16)
  two_labels = modeling.expected_checkpoint_shapes(config, 2)
  out = str(tmp_path / "out")
  runner_common.check_output_dir_checkpoint(out, two_labels)  # no checkpoint yet
  save_variables(out, two_labels)
  runner_common.check_output_dir_checkpoint(out, two_labels)  # the same model
  # Other labels: the classifier head's shape.
  with pytest.raises(rc.InputError, match=(
      r"--output_dir=%s: its checkpoint model.ckpt-3 holds output_weights with shape "
      r"\[2, 8\] where this model has \[3, 8\]: it was saved by another model" % out)):
    runner_common.check_output_dir_checkpoint(
        out, modeling.expected_checkpoint_shapes(config, 3))
  # One more layer in bert_config.json.
  deeper = modeling.BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=16)
  with pytest.raises(rc.InputError,
                     match="has no variable bert/encoder/layer_1/attention/self/query/kernel"):
    runner_common.check_output_dir_checkpoint(
        out, modeling.expected_checkpoint_shapes(deeper, 2))
  # A contrastive run's encoder, resumed as masked LM: no cls/ heads; the reverse loads.
  encoder = str(tmp_path / "encoder")
  save_variables(encoder, contrastive_model.expected_checkpoint_shapes(config))
  with pytest.raises(rc.InputError,
                     match="has no variable cls/predictions/transform/dense/kernel"):
    runner_common.check_output_dir_checkpoint(
        encoder, pretraining_model.expected_checkpoint_shapes(config))
  masked_lm = str(tmp_path / "masked_lm")
  save_variables(masked_lm, pretraining_model.expected_checkpoint_shapes(config))
  runner_common.check_output_dir_checkpoint(
      masked_lm, contrastive_model.expected_checkpoint_shapes(config))
