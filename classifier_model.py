"""The classifier graph: BERT plus a linear layer, its metrics and its model_fn."""

import tensorflow as tf
import tensorflow_estimator as tf_estimator

import modeling
import optimization

tf1 = tf.compat.v1


POOLINGS = ("cls", "mean")


def sentence_representation(model, input_mask, pooling):
  """The vector the classifier reads for each sequence.

  Args:
    model: `modeling.BertModel`.
    input_mask: int32 Tensor of shape [batch_size, seq_length], 1 for real tokens.
    pooling: "cls", BERT's pooler (tanh dense layer over the [CLS] token), or
      "mean", the mean of the last layer's hidden states over the real tokens
      (the pooler's variables stay in the graph and checkpoints, unused).

  Returns:
    float32 Tensor of shape [batch_size, hidden_size].
  """
  if pooling == "cls":
    return model.get_pooled_output()
  if pooling != "mean":
    raise ValueError("pooling must be one of %s, got %r" % (POOLINGS, pooling))
  return modeling.mean_pooling(model.get_sequence_output(), input_mask)


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids, labels,
                 num_labels, compute_type=tf.float32, pooling="cls", teacher_probs=None,
                 teacher_weight=0.0):
  """Creates a classification model: a sentence vector, dropout, a linear layer.

  Args:
    bert_config: `BertConfig`; its hidden_dropout_prob also drives the head dropout.
    is_training: bool.
    input_ids, input_mask, segment_ids: int32 Tensors of shape [batch_size, seq_length].
    labels: int32 Tensor of shape [batch_size].
    num_labels: int.
    compute_type: dtype of the encoder's activations (mixed precision).
    pooling: "cls" or "mean", see `sentence_representation`.
    teacher_probs: optional float32 Tensor of shape [batch_size, num_labels], a
      teacher's probabilities (distillation).
    teacher_weight: float in [0, 1]; with `teacher_probs`, each example's loss is
      (1 - teacher_weight) x cross-entropy with its label + teacher_weight x
      cross-entropy with the teacher's probabilities.

  Returns:
    (loss, per_example_loss, logits, probabilities): a scalar mean loss and
    float32 Tensors of shape [batch_size], [batch_size, num_labels] x2.
  """
  model = modeling.BertModel(config=bert_config, is_training=is_training,
                             input_ids=input_ids, input_mask=input_mask,
                             token_type_ids=segment_ids, compute_type=compute_type)
  output_layer = sentence_representation(model, input_mask, pooling)
  hidden_size = output_layer.shape[-1]

  output_weights = tf1.get_variable(
      "output_weights", [num_labels, hidden_size],
      initializer=tf1.truncated_normal_initializer(stddev=0.02))
  output_bias = tf1.get_variable("output_bias", [num_labels],
                                 initializer=tf1.zeros_initializer())

  with tf1.name_scope("classifier_loss"):
    if is_training:
      output_layer = modeling.dropout(output_layer, bert_config.hidden_dropout_prob)
    logits = tf.matmul(output_layer, output_weights, transpose_b=True)
    logits = tf.nn.bias_add(logits, output_bias)
    probabilities = tf.nn.softmax(logits, axis=-1)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot_labels = tf.one_hot(labels, depth=num_labels, dtype=tf.float32)
    targets = one_hot_labels
    if teacher_probs is not None:
      targets = ((1.0 - teacher_weight) * one_hot_labels +
                 teacher_weight * tf.cast(teacher_probs, tf.float32))
    per_example_loss = -tf.reduce_sum(targets * log_probs, axis=-1)
    loss = tf.reduce_mean(per_example_loss)
    return (loss, per_example_loss, logits, probabilities)


def metric_fn(per_example_loss, label_ids, logits, is_real_example, num_labels,
              task_name):
  """Eval metrics: accuracy and loss; F1 for binary tasks; MCC for CoLA.

  Args:
    per_example_loss: float32 [batch_size]; label_ids: int32 [batch_size];
    logits: float32 [batch_size, num_labels]; is_real_example: int32 [batch_size].

  Returns:
    dict of name -> (value_op, update_op).
  """
  predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
  weights = tf.cast(is_real_example, tf.float32)
  metrics = {
      "eval_accuracy": tf1.metrics.accuracy(label_ids, predictions, weights=weights),
      "eval_loss": tf1.metrics.mean(per_example_loss, weights=weights),
  }
  if num_labels == 2:
    tp = tf1.metrics.true_positives(label_ids, predictions, weights=weights)
    fp = tf1.metrics.false_positives(label_ids, predictions, weights=weights)
    fn = tf1.metrics.false_negatives(label_ids, predictions, weights=weights)
    tn = tf1.metrics.true_negatives(label_ids, predictions, weights=weights)
    update = tf.group(tp[1], fp[1], fn[1], tn[1])
    tp_v, fp_v, fn_v, tn_v = tp[0], fp[0], fn[0], tn[0]
    f1 = tf.math.divide_no_nan(2.0 * tp_v, 2.0 * tp_v + fp_v + fn_v)
    metrics["eval_f1"] = (f1, update)
    if task_name == "cola":
      denom = tf.sqrt((tp_v + fp_v) * (tp_v + fn_v) * (tn_v + fp_v) * (tn_v + fn_v))
      metrics["eval_mcc"] = (tf.math.divide_no_nan(tp_v * tn_v - fp_v * fn_v, denom),
                             update)
  return metrics


def model_fn_builder(bert_config, num_labels, init_checkpoint, optimizer_settings,
                     task_name="tsv", training_hooks_fn=None, compute_type=tf.float32,
                     pooling="cls", teacher_weight=0.0):
  """Returns the `model_fn` closure for the Estimator.

  Args:
    bert_config: `BertConfig`.
    num_labels: int.
    init_checkpoint: checkpoint path to initialize from, or None. Pass it on rank 0
      only: the broadcast hook copies rank 0's weights to the others.
    optimizer_settings: `optimization.OptimizerSettings` of the training op (peak
      rate of one process, step counts identical on every rank, Horovod options).
    task_name: string, selects extra eval metrics.
    training_hooks_fn: optional (loss, learning_rate) -> list of SessionRunHooks.
    compute_type: tf.float32, or tf.bfloat16 / tf.float16 for mixed precision
      (float16 needs optimizer_settings.dynamic_loss_scale).
    pooling: "cls" or "mean", see `sentence_representation`.
    teacher_weight: float, the weight of the teacher's probabilities in the
      training loss when the features carry "teacher_probs" (see `create_model`).
  """

  def model_fn(features, labels, mode, params):
    del labels, params
    input_ids = features["input_ids"]
    input_mask = features["input_mask"]
    segment_ids = features["segment_ids"]
    label_ids = features["label_ids"]
    is_real_example = features["is_real_example"]

    is_training = (mode == tf_estimator.estimator.ModeKeys.TRAIN)
    (total_loss, per_example_loss, logits, probabilities) = create_model(
        bert_config, is_training, input_ids, input_mask, segment_ids, label_ids,
        num_labels, compute_type=compute_type if is_training else tf.float32,
        pooling=pooling,
        teacher_probs=features.get("teacher_probs") if is_training else None,
        teacher_weight=teacher_weight)

    if init_checkpoint:
      modeling.init_from_checkpoint(init_checkpoint)

    if mode == tf_estimator.estimator.ModeKeys.TRAIN:
      return optimization.training_spec(total_loss, training_hooks_fn,
                                        optimizer_settings)
    if mode == tf_estimator.estimator.ModeKeys.EVAL:
      return tf_estimator.estimator.EstimatorSpec(
          mode=mode, loss=total_loss,
          eval_metric_ops=metric_fn(per_example_loss, label_ids, logits,
                                    is_real_example, num_labels, task_name))
    return tf_estimator.estimator.EstimatorSpec(
        mode=mode, predictions={"probabilities": probabilities})

  return model_fn
