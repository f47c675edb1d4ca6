"""Functions and classes related to optimization (weight updates), with Horovod."""

import re

import tensorflow as tf

from distributed import hvd

tf1 = tf.compat.v1


def learning_rate_schedule(init_lr, global_step, num_train_steps, num_warmup_steps):
  """Linear warmup to `init_lr` over `num_warmup_steps`, then linear decay to 0.

  Args:
    init_lr: float, peak learning rate.
    global_step: int64 scalar Tensor.
    num_train_steps: int, step at which the rate reaches 0.
    num_warmup_steps: int, length of the warmup (0 for none).

  Returns:
    float32 scalar Tensor.
  """
  step = tf.cast(global_step, tf.float32)
  total = float(max(num_train_steps, 1))
  decayed = init_lr * (1.0 - tf.minimum(step, total) / total)
  if not num_warmup_steps:
    return decayed
  warmup = init_lr * step / float(num_warmup_steps)
  return tf.where(step < float(num_warmup_steps), warmup, decayed)


def create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps,
                     scale_learning_rate=True, gradient_accumulation_steps=1,
                     fp16_allreduce=False, loss_scale_fn=None):
  """Creates the training op: Horovod-averaged, clipped AdamWeightDecay updates.

  Args:
    loss: float32 scalar Tensor, the mean loss of this process's batch.
    init_lr: float, peak learning rate for one process.
    num_train_steps: int, total optimizer steps (identical on every rank).
    num_warmup_steps: int, warmup steps.
    scale_learning_rate: bool, multiply the rate by the number of processes.
    gradient_accumulation_steps: int, micro-batches per optimizer step (Horovod's
      `backward_passes_per_step`: one allreduce per k micro-batches).
    fp16_allreduce: bool, send gradients as float16 over the wire.
    loss_scale_fn: optional (loss -> (scaled_loss, unscale_fn)) for mixed precision.

  Returns:
    (train_op, learning_rate, grad_norm): the op, the current rate and the global
    norm of the averaged gradients before clipping (both float32 scalars).
  """
  global_step = tf1.train.get_or_create_global_step()
  learning_rate = learning_rate_schedule(init_lr, global_step, num_train_steps,
                                         num_warmup_steps)
  if scale_learning_rate:
    # Horovod: scale the rate by the number of processes (the global batch grows).
    learning_rate = learning_rate * hvd.size()

  optimizer = AdamWeightDecayOptimizer(
      learning_rate=learning_rate,
      weight_decay_rate=0.01,
      beta_1=0.9,
      beta_2=0.999,
      epsilon=1e-6,
      exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])

  # Horovod: wrap the optimizer so compute_gradients() returns gradients averaged
  # over all processes (an allreduce). Dense embedding gradients allreduce faster
  # than gathered IndexedSlices for BERT-sized vocabularies.
  dist_kwargs = {"sparse_as_dense": True}
  if fp16_allreduce:
    # Horovod: compress gradients to float16 for the allreduce.
    dist_kwargs["compression"] = hvd.Compression.fp16
  if gradient_accumulation_steps > 1:
    # Horovod: sum k local micro-batch gradients, then one allreduce every k steps.
    dist_kwargs["backward_passes_per_step"] = gradient_accumulation_steps
    dist_kwargs["average_aggregated_gradients"] = True
  optimizer = hvd.DistributedOptimizer(optimizer, **dist_kwargs)

  tvars = tf1.trainable_variables()
  scaled_loss, unscale = loss, None
  if loss_scale_fn is not None:
    scaled_loss, unscale = loss_scale_fn(loss)
  # Horovod: compute_gradients (never tf.gradients) so the allreduce is applied.
  grads_and_vars = optimizer.compute_gradients(scaled_loss, tvars)
  grads = [g for g, _ in grads_and_vars]
  tvars = [v for _, v in grads_and_vars]
  if unscale is not None:
    grads = unscale(grads)

  # Clip the averaged gradients, as single-process BERT clips its gradients.
  (grads, grad_norm) = tf.clip_by_global_norm(grads, clip_norm=1.0)
  apply_op = optimizer.apply_gradients(zip(grads, tvars), global_step=global_step)
  return apply_op, learning_rate, grad_norm


class AdamWeightDecayOptimizer(tf1.train.Optimizer):
  """Adam with decoupled weight decay (no bias correction), as in Google's BERT.

  Slots are plain variables named `<var>/adam_m` and `<var>/adam_v`, the names in
  Google's checkpoints. `apply_gradients` increments `global_step` by one.
  """

  def __init__(self,
               learning_rate,
               weight_decay_rate=0.0,
               beta_1=0.9,
               beta_2=0.999,
               epsilon=1e-6,
               exclude_from_weight_decay=None,
               name="AdamWeightDecayOptimizer"):
    """Constructs an AdamWeightDecayOptimizer (rates may be Tensors)."""
    super(AdamWeightDecayOptimizer, self).__init__(False, name)
    self.learning_rate = learning_rate
    self.weight_decay_rate = weight_decay_rate
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay = exclude_from_weight_decay

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    """Applies one Adam-with-weight-decay update; returns the grouped op."""
    assignments = []
    for (grad, param) in grads_and_vars:
      if grad is None or param is None:
        continue
      if isinstance(grad, tf.IndexedSlices):
        grad = tf.convert_to_tensor(grad)
      param_name = self._get_variable_name(param.name)
      m = tf1.get_variable(name=param_name + "/adam_m", shape=param.shape.as_list(),
                           dtype=tf.float32, trainable=False,
                           initializer=tf1.zeros_initializer())
      v = tf1.get_variable(name=param_name + "/adam_v", shape=param.shape.as_list(),
                           dtype=tf.float32, trainable=False,
                           initializer=tf1.zeros_initializer())
      next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
      next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
      update = next_m / (tf.sqrt(next_v) + self.epsilon)
      if self._do_use_weight_decay(param_name):
        update += self.weight_decay_rate * param
      next_param = param - self.learning_rate * update
      assignments.extend([param.assign(next_param), m.assign(next_m), v.assign(next_v)])
    update_op = tf.group(*assignments)
    if global_step is None:
      return tf.identity(update_op, name=name) if name else update_op
    with tf.control_dependencies([update_op]):
      return tf.group(global_step.assign_add(1), name=name)

  def _do_use_weight_decay(self, param_name):
    """Whether to use L2 weight decay for `param_name`."""
    if not self.weight_decay_rate:
      return False
    if self.exclude_from_weight_decay:
      for r in self.exclude_from_weight_decay:
        if re.search(r, param_name) is not None:
          return False
    return True

  def _get_variable_name(self, param_name):
    """Gets the variable name from the tensor name."""
    m = re.match("^(.*):\\d+$", param_name)
    if m is not None:
      param_name = m.group(1)
    return param_name

  # tf1.train.Optimizer's abstract per-variable hooks are unused: apply_gradients
  # is overridden whole.
  def _apply_dense(self, grad, var):
    raise NotImplementedError()

  def _resource_apply_dense(self, grad, handle):
    raise NotImplementedError()

  def _apply_sparse(self, grad, var):
    raise NotImplementedError()

  def _resource_apply_sparse(self, grad, handle, indices):
    raise NotImplementedError()
