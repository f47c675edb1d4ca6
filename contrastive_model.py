"""Contrastive continued pretraining of the encoder alone: each pair's first view
must pick its own second view among the batch's (InfoNCE with in-batch negatives).

`run_pretraining.py --objective=simcse|segment_pairs` trains this instead of the
masked-LM and next-sentence heads, on the same records of
create_pretraining_data.py, with the masked tokens put back (masked_lm_ids at
masked_lm_positions):

  simcse          unsupervised SimCSE (Gao et al. 2021, arXiv 2104.08821): the
                  first segment `[CLS] A [SEP]` twice; dropout makes the views differ.
  segment_pairs   A against its true next segment B (records labelled is-next);
                  a random B is only a negative. Sentences of one document (one
                  review) are pulled together, those of others pushed apart.

Both views go through the encoder in one batch of 2B rows. The vector of a view
is the mean of the last layer over its real tokens (`run_classifier.py
--pooling=mean`). Only `bert/` variables exist: the checkpoint fine-tunes as any
of ours, and the masked-LM heads of a loaded checkpoint are not written back.
"""

import collections

import tensorflow as tf
import tensorflow_estimator as tf_estimator

import modeling
import optimization

tf1 = tf.compat.v1

# Legend for shapes: B = batch size, S = sequence length, H = hidden size,
# P = max_predictions_per_seq, N = number of processes.


def restore_masked_ids(input_ids, positions, label_ids, label_weights):
  """The token ids before masking.

  Args:
    input_ids: int32 Tensor of shape [B, S], with [MASK] or random tokens at the
      masked positions.
    positions: int32 Tensor of shape [B, P], the masked positions (padding: 0).
    label_ids: int32 Tensor of shape [B, P], the original ids there.
    label_weights: float32 Tensor of shape [B, P], 1.0 for real predictions.

  Returns:
    int32 Tensor of shape [B, S].
  """
  seq_length = modeling.get_shape_list(input_ids, expected_rank=2)[1]
  real = tf.cast(label_weights > 0, tf.int32)[:, :, tf.newaxis]  # [B, P, 1]
  hits = tf.one_hot(positions, seq_length, dtype=tf.int32) * real  # [B, P, S]
  restored = tf.reduce_sum(hits * label_ids[:, :, tf.newaxis], axis=1)  # [B, S]
  return tf.where(tf.reduce_sum(hits, axis=1) > 0, restored, input_ids)


def first_segment_mask(input_mask, segment_ids):
  """int32 [B, S]: 1 on the real tokens of `[CLS] A [SEP]`, 0 elsewhere."""
  return input_mask * (1 - segment_ids)


def get_contrastive_output(views, temperature, weights, gather_fn=None, rank=0):
  """The InfoNCE loss: the first view of each pair must pick its own second view
  among the second views of the batch (of all processes with gather_fn).

  Args:
    views: float32 Tensor of shape [2B, H]: rows 0..B-1 are the first views,
      rows B..2B-1 the second views of the same pairs.
    temperature: float, the softmax temperature of the cosine similarities.
    weights: float32 Tensor of shape [B]: 1.0 for a pair that is a query, 0.0
      for one whose second view is only a negative for the others.
    gather_fn: optional function, [B, H + 1] -> [N * B, H + 1], the rows of
      every process in rank order (`distributed.gather_over_processes`): the
      other processes' second views are negatives too, and the loss divides by
      the mean count of queries per process, so N processes with batch B train
      as one process with batch N * B. None: this batch's only. (One collective
      carries both: independent collectives in one step can deadlock.)
    rank: this process's rank (its rows in the gathered candidates start at
      rank * B); used with gather_fn only.

  Returns:
    (loss, per_example_loss, logits, labels): a float32 scalar (the weighted
    mean), float32 Tensors of shape [B] and [B, N * B] (N = 1 without
    gather_fn), and int32 [B], the column of each row's own second view.
  """
  first, second = tf.split(tf.math.l2_normalize(views, axis=-1), 2, axis=0)
  batch_size = tf.shape(first)[0]
  labels = tf.range(batch_size)
  candidates, count = second, tf.reduce_sum(weights)
  if gather_fn is not None:
    gathered = gather_fn(tf.concat([second, weights[:, tf.newaxis]], axis=1))
    candidates = gathered[:, :-1]  # [N * B, H]
    all_weights = tf.stop_gradient(gathered[:, -1])  # [N * B]
    count = tf.reduce_sum(all_weights) * tf.cast(
        batch_size, tf.float32) / tf.cast(tf.shape(all_weights)[0], tf.float32)
    labels += rank * batch_size
  logits = tf.matmul(first, candidates, transpose_b=True) / temperature  # [B, N * B]
  per_example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=labels, logits=logits)
  loss = tf.reduce_sum(weights * per_example_loss) / (count + 1e-5)
  return (loss, per_example_loss, logits, labels)


def pair_views(features, positives):
  """The token ids, the two views' masks and the query weights of each record.

  Args:
    features: see `create_model`.
    positives: "dropout" (SimCSE: `[CLS] A [SEP]` twice, every record a query)
      or "segments" (A against its true next segment B, the records with
      next_sentence_labels 0; a random B is only a negative).

  Returns:
    (input_ids [B, S], first_mask [B, S], second_mask [B, S], weights [B] float32).
  """
  input_ids = restore_masked_ids(features["input_ids"], features["masked_lm_positions"],
                                 features["masked_lm_ids"], features["masked_lm_weights"])
  first = first_segment_mask(features["input_mask"], features["segment_ids"])
  if positives == "dropout":
    return input_ids, first, first, tf.ones_like(first[:, 0], dtype=tf.float32)
  if positives != "segments":
    raise ValueError("positives must be 'dropout' or 'segments', got %r" % positives)
  second = features["input_mask"] * features["segment_ids"]
  is_next = tf.equal(tf.reshape(features["next_sentence_labels"], [-1]), 0)
  return input_ids, first, second, tf.cast(is_next, tf.float32)


def create_model(bert_config, features, temperature, positives="dropout",
                 compute_type=tf.float32, gather_fn=None, rank=0):
  """BERT and the contrastive loss on pairs of views of pretraining records.

  Dropout is on in evaluation too (it makes SimCSE's two views): eval measures
  the training objective on unseen batches.

  Args:
    bert_config: `BertConfig` (with its dropout probabilities).
    features: dict of Tensors of create_pretraining_data.py's records:
      input_ids, input_mask, segment_ids int32 [B, S]; masked_lm_positions,
      masked_lm_ids int32 [B, P]; masked_lm_weights float32 [B, P];
      next_sentence_labels int32 [B] or [B, 1] (read with "segments" only).
    temperature, gather_fn, rank: see `get_contrastive_output`.
    positives: see `pair_views`.
    compute_type: dtype of the encoder (mixed precision).

  Returns:
    (loss, outputs): a float32 scalar and a dict: contrastive_example_loss [B],
    contrastive_logits [B, N * B], contrastive_labels [B], contrastive_weights [B].
  """
  (input_ids, first_mask, second_mask, weights) = pair_views(features, positives)
  both_ids = tf.concat([input_ids, input_ids], axis=0)  # [2B, S]
  both_masks = tf.concat([first_mask, second_mask], axis=0)  # [2B, S]
  model = modeling.BertModel(
      config=bert_config, is_training=True, input_ids=both_ids, input_mask=both_masks,
      token_type_ids=tf.zeros_like(both_ids), compute_type=compute_type)
  views = modeling.mean_pooling(model.get_sequence_output(), both_masks)  # [2B, H]
  (loss, per_example_loss, logits, labels) = get_contrastive_output(
      tf.cast(views, tf.float32), temperature, weights, gather_fn=gather_fn, rank=rank)
  outputs = {"contrastive_example_loss": per_example_loss,
             "contrastive_logits": logits, "contrastive_labels": labels,
             "contrastive_weights": weights}
  return (loss, outputs)


def metric_fn(outputs):
  """Eval metrics (the names of eval_results.txt), over the queries:
  contrastive_accuracy, the share whose closest second view in the batch is their
  own, and contrastive_loss. Both depend on the batch size (the negatives)."""
  predictions = tf.argmax(outputs["contrastive_logits"], axis=-1, output_type=tf.int32)
  weights = outputs["contrastive_weights"]
  return {
      "contrastive_accuracy": tf1.metrics.accuracy(outputs["contrastive_labels"],
                                                   predictions, weights=weights),
      "contrastive_loss": tf1.metrics.mean(outputs["contrastive_example_loss"],
                                           weights=weights),
  }


def expected_checkpoint_shapes(config):
  """Variable name -> shape: the encoder's only (modeling.expected_checkpoint_shapes)."""
  return collections.OrderedDict(modeling.expected_checkpoint_shapes(config))


def model_fn_builder(bert_config, init_checkpoint, optimizer_settings, temperature,
                     positives="dropout", training_hooks_fn=None, compute_type=tf.float32,
                     gather_fn=None, rank=0):
  """Returns the `model_fn` closure for the Estimator.

  Args:
    bert_config, init_checkpoint, optimizer_settings, training_hooks_fn,
      compute_type: as `pretraining_model.model_fn_builder`'s (a checkpoint with
      pretraining heads loads its bert/ variables; the heads are left out).
    temperature, positives: see `create_model`.
    gather_fn: optional collective, see `get_contrastive_output`; training only
      (eval runs on rank 0 alone).
    rank: this process's rank.
  """

  def model_fn(features, labels, mode, params):
    del labels, params
    is_training = (mode == tf_estimator.estimator.ModeKeys.TRAIN)
    (loss, outputs) = create_model(
        bert_config, features, temperature, positives=positives,
        compute_type=compute_type if is_training else tf.float32,
        gather_fn=gather_fn if is_training else None, rank=rank if is_training else 0)

    if init_checkpoint:
      modeling.init_from_checkpoint(init_checkpoint)

    if is_training:
      return optimization.training_spec(loss, training_hooks_fn, optimizer_settings)
    if mode == tf_estimator.estimator.ModeKeys.EVAL:
      return tf_estimator.estimator.EstimatorSpec(
          mode=mode, loss=loss, eval_metric_ops=metric_fn(outputs))
    raise ValueError("the contrastive model_fn supports TRAIN and EVAL, not %s" % mode)

  return model_fn
