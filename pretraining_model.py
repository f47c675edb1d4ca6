"""The BERT pretraining model: masked-LM and next-sentence heads, losses, model_fn.

Variables are named as in Google's pretrained checkpoints, so one of theirs
continues pretraining here and every `bert/` variable of ours initializes
run_classifier.py:

    bert/...                                   the encoder (modeling.BertModel)
    cls/predictions/transform/dense/{kernel,bias}
    cls/predictions/transform/LayerNorm/{gamma,beta}
    cls/predictions/output_bias                [vocab_size]; the output weights
                                               are the word embeddings (tied)
    cls/seq_relationship/output_weights        [2, hidden_size]
    cls/seq_relationship/output_bias           [2]
"""

import collections

import tensorflow as tf
import tensorflow_estimator as tf_estimator

import modeling
import optimization

tf1 = tf.compat.v1

# Legend for shapes: B = batch size, S = sequence length, H = hidden size,
# P = max_predictions_per_seq, V = vocab size.


def gather_indexes(sequence_tensor, positions):
  """Gathers the vectors at `positions` of every sequence in the batch.

  Args:
    sequence_tensor: float Tensor of shape [B, S, H].
    positions: int32 Tensor of shape [B, P], indices into the sequence axis.

  Returns:
    float Tensor of shape [B * P, H]: row b * P + p is
    sequence_tensor[b, positions[b, p]].
  """
  shape = modeling.get_shape_list(sequence_tensor, expected_rank=3)
  batch_size, seq_length, width = shape
  flat_offsets = tf.reshape(tf.range(0, batch_size, dtype=tf.int32) * seq_length, [-1, 1])
  flat_positions = tf.reshape(positions + flat_offsets, [-1])
  flat_sequence = tf.reshape(sequence_tensor, [batch_size * seq_length, width])
  return tf.gather(flat_sequence, flat_positions)


def get_masked_lm_output(bert_config, input_tensor, output_weights, positions, label_ids,
                         label_weights, compute_type=tf.float32,
                         mean_over_processes=None):
  """The masked-LM head and loss at the masked positions only.

  Args:
    bert_config: `BertConfig` (hidden_act, initializer_range, vocab_size).
    input_tensor: float32 Tensor of shape [B, S, H], the encoder's last layer.
    output_weights: float32 Tensor of shape [V, H], the word embedding table (tied).
    positions: int32 Tensor of shape [B, P], the masked positions (padding: 0).
    label_ids: int32 Tensor of shape [B, P], the original token ids there.
    label_weights: float32 Tensor of shape [B, P], 1.0 for real predictions, 0.0 for
      padding.
    compute_type: mixed precision of the head, as modeling.BertModel's: tf.float16
      runs the transform and the [B * P, H] x [H, V] product in float16,
      tf.bfloat16 (CPU) only their matmuls; the softmax and the loss are float32.
    mean_over_processes: optional function, float32 scalar -> its mean over all
      processes. When given, the loss divides by the mean count of real
      predictions per process instead of this process's count: the average of the
      processes' gradients is then that of the loss over all their predictions
      together, as in one process with their batches joined (each process's
      count alone would weigh a prediction more on a process that has fewer).

  Returns:
    (loss, per_example_loss, log_probs): a float32 scalar, the weighted mean over
    real predictions; float32 Tensors of shape [B * P] and [B * P, V].
  """
  input_tensor = gather_indexes(input_tensor, positions)  # [B * P, H]
  with tf1.variable_scope("cls/predictions"):
    # A non-linear transform before the output layer, used only in pretraining.
    activation_type = tf.float32 if compute_type == tf.bfloat16 else compute_type
    with tf1.variable_scope("transform"):
      input_tensor = modeling.dense(
          tf.cast(input_tensor, activation_type), bert_config.hidden_size, "dense",
          bert_config.initializer_range,
          activation=modeling.get_activation(bert_config.hidden_act),
          matmul_type=compute_type)
      input_tensor = modeling.layer_norm(input_tensor)
    # The output weights are the input embeddings; only a bias per token is new.
    output_bias = tf1.get_variable("output_bias", shape=[bert_config.vocab_size],
                                   initializer=tf1.zeros_initializer())
    logits = modeling.matmul(input_tensor, output_weights, compute_type,
                             transpose_b=True)  # [B * P, V]
    logits = tf.nn.bias_add(tf.cast(logits, tf.float32), output_bias)
    log_probs = tf.nn.log_softmax(logits, axis=-1)

    label_ids = tf.reshape(label_ids, [-1])
    label_weights = tf.reshape(tf.cast(label_weights, tf.float32), [-1])
    # -log p(label): a gather of one log-probability per row, not a [B * P, V] one-hot.
    per_example_loss = -tf.gather(log_probs, label_ids, batch_dims=1)  # [B * P]
    numerator = tf.reduce_sum(label_weights * per_example_loss)
    count = tf.reduce_sum(label_weights)
    if mean_over_processes is not None:
      count = mean_over_processes(tf.stop_gradient(count))
    denominator = count + 1e-5
    loss = numerator / denominator
  return (loss, per_example_loss, log_probs)


def get_next_sentence_output(bert_config, input_tensor, labels):
  """The next-sentence head: is sentence B the continuation of A (label 0) or random (1).

  Args:
    bert_config: `BertConfig` (initializer_range).
    input_tensor: float32 Tensor of shape [B, H], the pooled [CLS] output.
    labels: int32 Tensor of shape [B] (or [B, 1]).

  Returns:
    (loss, per_example_loss, log_probs): a float32 scalar (mean), float32 Tensors of
    shape [B] and [B, 2].
  """
  hidden_size = input_tensor.shape[-1]
  with tf1.variable_scope("cls/seq_relationship"):
    output_weights = tf1.get_variable(
        "output_weights", shape=[2, hidden_size],
        initializer=modeling.create_initializer(bert_config.initializer_range))
    output_bias = tf1.get_variable("output_bias", shape=[2],
                                   initializer=tf1.zeros_initializer())
    logits = tf.nn.bias_add(tf.matmul(input_tensor, output_weights, transpose_b=True),
                            output_bias)  # [B, 2]
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    labels = tf.reshape(labels, [-1])
    per_example_loss = -tf.gather(log_probs, labels, batch_dims=1)  # [B]
    loss = tf.reduce_mean(per_example_loss)
  return (loss, per_example_loss, log_probs)


def create_model(bert_config, is_training, features, compute_type=tf.float32,
                 mean_over_processes=None):
  """BERT with both pretraining heads; the total loss is their sum.

  Args:
    bert_config: `BertConfig`.
    is_training: bool (dropout on).
    features: dict of int32 Tensors: input_ids, input_mask, segment_ids [B, S];
      masked_lm_positions, masked_lm_ids [B, P]; masked_lm_weights float32 [B, P];
      next_sentence_labels [B] or [B, 1].
    compute_type: dtype of the encoder and the masked-LM transform (mixed precision).
    mean_over_processes: optional function for the masked-LM loss's denominator
      (see `get_masked_lm_output`).

  Returns:
    (total_loss, outputs): a float32 scalar and a dict of the heads' outputs:
    masked_lm_loss, masked_lm_example_loss [B * P], masked_lm_log_probs [B * P, V],
    next_sentence_loss, next_sentence_example_loss [B], next_sentence_log_probs [B, 2].
  """
  model = modeling.BertModel(
      config=bert_config, is_training=is_training, input_ids=features["input_ids"],
      input_mask=features["input_mask"], token_type_ids=features["segment_ids"],
      compute_type=compute_type)
  (mlm_loss, mlm_example_loss, mlm_log_probs) = get_masked_lm_output(
      bert_config, model.get_sequence_output(), model.get_embedding_table(),
      features["masked_lm_positions"], features["masked_lm_ids"],
      features["masked_lm_weights"], compute_type=compute_type,
      mean_over_processes=mean_over_processes)
  (nsp_loss, nsp_example_loss, nsp_log_probs) = get_next_sentence_output(
      bert_config, model.get_pooled_output(), features["next_sentence_labels"])
  outputs = {
      "masked_lm_loss": mlm_loss,
      "masked_lm_example_loss": mlm_example_loss,
      "masked_lm_log_probs": mlm_log_probs,
      "next_sentence_loss": nsp_loss,
      "next_sentence_example_loss": nsp_example_loss,
      "next_sentence_log_probs": nsp_log_probs,
  }
  return (mlm_loss + nsp_loss, outputs)


def metric_fn(outputs, features):
  """Eval metrics of Google's run_pretraining.py (the names of eval_results.txt).

  Args:
    outputs: the dict of `create_model`.
    features: the input dict of `create_model`.

  Returns:
    dict of name -> (value_op, update_op): masked_lm_accuracy and masked_lm_loss
    (weighted by masked_lm_weights), next_sentence_accuracy, next_sentence_loss.
  """
  mlm_predictions = tf.argmax(outputs["masked_lm_log_probs"], axis=-1,
                              output_type=tf.int32)  # [B * P]
  mlm_ids = tf.reshape(features["masked_lm_ids"], [-1])
  mlm_weights = tf.reshape(tf.cast(features["masked_lm_weights"], tf.float32), [-1])
  nsp_predictions = tf.argmax(outputs["next_sentence_log_probs"], axis=-1,
                              output_type=tf.int32)  # [B]
  nsp_labels = tf.reshape(features["next_sentence_labels"], [-1])
  return {
      "masked_lm_accuracy": tf1.metrics.accuracy(mlm_ids, mlm_predictions,
                                                 weights=mlm_weights),
      "masked_lm_loss": tf1.metrics.mean(outputs["masked_lm_example_loss"],
                                         weights=mlm_weights),
      "next_sentence_accuracy": tf1.metrics.accuracy(nsp_labels, nsp_predictions),
      "next_sentence_loss": tf1.metrics.mean(outputs["next_sentence_example_loss"]),
  }


def expected_checkpoint_shapes(config):
  """Variable name -> shape of the pretraining model (Google's checkpoint layout).

  Returns:
    OrderedDict: the encoder's variables (modeling.expected_checkpoint_shapes) and
    the `cls/` heads.
  """
  h = config.hidden_size
  shapes = collections.OrderedDict(modeling.expected_checkpoint_shapes(config))
  shapes["cls/predictions/transform/dense/kernel"] = (h, h)
  shapes["cls/predictions/transform/dense/bias"] = (h,)
  shapes["cls/predictions/transform/LayerNorm/gamma"] = (h,)
  shapes["cls/predictions/transform/LayerNorm/beta"] = (h,)
  shapes["cls/predictions/output_bias"] = (config.vocab_size,)
  shapes["cls/seq_relationship/output_weights"] = (2, h)
  shapes["cls/seq_relationship/output_bias"] = (2,)
  return shapes


def model_fn_builder(bert_config, init_checkpoint, optimizer_settings,
                     training_hooks_fn=None, compute_type=tf.float32,
                     mean_over_processes=None):
  """Returns the `model_fn` closure for the Estimator.

  Args:
    bert_config: `BertConfig`.
    init_checkpoint: checkpoint to initialize from (any variable of the same name
      and shape: a Google BERT checkpoint, or ours), or None. Pass it on rank 0 only:
      the broadcast hook copies rank 0's weights to the others.
    optimizer_settings: `optimization.OptimizerSettings` of the training op (peak
      rate of one process, global step counts in micro-batches, the same on every
      rank, "adamw" or "lamb", Horovod options).
    training_hooks_fn: optional (loss, learning_rate) -> list of SessionRunHooks.
    compute_type: tf.float32, or tf.bfloat16 / tf.float16 for mixed precision
      (float16 needs optimizer_settings.dynamic_loss_scale); eval runs in float32.
    mean_over_processes: optional function, scalar -> its mean over all processes
      (a collective: every process must train). Training divides the masked-LM
      loss by the processes' mean prediction count with it (see
      `get_masked_lm_output`); eval, on one process, never calls it.
  """

  def model_fn(features, labels, mode, params):
    del labels, params
    is_training = (mode == tf_estimator.estimator.ModeKeys.TRAIN)
    (total_loss, outputs) = create_model(
        bert_config, is_training, features,
        compute_type=compute_type if is_training else tf.float32,
        mean_over_processes=mean_over_processes if is_training else None)

    if init_checkpoint:
      modeling.init_from_checkpoint(init_checkpoint)

    if is_training:
      tf1.summary.scalar("masked_lm_loss", outputs["masked_lm_loss"])
      tf1.summary.scalar("next_sentence_loss", outputs["next_sentence_loss"])
      return optimization.training_spec(total_loss, training_hooks_fn,
                                        optimizer_settings)
    if mode == tf_estimator.estimator.ModeKeys.EVAL:
      return tf_estimator.estimator.EstimatorSpec(
          mode=mode, loss=total_loss, eval_metric_ops=metric_fn(outputs, features))
    raise ValueError("run_pretraining's model_fn supports TRAIN and EVAL, not %s" % mode)

  return model_fn
