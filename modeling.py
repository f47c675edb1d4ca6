"""The main BERT model and related functions (tf.compat.v1 graph mode, TF 2.15).

Variable names and shapes follow Google's released BERT checkpoints, e.g.
`bert/embeddings/word_embeddings`, `bert/encoder/layer_0/attention/self/query/kernel`,
`bert/encoder/layer_0/output/LayerNorm/gamma`, `bert/pooler/dense/kernel`, so that
`--init_checkpoint` loads them unchanged.
"""

import collections
import copy
import json
import math
import os
import re

import numpy as np
import six
import tensorflow as tf

tf1 = tf.compat.v1

REQUIRED_CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers",
                        "num_attention_heads", "intermediate_size")


class ConfigError(ValueError):
  """A `bert_config.json` that is missing, unreadable or inconsistent."""


class CheckpointError(ValueError):
  """An `--init_checkpoint` that is missing, unreadable or of other shapes."""


class BertConfig(object):
  """Configuration for `BertModel` (the `bert_config.json` of Google's BERT)."""

  def __init__(self,
               vocab_size,
               hidden_size=768,
               num_hidden_layers=12,
               num_attention_heads=12,
               intermediate_size=3072,
               hidden_act="gelu",
               hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1,
               max_position_embeddings=512,
               type_vocab_size=16,
               initializer_range=0.02):
    """Constructs BertConfig.

    Args:
      vocab_size: Vocabulary size of `inputs_ids` in `BertModel`.
      hidden_size: Size of the encoder layers and the pooler layer.
      num_hidden_layers: Number of hidden layers in the Transformer encoder.
      num_attention_heads: Number of attention heads for each attention layer.
      intermediate_size: The size of the "intermediate" (feed-forward) layer.
      hidden_act: The non-linear activation function in the encoder and pooler
        ("gelu" is the tanh approximation of Google's BERT, "gelu_exact" the erf form).
      hidden_dropout_prob: The dropout probability for all fully connected
        layers in the embeddings, encoder, pooler and classifier head.
      attention_probs_dropout_prob: The dropout ratio for the attention probabilities.
      max_position_embeddings: The maximum sequence length this model supports.
      type_vocab_size: The vocabulary size of the `token_type_ids`.
      initializer_range: The stdev of the truncated_normal_initializer for
        initializing all weight matrices.
    """
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.num_hidden_layers = num_hidden_layers
    self.num_attention_heads = num_attention_heads
    self.hidden_act = hidden_act
    self.intermediate_size = intermediate_size
    self.hidden_dropout_prob = hidden_dropout_prob
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.max_position_embeddings = max_position_embeddings
    self.type_vocab_size = type_vocab_size
    self.initializer_range = initializer_range

  @classmethod
  def from_dict(cls, json_object):
    """Constructs a `BertConfig` from a Python dictionary of parameters."""
    config = BertConfig(vocab_size=None)
    for (key, value) in six.iteritems(json_object):
      config.__dict__[key] = value
    return config

  @classmethod
  def from_json_file(cls, json_file):
    """Constructs a `BertConfig` from a json file, raising `ConfigError` if invalid."""
    try:
      with open(json_file, "r", encoding="utf-8-sig") as reader:
        text = reader.read()
    except OSError as e:
      raise ConfigError("bert_config_file %s: cannot read (%s)" %
                        (json_file, e.strerror or e))
    try:
      obj = json.loads(text)
    except ValueError as e:
      raise ConfigError("bert_config_file %s: not valid JSON (%s)" % (json_file, e))
    if not isinstance(obj, dict):
      raise ConfigError("bert_config_file %s: expected a JSON object" % json_file)
    missing = [k for k in REQUIRED_CONFIG_KEYS if k not in obj]
    if missing:
      raise ConfigError("bert_config_file %s: missing keys %s" %
                        (json_file, ", ".join(missing)))
    config = cls.from_dict(obj)
    config.validate(json_file)
    return config

  def validate(self, source="bert_config"):
    """Raises `ConfigError` naming `source` if the sizes are inconsistent."""
    for key in REQUIRED_CONFIG_KEYS + ("max_position_embeddings", "type_vocab_size"):
      value = getattr(self, key)
      if not isinstance(value, int) or value <= 0:
        raise ConfigError("%s: %s must be a positive integer, got %r" %
                          (source, key, value))
    if self.hidden_size % self.num_attention_heads != 0:
      raise ConfigError(
          "%s: hidden_size (%d) is not a multiple of num_attention_heads (%d)" %
          (source, self.hidden_size, self.num_attention_heads))
    for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
      value = getattr(self, key)
      if not 0.0 <= value < 1.0:
        raise ConfigError("%s: %s must be in [0, 1), got %r" % (source, key, value))
    try:
      get_activation(self.hidden_act)
    except ConfigError as e:
      raise ConfigError("%s: %s" % (source, e))

  def to_dict(self):
    """Serializes this instance to a Python dictionary."""
    return copy.deepcopy(self.__dict__)

  def to_json_string(self):
    """Serializes this instance to a JSON string."""
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


class BertModel(object):
  """BERT model ("Bidirectional Encoder Representations from Transformers").

  Example usage:

  ```python
  input_ids = tf.constant([[31, 51, 99], [15, 5, 0]])
  input_mask = tf.constant([[1, 1, 1], [1, 1, 0]])
  token_type_ids = tf.constant([[0, 0, 1], [0, 2, 0]])
  config = modeling.BertConfig(vocab_size=32000, hidden_size=512,
    num_hidden_layers=8, num_attention_heads=8, intermediate_size=1024)
  model = modeling.BertModel(config=config, is_training=True,
    input_ids=input_ids, input_mask=input_mask, token_type_ids=token_type_ids)
  pooled_output = model.get_pooled_output()
  ```
  """

  def __init__(self,
               config,
               is_training,
               input_ids,
               input_mask=None,
               token_type_ids=None,
               scope=None,
               compute_type=tf.float32):
    """Constructor for BertModel.

    Args:
      config: `BertConfig` instance.
      is_training: bool. True for training (dropout on), False for eval/predict.
      input_ids: int32 Tensor of shape [batch_size, seq_length].
      input_mask: (optional) int32 Tensor of shape [batch_size, seq_length].
      token_type_ids: (optional) int32 Tensor of shape [batch_size, seq_length].
      scope: (optional) variable scope. Defaults to "bert".
      compute_type: mixed precision of the encoder. tf.float32: none.
        tf.float16: activations and matmuls in float16. tf.bfloat16 (CPU): the
        matmuls only, their inputs cast to bfloat16 and their outputs back to
        float32; activations and element-wise ops stay float32 (TensorFlow's
        bfloat16 element-wise CPU kernels are slower than its float32 ones).
        Variables stay float32; layer norm statistics and the outputs are float32.
    """
    config = copy.deepcopy(config)
    if not is_training:
      config.hidden_dropout_prob = 0.0
      config.attention_probs_dropout_prob = 0.0

    input_shape = get_shape_list(input_ids, expected_rank=2)
    batch_size = input_shape[0]
    seq_length = input_shape[1]

    if input_mask is None:
      input_mask = tf.ones(shape=[batch_size, seq_length], dtype=tf.int32)
    if token_type_ids is None:
      token_type_ids = tf.zeros(shape=[batch_size, seq_length], dtype=tf.int32)

    with tf1.variable_scope(scope, default_name="bert"):
      with tf1.variable_scope("embeddings"):
        (self.embedding_output, self.embedding_table) = embedding_lookup(
            input_ids=input_ids,
            vocab_size=config.vocab_size,
            embedding_size=config.hidden_size,
            initializer_range=config.initializer_range,
            word_embedding_name="word_embeddings")
        self.embedding_output = embedding_postprocessor(
            input_tensor=self.embedding_output,
            token_type_ids=token_type_ids,
            token_type_vocab_size=config.type_vocab_size,
            max_position_embeddings=config.max_position_embeddings,
            initializer_range=config.initializer_range,
            dropout_prob=config.hidden_dropout_prob)

      with tf1.variable_scope("encoder"):
        attention_mask = create_attention_mask_from_input_mask(input_mask)
        activation_type = tf.float32 if compute_type == tf.bfloat16 else compute_type
        self.all_encoder_layers = transformer_model(
            input_tensor=tf.cast(self.embedding_output, activation_type),
            attention_mask=attention_mask,
            hidden_size=config.hidden_size,
            num_hidden_layers=config.num_hidden_layers,
            num_attention_heads=config.num_attention_heads,
            intermediate_size=config.intermediate_size,
            intermediate_act_fn=get_activation(config.hidden_act),
            hidden_dropout_prob=config.hidden_dropout_prob,
            attention_probs_dropout_prob=config.attention_probs_dropout_prob,
            initializer_range=config.initializer_range,
            do_return_all_layers=True,
            matmul_type=compute_type)

      self.all_encoder_layers = [tf.cast(x, tf.float32) for x in self.all_encoder_layers]
      self.sequence_output = self.all_encoder_layers[-1]
      # The "pooler" takes the hidden state of the first token ([CLS]).
      with tf1.variable_scope("pooler"):
        first_token_tensor = self.sequence_output[:, 0, :]
        self.pooled_output = dense(first_token_tensor, config.hidden_size, "dense",
                                   config.initializer_range, activation=tf.tanh)

  def get_pooled_output(self):
    """float Tensor of shape [batch_size, hidden_size]."""
    return self.pooled_output

  def get_sequence_output(self):
    """float Tensor of shape [batch_size, seq_length, hidden_size]."""
    return self.sequence_output

  def get_all_encoder_layers(self):
    """List of float Tensors of shape [batch_size, seq_length, hidden_size]."""
    return self.all_encoder_layers

  def get_embedding_output(self):
    """float Tensor of shape [batch_size, seq_length, hidden_size]."""
    return self.embedding_output

  def get_embedding_table(self):
    """float Tensor of shape [vocab_size, hidden_size]."""
    return self.embedding_table


def mean_pooling(sequence_output, input_mask):
  """The mean of each sequence's hidden states over its real tokens.

  Args:
    sequence_output: float32 Tensor of shape [batch_size, seq_length, hidden_size],
      e.g. `BertModel.get_sequence_output()`.
    input_mask: int32 Tensor of shape [batch_size, seq_length], 1 for real tokens.

  Returns:
    float32 Tensor of shape [batch_size, hidden_size] (zeros for a sequence
    without real tokens).
  """
  mask = tf.cast(input_mask, tf.float32)[:, :, tf.newaxis]  # [B, S, 1]
  total = tf.reduce_sum(sequence_output * mask, axis=1)  # [B, H]
  return total / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)


_GELU_A = 0.044715
_GELU_B = math.sqrt(2 / math.pi)


@tf.custom_gradient
def gelu(x):
  """Gaussian Error Linear Unit, tanh approximation (as in Google's BERT).

  gelu(x) = x * c, c = 0.5 * (1 + tanh(B * (x + A * x^3))). The derivative is
  written out (c + 0.5 * x * (1 - t^2) * B * (1 + 3 * A * x^2), t the tanh): 15
  element-wise passes over the activations forward and backward instead of the
  ~22 that differentiating the formula op by op takes; on CPU each pass costs
  about as much as the arithmetic.

  Args:
    x: float Tensor of any shape (the intermediate activations, [N, intermediate]).

  Returns:
    Tensor of x's shape and dtype.
  """
  x2 = x * x
  t = tf.tanh(x * (x2 * (_GELU_A * _GELU_B) + _GELU_B))
  c = t * 0.5 + 0.5

  def grad(dy):
    slope = x2 * (1.5 * _GELU_A * _GELU_B) + 0.5 * _GELU_B
    return dy * c + tf.raw_ops.TanhGrad(y=t, dy=dy * x) * slope

  return x * c, grad


def gelu_exact(x):
  """Gaussian Error Linear Unit, erf form (Hugging Face's "gelu")."""
  return 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


_ACTIVATIONS = {
    "linear": None,
    "relu": tf.nn.relu,
    "gelu": gelu,
    "gelu_exact": gelu_exact,
    "tanh": tf.tanh,
}


def get_activation(activation_string):
  """Maps an activation name ("gelu", "gelu_exact", "relu", "tanh", "linear") to a function."""
  if not isinstance(activation_string, six.string_types):
    return activation_string
  act = activation_string.lower()
  if act not in _ACTIVATIONS:
    raise ConfigError("unsupported hidden_act %r (choose from %s)" %
                      (activation_string, ", ".join(sorted(_ACTIVATIONS))))
  return _ACTIVATIONS[act]


def get_assignment_map_from_checkpoint(tvars, init_checkpoint):
  """Maps variables of the current graph to those of the same name in a checkpoint.

  Returns:
    (assignment_map, initialized_variable_names): an OrderedDict of
    checkpoint name -> checkpoint name, and a dict of the graph variable names
    (with and without ":0") that the checkpoint initializes.
  """
  name_to_variable = collections.OrderedDict()
  for var in tvars:
    name = var.name
    m = re.match("^(.*):\\d+$", name)
    if m is not None:
      name = m.group(1)
    name_to_variable[name] = var

  assignment_map = collections.OrderedDict()
  initialized_variable_names = {}
  for (name, _) in tf.train.list_variables(init_checkpoint):
    if name not in name_to_variable:
      continue
    assignment_map[name] = name
    initialized_variable_names[name] = 1
    initialized_variable_names[name + ":0"] = 1
  return (assignment_map, initialized_variable_names)


def init_from_checkpoint(init_checkpoint):
  """Initializes every trainable variable that `init_checkpoint` holds by name.

  Variables the checkpoint lacks (a new head) keep their initializers.
  """
  (assignment_map, _) = get_assignment_map_from_checkpoint(tf1.trainable_variables(),
                                                           init_checkpoint)
  tf1.train.init_from_checkpoint(init_checkpoint, assignment_map)


DROPOUT_RESOLUTION = 1 << 16  # Each element's keep/drop draw is a 16-bit integer.


def dropout_threshold(dropout_prob):
  """The 16-bit draw below which an element is dropped, and the keep-scale.

  Args:
    dropout_prob: float in [0, 1).

  Returns:
    (threshold, scale): an element is dropped with probability threshold / 65536,
    the nearest multiple of 1/65536 to `dropout_prob` (0.1 -> 6554 / 65536 =
    0.10000610; below 1/131072 it is 0, no dropout; at most 65535 / 65536), and
    kept ones are multiplied by scale = 65536 / (65536 - threshold), so that the
    expectation is unchanged.
  """
  threshold = min(int(round(dropout_prob * DROPOUT_RESOLUTION)), DROPOUT_RESOLUTION - 1)
  return threshold, DROPOUT_RESOLUTION / float(DROPOUT_RESOLUTION - threshold)


def dropout(input_tensor, dropout_prob):
  """Dropout with drop probability `dropout_prob`; the identity when it is 0 or None.

  The keep/drop decisions are 16-bit random integers, two from each 32-bit Philox
  output: half the random numbers `tf.nn.dropout` draws (one float per element),
  which on CPU is most of dropout's cost. The drop probability is rounded to a
  multiple of 1/65536 (see `dropout_threshold`). The seed of each call comes from
  a stateful op, so runs are reproducible under a graph-level seed and every step
  draws a new mask.

  Args:
    input_tensor: float Tensor of any shape.
    dropout_prob: float in [0, 1), the probability of dropping an element.

  Returns:
    Tensor of the same shape and dtype.
  """
  if dropout_prob is None or dropout_prob == 0.0:
    return input_tensor
  threshold, scale = dropout_threshold(dropout_prob)
  if threshold == 0:
    return input_tensor
  shape = tf.shape(input_tensor)
  size = tf.reduce_prod(shape)
  seed = tf1.random.uniform([2], minval=0, maxval=2 ** 31 - 1, dtype=tf.int32)
  bits = tf.random.stateless_uniform([(size + 1) // 2], seed=seed, minval=None,
                                     maxval=None, dtype=tf.uint32)
  draws = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]
  keep = tf.reshape(draws >= tf.constant(threshold, tf.uint16), shape)
  return tf.where(keep, input_tensor * tf.cast(scale, input_tensor.dtype),
                  tf.zeros([], input_tensor.dtype))


def layer_norm(input_tensor, name=None):
  """Layer normalization over the last axis, variables `<name>/gamma` and `<name>/beta`.

  Statistics are computed in float32 whatever the input dtype; the output has the
  input's dtype.
  """
  with tf1.variable_scope(name, default_name="LayerNorm"):
    depth = input_tensor.shape[-1]
    gamma = tf1.get_variable("gamma", [depth], initializer=tf1.ones_initializer())
    beta = tf1.get_variable("beta", [depth], initializer=tf1.zeros_initializer())
    x = tf.cast(input_tensor, tf.float32)
    return tf.cast(_normalize(x, gamma, beta), input_tensor.dtype)


@tf.custom_gradient
def _normalize(x, gamma, beta):
  """(x - mean) / sqrt(variance + 1e-12) * gamma + beta over the last axis.

  The gradient is written out (dx = inv * (g - mean(g) - xhat * mean(g * xhat)),
  g = dy * gamma): fewer element-wise passes than differentiating op by op.

  Args:
    x: float32 Tensor [..., H]; gamma, beta: float32 [H].
  """
  mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
  inv = tf.math.rsqrt(variance + 1e-12)
  xhat = (x - mean) * inv

  def grad(dy):
    outer = list(range(len(x.shape) - 1))
    g = dy * gamma
    dx = inv * (g - tf.reduce_mean(g, -1, keepdims=True)
                - xhat * tf.reduce_mean(g * xhat, -1, keepdims=True))
    return dx, tf.reduce_sum(dy * xhat, outer), tf.reduce_sum(dy, outer)

  return xhat * gamma + beta, grad


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None):
  """Runs layer normalization followed by dropout."""
  return dropout(layer_norm(input_tensor, name), dropout_prob)


def create_initializer(initializer_range=0.02):
  """Creates a `truncated_normal_initializer` with the given range."""
  return tf1.truncated_normal_initializer(stddev=initializer_range)


def matmul(a, b, matmul_type=None, **kwargs):
  """`tf.matmul(a, b, **kwargs)` computed in `matmul_type` (default a's dtype).

  The inputs are cast to `matmul_type` and the product back to a's dtype: with
  tf.bfloat16 on CPU only the product runs in oneDNN's bfloat16 (AMX) kernels.
  """
  matmul_type = matmul_type or a.dtype
  product = tf.matmul(tf.cast(a, matmul_type), tf.cast(b, matmul_type), **kwargs)
  return tf.cast(product, a.dtype)


def dense(input_tensor, units, name, initializer_range, activation=None,
          matmul_type=None):
  """A fully connected layer with variables `<name>/kernel` [in, units] and `<name>/bias`.

  Args:
    input_tensor: float Tensor of shape [N, in_width] (or [B, in_width]).
    units: int, output width.
    name: variable scope name ("dense", "query", ...).
    initializer_range: float, stddev of the kernel initializer.
    activation: optional function applied to the output.
    matmul_type: optional dtype of the matmul (see `matmul`).

  Returns:
    float Tensor of shape [N, units], input_tensor's dtype.
  """
  with tf1.variable_scope(name):
    in_width = input_tensor.shape[-1]
    kernel = tf1.get_variable("kernel", [in_width, units],
                              initializer=create_initializer(initializer_range))
    bias = tf1.get_variable("bias", [units], initializer=tf1.zeros_initializer())
    output = matmul(input_tensor, kernel, matmul_type)
    output = tf.nn.bias_add(output, tf.cast(bias, input_tensor.dtype))
    if activation is not None:
      output = activation(output)
    return output


def embedding_lookup(input_ids,
                     vocab_size,
                     embedding_size=128,
                     initializer_range=0.02,
                     word_embedding_name="word_embeddings"):
  """Looks up word embeddings for an id tensor.

  Args:
    input_ids: int32 Tensor of shape [batch_size, seq_length] of word ids.
    vocab_size: int. Size of the embedding vocabulary.
    embedding_size: int. Width of the word embeddings.
    initializer_range: float. Embedding initialization range.
    word_embedding_name: string. Name of the embedding table.

  Returns:
    (output, table): float Tensor of shape [batch_size, seq_length, embedding_size]
    and the table of shape [vocab_size, embedding_size].
  """
  embedding_table = tf1.get_variable(
      name=word_embedding_name,
      shape=[vocab_size, embedding_size],
      initializer=create_initializer(initializer_range))
  output = tf.gather(embedding_table, input_ids)
  return (output, embedding_table)


def embedding_postprocessor(input_tensor,
                            token_type_ids,
                            token_type_vocab_size,
                            max_position_embeddings,
                            initializer_range,
                            dropout_prob,
                            token_type_embedding_name="token_type_embeddings",
                            position_embedding_name="position_embeddings"):
  """Adds token-type and position embeddings, then layer norm and dropout.

  Args:
    input_tensor: float Tensor of shape [batch_size, seq_length, embedding_size].
    token_type_ids: int32 Tensor of shape [batch_size, seq_length].
    token_type_vocab_size: int. The vocabulary size of `token_type_ids`.
    max_position_embeddings: int. Maximum sequence length the model supports.
    initializer_range: float. Range of the weight initialization.
    dropout_prob: float. Dropout probability applied to the final output.
    token_type_embedding_name: string. Name of the token type embedding table.
    position_embedding_name: string. Name of the position embedding table.

  Returns:
    float Tensor of shape [batch_size, seq_length, embedding_size].
  """
  input_shape = get_shape_list(input_tensor, expected_rank=3)
  seq_length = input_shape[1]
  width = input_shape[2]

  token_type_table = tf1.get_variable(
      name=token_type_embedding_name,
      shape=[token_type_vocab_size, width],
      initializer=create_initializer(initializer_range))
  # A one-hot matmul, as in Google's BERT: the gradient of this tiny table stays
  # dense (a gather's would be IndexedSlices with one row per token).
  flat_token_type_ids = tf.reshape(token_type_ids, [-1])
  one_hot_ids = tf.one_hot(flat_token_type_ids, depth=token_type_vocab_size,
                           dtype=token_type_table.dtype)
  token_type_embeddings = tf.reshape(tf.matmul(one_hot_ids, token_type_table),
                                     tf.shape(input_tensor))
  output = input_tensor + token_type_embeddings

  full_position_embeddings = tf1.get_variable(
      name=position_embedding_name,
      shape=[max_position_embeddings, width],
      initializer=create_initializer(initializer_range))
  if isinstance(seq_length, int) and seq_length > max_position_embeddings:
    raise ConfigError("sequence length %d exceeds max_position_embeddings %d" %
                      (seq_length, max_position_embeddings))
  # [seq_length, width] broadcast over the batch.
  position_embeddings = tf.slice(full_position_embeddings, [0, 0], [seq_length, -1])
  output += tf.expand_dims(position_embeddings, 0)

  return layer_norm_and_dropout(output, dropout_prob)


def create_attention_mask_from_input_mask(input_mask):
  """Turns a padding mask into an additive attention bias.

  Args:
    input_mask: int32 Tensor of shape [batch_size, seq_length], 1 for real tokens.

  Returns:
    float32 Tensor of shape [batch_size, 1, 1, seq_length]: 0 where attention is
    allowed and -10000 on padding, broadcast over heads and query positions.
  """
  mask = tf.cast(input_mask, tf.float32)
  return (1.0 - mask)[:, tf.newaxis, tf.newaxis, :] * -10000.0


def attention_layer(input_tensor,
                    attention_mask,
                    batch_size,
                    seq_length,
                    num_attention_heads,
                    size_per_head,
                    attention_probs_dropout_prob,
                    initializer_range,
                    matmul_type=None):
  """Multi-headed self-attention.

  Args:
    input_tensor: float Tensor of shape [batch_size * seq_length, hidden].
    attention_mask: float Tensor of shape [batch_size, 1, 1, seq_length].
    batch_size, seq_length: ints or scalar Tensors.
    num_attention_heads: int. N below.
    size_per_head: int. H below.
    attention_probs_dropout_prob: float. Dropout on the attention probabilities.
    initializer_range: float. Range of the weight initializer.
    matmul_type: optional dtype of the matmuls (see `matmul`).

  Returns:
    float Tensor of shape [batch_size * seq_length, num_attention_heads * size_per_head].
  """
  # B = batch size, S = sequence length, N = heads, H = size per head.
  width = num_attention_heads * size_per_head

  def split_heads(x):
    # [B*S, N*H] -> [B, N, S, H]
    x = tf.reshape(x, [batch_size, seq_length, num_attention_heads, size_per_head])
    return tf.transpose(x, [0, 2, 1, 3])

  query = split_heads(dense(input_tensor, width, "query", initializer_range,
                            matmul_type=matmul_type))
  key = split_heads(dense(input_tensor, width, "key", initializer_range,
                          matmul_type=matmul_type))
  value = split_heads(dense(input_tensor, width, "value", initializer_range,
                            matmul_type=matmul_type))

  # [B, N, S, S]
  scores = matmul(query, key, matmul_type, transpose_b=True)
  scores *= 1.0 / math.sqrt(float(size_per_head))
  scores += tf.cast(attention_mask, scores.dtype)
  probs = tf.nn.softmax(scores)
  probs = dropout(probs, attention_probs_dropout_prob)

  # [B, N, S, H] -> [B, S, N, H] -> [B*S, N*H]
  context = matmul(probs, value, matmul_type)
  context = tf.transpose(context, [0, 2, 1, 3])
  return tf.reshape(context, [-1, width])


def transformer_model(input_tensor,
                      attention_mask,
                      hidden_size=768,
                      num_hidden_layers=12,
                      num_attention_heads=12,
                      intermediate_size=3072,
                      intermediate_act_fn=gelu,
                      hidden_dropout_prob=0.1,
                      attention_probs_dropout_prob=0.1,
                      initializer_range=0.02,
                      do_return_all_layers=False,
                      matmul_type=None):
  """The Transformer encoder of "Attention is All You Need" as used by BERT.

  Args:
    input_tensor: float Tensor of shape [batch_size, seq_length, hidden_size].
    attention_mask: float Tensor of shape [batch_size, 1, 1, seq_length].
    hidden_size .. initializer_range: see `BertConfig`.
    do_return_all_layers: return every layer's output rather than the last.
    matmul_type: optional dtype of the matmuls (see `matmul`).

  Returns:
    float Tensor of shape [batch_size, seq_length, hidden_size] (or a list of them).
  """
  if hidden_size % num_attention_heads != 0:
    raise ConfigError("hidden_size (%d) is not a multiple of num_attention_heads (%d)" %
                      (hidden_size, num_attention_heads))
  size_per_head = hidden_size // num_attention_heads
  input_shape = get_shape_list(input_tensor, expected_rank=3)
  batch_size, seq_length = input_shape[0], input_shape[1]

  # Keep activations 2D ([B*S, hidden]) between layers: cheaper on CPU and GPU.
  prev_output = tf.reshape(input_tensor, [-1, hidden_size])
  all_layer_outputs = []
  for layer_idx in range(num_hidden_layers):
    with tf1.variable_scope("layer_%d" % layer_idx):
      layer_input = prev_output
      with tf1.variable_scope("attention"):
        with tf1.variable_scope("self"):
          attention_output = attention_layer(
              layer_input, attention_mask, batch_size, seq_length,
              num_attention_heads, size_per_head,
              attention_probs_dropout_prob, initializer_range, matmul_type)
        with tf1.variable_scope("output"):
          attention_output = dense(attention_output, hidden_size, "dense",
                                   initializer_range, matmul_type=matmul_type)
          attention_output = dropout(attention_output, hidden_dropout_prob)
          attention_output = layer_norm(attention_output + layer_input)
      with tf1.variable_scope("intermediate"):
        intermediate_output = dense(attention_output, intermediate_size, "dense",
                                    initializer_range, activation=intermediate_act_fn,
                                    matmul_type=matmul_type)
      with tf1.variable_scope("output"):
        layer_output = dense(intermediate_output, hidden_size, "dense",
                             initializer_range, matmul_type=matmul_type)
        layer_output = dropout(layer_output, hidden_dropout_prob)
        layer_output = layer_norm(layer_output + attention_output)
      prev_output = layer_output
      all_layer_outputs.append(layer_output)

  final_shape = [batch_size, seq_length, hidden_size]
  if do_return_all_layers:
    return [tf.reshape(x, final_shape) for x in all_layer_outputs]
  return tf.reshape(prev_output, final_shape)


def get_shape_list(tensor, expected_rank=None, name=None):
  """Returns the shape of `tensor` as a list, static ints where known, else scalar Tensors."""
  if expected_rank is not None:
    assert_rank(tensor, expected_rank, name)
  shape = tensor.shape.as_list()
  dyn_shape = None
  for index, dim in enumerate(shape):
    if dim is None:
      if dyn_shape is None:
        dyn_shape = tf.shape(tensor)
      shape[index] = dyn_shape[index]
  return shape


def assert_rank(tensor, expected_rank, name=None):
  """Raises `ValueError` if `tensor` is not of rank `expected_rank` (an int or list)."""
  if name is None:
    name = tensor.name
  if isinstance(expected_rank, six.integer_types):
    expected_rank = [expected_rank]
  actual_rank = tensor.shape.ndims
  if actual_rank not in expected_rank:
    raise ValueError("For the tensor `%s`, the actual rank `%d` (shape = %s) is not "
                     "equal to the expected rank `%s`" %
                     (name, actual_rank, str(tensor.shape), str(expected_rank)))


def expected_checkpoint_shapes(config, num_labels=None):
  """The variable names and shapes a `BertModel` with `config` creates (numpy-free).

  Returns:
    OrderedDict of Google-BERT variable name -> shape tuple (plus the classifier
    head `output_weights`/`output_bias` when `num_labels` is given).
  """
  h, i = config.hidden_size, config.intermediate_size
  shapes = collections.OrderedDict()
  shapes["bert/embeddings/word_embeddings"] = (config.vocab_size, h)
  shapes["bert/embeddings/token_type_embeddings"] = (config.type_vocab_size, h)
  shapes["bert/embeddings/position_embeddings"] = (config.max_position_embeddings, h)
  shapes["bert/embeddings/LayerNorm/gamma"] = (h,)
  shapes["bert/embeddings/LayerNorm/beta"] = (h,)
  for n in range(config.num_hidden_layers):
    p = "bert/encoder/layer_%d/" % n
    for name in ("query", "key", "value"):
      shapes[p + "attention/self/%s/kernel" % name] = (h, h)
      shapes[p + "attention/self/%s/bias" % name] = (h,)
    shapes[p + "attention/output/dense/kernel"] = (h, h)
    shapes[p + "attention/output/dense/bias"] = (h,)
    shapes[p + "attention/output/LayerNorm/gamma"] = (h,)
    shapes[p + "attention/output/LayerNorm/beta"] = (h,)
    shapes[p + "intermediate/dense/kernel"] = (h, i)
    shapes[p + "intermediate/dense/bias"] = (i,)
    shapes[p + "output/dense/kernel"] = (i, h)
    shapes[p + "output/dense/bias"] = (h,)
    shapes[p + "output/LayerNorm/gamma"] = (h,)
    shapes[p + "output/LayerNorm/beta"] = (h,)
  shapes["bert/pooler/dense/kernel"] = (h, h)
  shapes["bert/pooler/dense/bias"] = (h,)
  if num_labels is not None:
    shapes["output_weights"] = (num_labels, h)
    shapes["output_bias"] = (num_labels,)
  return shapes


def check_checkpoint_shapes(init_checkpoint, expected):
  """Checks that `init_checkpoint` can initialize a model with variables `expected`.

  Args:
    init_checkpoint: checkpoint path (prefix of its .index file).
    expected: dict of variable name -> shape, the model's (e.g.
      `expected_checkpoint_shapes(config)`).

  Raises:
    CheckpointError: the checkpoint is missing or unreadable, holds none of the
      `expected` variables, or holds one of them with another shape.
  """
  index = init_checkpoint + ".index"
  if not (os.path.exists(index) or os.path.exists(init_checkpoint)):
    raise CheckpointError("--init_checkpoint=%s: no such checkpoint (%s not found)" %
                          (init_checkpoint, index))
  try:
    ckpt_shapes = dict(tf.train.list_variables(init_checkpoint))
  except (tf.errors.OpError, ValueError) as e:
    raise CheckpointError("--init_checkpoint=%s: cannot read (%s)" %
                          (init_checkpoint, str(e).splitlines()[0]))
  if not any(name in ckpt_shapes for name in expected):
    raise CheckpointError("--init_checkpoint=%s: holds none of the BERT variables "
                          "(e.g. %s)" % (init_checkpoint, next(iter(expected))))
  for name, saved, needed in shape_mismatches(ckpt_shapes, expected):
    if saved is not None:  # a variable it lacks keeps its initializer
      raise CheckpointError("--init_checkpoint=%s: variable %s has shape %s, the "
                            "config needs %s" % (init_checkpoint, name, list(saved),
                                                 list(needed)))


def shape_mismatches(saved, expected):
  """The variables of `expected` that `saved` lacks or holds with another shape.

  Args:
    saved: dict of variable name -> shape (e.g. of `tf.train.list_variables`).
    expected: dict of variable name -> shape, the model's.

  Returns:
    list of (name, shape in `saved` as a tuple or None if absent, expected shape
    as a tuple), in the order of `expected`.
  """
  return [(name, tuple(saved[name]) if name in saved else None, tuple(shape))
          for name, shape in expected.items()
          if name not in saved or tuple(saved[name]) != tuple(shape)]


def count_parameters(config, include_embeddings=True):
  """Number of parameters of a `BertModel` with `config` (no classifier head)."""
  total = 0
  for name, shape in expected_checkpoint_shapes(config).items():
    if not include_embeddings and name.startswith("bert/embeddings/"):
      continue
    total += int(np.prod(shape))
  return total
