"""Functions and classes related to optimization (weight updates), with Horovod."""

import collections
import re

import tensorflow as tf
import tensorflow_estimator as tf_estimator

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
                     fp16_allreduce=False, dynamic_loss_scale=False,
                     sparse_embedding_allreduce=False, optimizer_name="adamw",
                     layer_lr_decay=1.0, trainable_pattern=None):
  """Creates the training op: Horovod-averaged, clipped AdamWeightDecay or LAMB updates.

  Args:
    loss: float32 scalar Tensor, the mean loss of this process's batch.
    init_lr: float, peak learning rate for one process.
    num_train_steps: int, total steps (micro-batches when accumulating), identical
      on every rank.
    num_warmup_steps: int, warmup steps (same unit).
    scale_learning_rate: bool, multiply the rate by the number of processes.
    gradient_accumulation_steps: int, micro-batches per optimizer step (Horovod's
      `backward_passes_per_step`: one allreduce per k micro-batches).
    fp16_allreduce: bool, send gradients as float16 over the wire, divided by
      the number of processes before the sum so that it cannot overflow where the
      average does not. Needs the dense word-embedding allreduce.
    dynamic_loss_scale: bool, float16 training: scale the loss (start 2^15, halve
      on overflow, double after 2000 finite updates) and skip updates whose
      averaged gradients are not finite (the same decision on every rank). With
      accumulation the scale is decided on update steps only, from the allreduced
      sum of the window's micro-batches, so it stays the same on every rank.
    sparse_embedding_allreduce: bool, exchange the word-embedding gradient as the
      rows this step touched (an allgather of IndexedSlices) instead of allreducing
      the dense [vocab_size, hidden] table; cheaper when processes x tokens per
      batch is below vocab_size. Not with gradient accumulation (Horovod
      accumulates dense gradients only, and raises otherwise).
    optimizer_name: "adamw" (Google's AdamWeightDecayOptimizer) or "lamb".
    layer_lr_decay: float in (0, 1], layer-wise learning-rate decay (see
      `layer_lr_multipliers`); 1.0 gives every variable the same rate.
    trainable_pattern: regular expression or None; when given, only the trainable
      variables whose names it matches (re.search) get gradients, slots and
      updates; the others keep the values they were loaded with.

  Returns:
    (train_op, learning_rate, grad_norm): the op, the current rate and the global
    norm of the averaged gradients before clipping (both float32 scalars).
  """
  global_step = tf1.train.get_or_create_global_step()
  k = max(1, gradient_accumulation_steps)
  # Horovod: with accumulation the global step counts micro-batches (Horovod increments it
  # on the steps that only accumulate); the schedule follows optimizer updates.
  learning_rate = learning_rate_schedule(init_lr, global_step // k, num_train_steps // k,
                                         num_warmup_steps // k)
  if scale_learning_rate:
    # Horovod: scale the rate by the number of processes (the global batch grows).
    learning_rate = learning_rate * hvd.size()

  base_optimizer = make_base_optimizer(optimizer_name, learning_rate, layer_lr_decay)

  # Horovod: wrap the optimizer so compute_gradients() returns gradients averaged
  # over all processes: an allreduce of each dense gradient and, unless
  # sparse_as_dense, an allgather of the IndexedSlices (the word-embedding rows).
  dist_kwargs = {"sparse_as_dense": not sparse_embedding_allreduce}
  if fp16_allreduce:
    if sparse_embedding_allreduce:
      raise ValueError("fp16_allreduce needs the dense word-embedding allreduce "
                       "(Horovod cannot predivide gathered rows)")
    # Horovod: compress gradients to float16 for the allreduce.
    dist_kwargs["compression"] = hvd.Compression.fp16
    # A float16 sum of N gradients overflows (above 65504) long before their mean.
    # Horovod: divide each gradient by the number of processes before the sum.
    dist_kwargs["gradient_predivide_factor"] = float(hvd.size())
  if gradient_accumulation_steps > 1:
    # Horovod: sum k local micro-batch gradients, then one allreduce every k steps.
    dist_kwargs["backward_passes_per_step"] = gradient_accumulation_steps
    dist_kwargs["average_aggregated_gradients"] = True
  # Horovod: the distributed optimizer (see above).
  optimizer = hvd.DistributedOptimizer(base_optimizer, **dist_kwargs)

  # --train_variables was checked against the model's names before the graph existed.
  tvars = [v for v in tf1.trainable_variables()
           if trainable_pattern is None or re.search(trainable_pattern, v.op.name)]
  # Slots are created here, outside the tf.cond that Horovod puts around
  # apply_gradients when it accumulates gradients.
  base_optimizer.create_slots(tvars)
  loss_scale = None
  if dynamic_loss_scale:
    loss_scale = tf1.get_variable("loss_scale", initializer=2.0 ** 15, trainable=False)
    loss = loss * loss_scale
  # Horovod: compute_gradients (never tf.gradients) so the allreduce is applied.
  grads_and_vars = optimizer.compute_gradients(loss, tvars)
  tvars = [v for _, v in grads_and_vars]
  # Gathered rows become the dense averaged gradient (duplicate rows summed), so
  # the clipping norm and the update are those of the dense path.
  grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
           for g, _ in grads_and_vars]
  if loss_scale is not None:
    grads = [None if g is None else g / loss_scale for g in grads]

  # Clip the averaged gradients, as single-process BERT clips its gradients.
  (grads, grad_norm) = tf.clip_by_global_norm(grads, clip_norm=1.0)

  def apply():
    # A list, not a zip: Horovod iterates over it before applying it.
    return optimizer.apply_gradients(list(zip(grads, tvars)), global_step=global_step)

  if loss_scale is None:
    return apply(), learning_rate, grad_norm
  if k == 1:
    update_step = None
  else:
    # Horovod: only the last micro-step of each window of k carries the allreduced
    # gradients; the others hold this rank's own micro-batch gradients, so their
    # finiteness is a per-rank fact. Windows end at global steps k-1, 2k-1, ...
    # (train() refuses checkpoints inside a window, where Horovod's local
    # accumulation counter would restart out of step with the global step).
    update_step = tf.equal((global_step + 1) % k, 0)
  finite = tf.math.is_finite(grad_norm)
  # A micro-step that only accumulates always goes through apply(): Horovod
  # counts it there. An overflow inside the window reaches the update step
  # through the summed gradients, on every rank alike.
  go = finite if update_step is None else tf.logical_or(tf.logical_not(update_step),
                                                         finite)
  apply_op = tf.cond(go, lambda: tf.group(apply()),
                     lambda: tf.group(global_step.assign_add(1)))
  return (tf.group(apply_op, update_loss_scale(loss_scale, finite, update_step)),
          learning_rate, grad_norm)


class OptimizerSettings(collections.namedtuple(
    "OptimizerSettings",
    ["init_lr", "num_train_steps", "num_warmup_steps", "scale_learning_rate",
     "gradient_accumulation_steps", "fp16_allreduce", "dynamic_loss_scale",
     "sparse_embedding_allreduce", "optimizer_name", "layer_lr_decay",
     "trainable_pattern"],
    defaults=(True, 1, False, False, False, "adamw", 1.0, None))):
  """The arguments of `create_optimizer` after `loss`, as one value a
  model_fn_builder passes through to `training_spec` (same names and defaults)."""


def training_spec(loss, training_hooks_fn, settings):
  """The Estimator's TRAIN spec: the op of `create_optimizer(loss, **settings)`
  (`settings`: an `OptimizerSettings`), TensorBoard scalars of its learning rate
  and gradient norm, and the hooks of `training_hooks_fn(loss, learning_rate)`
  (optional)."""
  train_op, learning_rate, grad_norm = create_optimizer(loss, **settings._asdict())
  tf1.summary.scalar("learning_rate", learning_rate)
  tf1.summary.scalar("grad_global_norm", grad_norm)
  hooks = training_hooks_fn(loss, learning_rate) if training_hooks_fn else []
  return tf_estimator.estimator.EstimatorSpec(
      mode=tf_estimator.estimator.ModeKeys.TRAIN, loss=loss, train_op=train_op,
      training_hooks=hooks)


def make_base_optimizer(optimizer_name, learning_rate, layer_lr_decay=1.0):
  """The per-process optimizer `create_optimizer` wraps: "adamw" or "lamb".

  Both use Google's BERT settings: decoupled weight decay 0.01, betas 0.9/0.999,
  epsilon 1e-6, and LayerNorm parameters and biases excluded from the decay (and,
  for LAMB, from the trust ratio); `layer_lr_decay` as in `create_optimizer`.
  """
  optimizers = {"adamw": AdamWeightDecayOptimizer, "lamb": LambOptimizer}
  if optimizer_name not in optimizers:
    raise ValueError("unknown optimizer %r (choose adamw or lamb)" % optimizer_name)
  return optimizers[optimizer_name](
      learning_rate=learning_rate,
      weight_decay_rate=0.01,
      beta_1=0.9,
      beta_2=0.999,
      epsilon=1e-6,
      exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"],
      layer_lr_decay=layer_lr_decay)


def layer_lr_multipliers(param_names, decay):
  """Layer-wise learning-rate decay (as ELECTRA's fine-tuning, Clark et al. 2020).

  Depth 0 is `bert/embeddings/`, depth i + 1 is `bert/encoder/layer_i/`, and
  every other variable (pooler, classifier or pretraining heads) is on top at
  depth L + 1, L the number of encoder layers among `param_names`. A variable at
  depth k trains at decay ** (L + 1 - k) times the rate: the top at the rate,
  the embeddings at decay ** (L + 1).

  Args:
    param_names: variable names without the ":0" suffix.
    decay: float in (0, 1].

  Returns:
    dict from each of `param_names` to its float multiplier.
  """
  layer = re.compile(r"^bert/encoder/layer_(\d+)/")
  indices = [int(m.group(1)) for m in map(layer.match, param_names) if m]
  top = max(indices) + 2 if indices else 1

  def depth(name):
    if name.startswith("bert/embeddings/"):
      return 0
    match = layer.match(name)
    return int(match.group(1)) + 1 if match else top

  return {name: decay ** (top - depth(name)) for name in param_names}


def update_loss_scale(loss_scale, finite, update_step=None, growth_interval=2000):
  """Halves `loss_scale` after an overflow, doubles it after `growth_interval` updates.

  Args:
    loss_scale: float32 scalar variable.
    finite: bool scalar Tensor, whether the update's (allreduced) gradients are finite.
    update_step: optional bool scalar Tensor; when given, the scale and its counter
      change only where it is true (the optimizer updates of gradient accumulation).
    growth_interval: int, finite updates before the scale doubles.

  Returns:
    The update op.
  """
  good_steps = tf1.get_variable("loss_scale_good_steps", initializer=0, trainable=False)

  def on_finite():
    grow = good_steps + 1 >= growth_interval
    return tf.group(
        loss_scale.assign(tf.where(grow, loss_scale * 2.0, loss_scale)),
        good_steps.assign(tf.where(grow, 0, good_steps + 1)))

  def on_overflow():
    return tf.group(loss_scale.assign(tf.maximum(loss_scale / 2.0, 1.0)),
                    good_steps.assign(0))

  def update():
    return tf.cond(finite, on_finite, on_overflow)

  if update_step is None:
    return update()
  return tf.cond(update_step, update, tf.no_op)


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
               layer_lr_decay=1.0,
               name="AdamWeightDecayOptimizer"):
    """Constructs an AdamWeightDecayOptimizer (rates may be Tensors;
    `layer_lr_decay` as in `layer_lr_multipliers`)."""
    super(AdamWeightDecayOptimizer, self).__init__(False, name)
    self.learning_rate = learning_rate
    self.weight_decay_rate = weight_decay_rate
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay = exclude_from_weight_decay
    self.layer_lr_decay = layer_lr_decay
    self._slots_by_name = {}

  def create_slots(self, params):
    """Creates (once) the `adam_m`/`adam_v` variables of each of `params`."""
    for param in params:
      param_name = self._get_variable_name(param.name)
      if param_name in self._slots_by_name:
        continue
      self._slots_by_name[param_name] = tuple(
          tf1.get_variable(name=param_name + suffix, shape=param.shape.as_list(),
                           dtype=tf.float32, trainable=False,
                           initializer=tf1.zeros_initializer())
          for suffix in ("/adam_m", "/adam_v"))

  def _per_variable(self, rate, params):
    """`rate` (a scalar Tensor) for each of `params` by variable name, times its
    layer's multiplier when `layer_lr_decay` is below 1: one Tensor per distinct
    multiplier, and `rate` itself where it is 1."""
    names = [self._get_variable_name(p.name) for p in params]
    multipliers = layer_lr_multipliers(names, self.layer_lr_decay)
    scaled = {m: rate if m == 1.0 else rate * m for m in set(multipliers.values())}
    return {name: scaled[multipliers[name]] for name in names}

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    """Applies one Adam-with-weight-decay update; returns the grouped op.

    Per variable p with gradient g (the update of Google's BERT):
      m <- beta_1 * m + (1 - beta_1) * g
      v <- beta_2 * v + (1 - beta_2) * g^2
      p <- p - lr * (m / (sqrt(v) + epsilon) + weight_decay_rate * p)
    computed as p <- p * (1 - lr * weight_decay_rate), then TensorFlow's fused
    Adam kernel with beta powers 0 (so no bias correction, and its rate is lr):
    one pass over p, m, v and g instead of a dozen element-wise ops, each writing
    a temporary as large as the variable. (The kernel takes 1 - beta_2 in float32,
    0.00099998713: v differs from the float64 formula by 1.3e-5 relative, each
    step by half that.)
    """
    grads_and_vars = [(g, p) for g, p in grads_and_vars if g is not None and p is not None]
    self.create_slots([p for _, p in grads_and_vars])
    learning_rate = tf.convert_to_tensor(self.learning_rate, dtype=tf.float32)
    params = [p for _, p in grads_and_vars]
    rates = self._per_variable(learning_rate, params)
    decays = self._per_variable(learning_rate * self.weight_decay_rate, params)
    # No bias correction: the kernel's rate is lr * sqrt(1 - 0) / (1 - 0) = lr.
    no_correction = tf.constant(0.0, dtype=tf.float32)
    updates = []
    for (grad, param) in grads_and_vars:
      if isinstance(grad, tf.IndexedSlices):
        grad = tf.convert_to_tensor(grad)
      param_name = self._get_variable_name(param.name)
      m, v = self._slots_by_name[param_name]
      deps = []
      if self._do_use_weight_decay(param_name):
        # Decoupled weight decay, from the value before this step's update. It
        # waits for the (clipped, so fully computed) gradient: otherwise it could
        # run during the forward pass and change the weights that pass reads.
        with tf.control_dependencies([grad]):
          deps.append(param.assign_sub(decays[param_name] * param, read_value=False))
      with tf.control_dependencies(deps):
        updates.append(tf.raw_ops.ResourceApplyAdam(
            var=param.handle, m=m.handle, v=v.handle, beta1_power=no_correction,
            beta2_power=no_correction, lr=rates[param_name], beta1=self.beta_1,
            beta2=self.beta_2, epsilon=self.epsilon, grad=grad, use_locking=False))
    update_op = tf.group(*updates)
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


class LambOptimizer(AdamWeightDecayOptimizer):
  """LAMB: Adam with a per-layer trust ratio (You et al. 2019, arXiv 1904.00962).

  Per variable w with gradient g, at update t = 1, 2, ...:
    m <- beta_1 * m + (1 - beta_1) * g
    v <- beta_2 * v + (1 - beta_2) * g^2
    u = (m / (1 - beta_1^t)) / (sqrt(v / (1 - beta_2^t)) + epsilon)
        + weight_decay_rate * w
    r = ||w|| / ||u||   (1.0 when either norm is 0)
    w <- w - lr * r * u
  Variables matching `exclude_from_weight_decay` (LayerNorm, bias) get neither
  the decay term nor the trust ratio (r = 1: plain Adam with bias correction).
  Slots are `<var>/adam_m` and `<var>/adam_v` as for AdamWeightDecayOptimizer;
  t is counted in the non-trainable `<name>/step` (float32), so it follows the
  updates actually applied, whatever `global_step` counts. `apply_gradients`
  increments `global_step` by one, like AdamWeightDecayOptimizer, so both can
  be wrapped by Horovod's DistributedOptimizer the same way.
  """

  def __init__(self, learning_rate, name="LambOptimizer", **kwargs):
    """Constructs a LambOptimizer: arguments as AdamWeightDecayOptimizer's."""
    super(LambOptimizer, self).__init__(learning_rate, name=name, **kwargs)
    self._step = None

  def _is_excluded(self, param_name):
    """Whether `param_name` is exempt from decay and trust ratio (any rate)."""
    return any(re.search(r, param_name) is not None
               for r in self.exclude_from_weight_decay or ())

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    """Applies one LAMB update to every (gradient, variable); returns the op."""
    grads_and_vars = [(g, p) for g, p in grads_and_vars if g is not None and p is not None]
    self.create_slots([p for _, p in grads_and_vars])
    if self._step is None:
      self._step = tf1.get_variable(
          name=self.get_name() + "/step", shape=[], dtype=tf.float32,
          trainable=False, initializer=tf1.zeros_initializer())
    learning_rate = tf.convert_to_tensor(self.learning_rate, dtype=tf.float32)
    rates = self._per_variable(learning_rate, [p for _, p in grads_and_vars])
    t = self._step + 1.0
    # 1 - beta^t as -expm1(t * log(beta)) with the log taken in float64: the
    # float32 1 - beta_2 is 1.3e-5 off (0.00099998713), and so would the step be.
    def correction(beta):
      log_beta = tf.cast(tf.math.log(tf.constant(beta, tf.float64)), tf.float32)
      return -tf.math.expm1(t * log_beta)
    correction_1 = correction(self.beta_1)
    correction_2 = correction(self.beta_2)
    updates = []
    for grad, param in grads_and_vars:
      param_name = self._get_variable_name(param.name)
      m, v = self._slots_by_name[param_name]
      grad = tf.convert_to_tensor(grad)  # densifies IndexedSlices
      next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
      next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
      update = (next_m / correction_1) / (tf.sqrt(next_v / correction_2) + self.epsilon)
      ratio = 1.0
      if not self._is_excluded(param_name):
        if self.weight_decay_rate:
          update += self.weight_decay_rate * param
        w_norm = tf.norm(param)
        u_norm = tf.norm(update)
        ratio = tf.where(tf.logical_and(w_norm > 0.0, u_norm > 0.0),
                         w_norm / tf.maximum(u_norm, 1e-30), 1.0)
      # The new weights are computed from the value before this step (the
      # decay term and the norm read `param`) before any assignment runs.
      new_param = param - rates[param_name] * ratio * update
      updates.extend([param.assign(new_param, read_value=False),
                      m.assign(next_m, read_value=False),
                      v.assign(next_v, read_value=False)])
    with tf.control_dependencies(updates):
      update_op = self._step.assign_add(1.0, read_value=False)
    if global_step is None:
      return tf.identity(update_op, name=name) if name else update_op
    with tf.control_dependencies([update_op]):
      return tf.group(global_step.assign_add(1), name=name)
