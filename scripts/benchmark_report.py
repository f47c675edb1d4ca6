"""The numbers of scripts/benchmark.py: model FLOPs, derived metrics and tables.

Pure functions on the measurements (no processes started here).

Model FLOPs per training example (sequence length S, L layers, hidden H,
intermediate I):

  N_mm   = L * (4*H^2 + 2*H*I)    weights of the encoder matmuls (query, key, value,
                                  attention output, FFN in, FFN out)
  fwd    = 2 * N_mm * S           dense layers: a multiply and an add per weight per token
         + 4 * L * S^2 * H        attention: Q.K^T and probs.V, 2*S^2*H each
  train  = 3 * fwd = 6 * N_mm * S + 12 * L * S^2 * H    (backward = 2x forward)

Pretraining (benchmark.py --task pretrain, P masked positions per sequence, vocab
V) adds the masked-LM head, a dense H x H transform and the H x V output matmul on
the P positions: 6 * P * (H^2 + H*V) more per sequence.

Not counted: embedding lookups (gathers), biases, LayerNorm, softmax, GELU, dropout,
the optimizer update, the pooler (2*H^2 per example, its share is recorded) and the
classifier: all negligible.

MFU: per-process MFU divides one process's achieved model TFLOP/s by the matmul
peak of ONE process at T threads running alone; global MFU divides the job's
TFLOP/s by the summed peak of P such processes running at once. Both peaks are
of the run's precision (PEAK_DTYPES): an fp32 run against the float32 matmul, a
bf16 run (--use_amp on CPU) against the bfloat16 one, an fp16 run (--use_amp on
GPU) against the float16 one.
"""

import os
import platform

# The matmul dtype whose peak a run of each --precision is measured against.
PEAK_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def setting_name(processes, threads):
  """'2x1' for CPU settings, '2' for GPU ones (threads == 0)."""
  return "%dx%d" % (processes, threads) if threads else "%d" % processes


def peak_key(processes, threads):
  """Key of a peak measurement in the results: 'T2', 'P2xT1', 'GPU', 'P2xGPU'."""
  unit = "T%d" % threads if threads else "GPU"
  return unit if processes == 1 else "P%dx%s" % (processes, unit)


def peak_suffix(dtype):
  """The end of a peak key for `dtype`: '' (float32), '-bfloat16' or '-float16'."""
  return "" if dtype == "float32" else "-" + dtype


def encoder_matmul_params(config):
  """Weights of the encoder's matmul kernels: L * (4*H^2 + 2*H*I).

  Counted from modeling.expected_checkpoint_shapes (kernels under bert/encoder/),
  so it follows the model code rather than a copy of the formula.
  """
  import numpy as np  # pylint: disable=import-outside-toplevel
  import modeling  # pylint: disable=import-outside-toplevel
  return sum(int(np.prod(shape))
             for name, shape in modeling.expected_checkpoint_shapes(config).items()
             if name.startswith("bert/encoder/") and name.endswith("/kernel"))


def train_flops_per_example(config, seq_length, masked_positions=0):
  """Model FLOPs of one training example (3x forward), as in the module docstring.

  Args:
    config: modeling.BertConfig (or any object with its attributes).
    seq_length: int, tokens per example (S).
    masked_positions: int, masked-LM predictions per sequence (P; 0 for the
      classifier, which has no masked-LM head).

  Returns:
    dict with matmul_params (N_mm), forward_dense, forward_attention,
    forward_mlm_head, forward_total, train_total (= 6*N_mm*S + 12*L*S^2*H
    + 6*P*(H^2 + H*V)), pooler_share and formula (train_total as text).
  """
  n_mm = encoder_matmul_params(config)
  s, l, h = seq_length, config.num_hidden_layers, config.hidden_size
  dense = 2 * n_mm * s
  attention = 2 * 2 * s * s * h * l
  head = 2 * masked_positions * (h * h + h * config.vocab_size)
  forward = dense + attention + head
  return {
      "matmul_params": n_mm, "forward_dense": dense, "forward_attention": attention,
      "forward_mlm_head": head, "forward_total": forward, "train_total": 3 * forward,
      "formula": "6 * N_mm * S + 12 * L * S^2 * H" + (
          " + 6 * P * (H^2 + H*V)" if head else ""),
      "pooler_share": (2 * h * h) / float(forward),
  }


def flops_report(config, seq_length, flops):
  """Human-readable lines of the FLOPs formula with this config's numbers."""
  s, l, h, i = (seq_length, config.num_hidden_layers, config.hidden_size,
                config.intermediate_size)
  head = flops["forward_mlm_head"]
  lines = [
      "model FLOPs per training example = " + flops["formula"],
      "  N_mm = L * (4*H^2 + 2*H*I) = %d * (4*%d^2 + 2*%d*%d) = %d encoder matmul "
      "weights" % (l, h, h, i, flops["matmul_params"]),
      "  S=%d L=%d H=%d: 6*N_mm*S = %.4g, 12*L*S^2*H = %.4g, total %.4g FLOPs "
      "(%.3f GFLOP)" % (s, l, h, 3 * flops["forward_dense"],
                        3 * flops["forward_attention"], flops["train_total"],
                        flops["train_total"] / 1e9),
      "  not counted: embeddings (gathers), biases, LayerNorm, softmax, GELU, "
      "optimizer; pooler + classifier are negligible (pooler %.3f%% of forward)" %
      (100 * flops["pooler_share"]),
  ]
  if head:
    lines.insert(3, "  masked-LM head: 6*P*(H^2 + H*V) = %.4g FLOPs (V=%d)" % (
        3 * head, config.vocab_size))
  return lines


def combine_independent(jobs):
  """The metrics of independent jobs run at once, as if one job of len(jobs) processes."""
  rate = sum(m["examples_per_sec_global"] for m in jobs)
  starts = [m["timed_start_unix"] for m in jobs]
  ends = [m["timed_end_unix"] for m in jobs]
  mean_window = sum(e - s for s, e in zip(starts, ends)) / len(jobs)
  overlap = max(0.0, min(ends) - max(starts)) / mean_window if mean_window > 0 else 0.0

  def mean(key):
    return sum(m[key] for m in jobs) / len(jobs)

  return {"processes": len(jobs), "threads_per_process": jobs[0]["threads_per_process"],
          "per_process_batch": jobs[0]["per_process_batch"],
          "global_batch": sum(m["global_batch"] for m in jobs),
          "steps_timed": min(m["steps_timed"] for m in jobs),
          "examples_per_sec_global": rate,
          "examples_per_sec_per_process": rate / len(jobs),
          "step_time_p50_s": mean("step_time_p50_s"),
          "step_time_p90_s": mean("step_time_p90_s"),
          "timed_overlap": overlap, "jobs": jobs}


def derive(runs, peaks, flops_per_example, gpu):
  """Adds achieved TFLOP/s, MFU and scaling to every run record (in place).

  Scaling compares runs of the same precision. A Horovod run with an independent
  counterpart (same P, T and precision) also gets "share_of_independent": its rate
  over the independent jobs' summed rate. "per_process_mfu" and "global_mfu" are
  against the peaks of the run's precision; on GPU "per_process_mfu-bfloat16" etc.
  are against the other dtypes' peaks.
  """
  rate = {run_key(r): r["metrics"]["examples_per_sec_global"]
          for r in runs if not r.get("independent")}
  bound = {run_key(r): r["metrics"]["examples_per_sec_global"]
           for r in runs if r.get("independent")}
  for r in runs:
    p, t, precision = run_key(r)
    m = r["metrics"]
    d = {"achieved_tflops_global": m["examples_per_sec_global"] * flops_per_example / 1e12,
         "achieved_tflops_per_process":
             m["examples_per_sec_per_process"] * flops_per_example / 1e12}
    base = rate.get((1, t, precision))
    if p == 1 and t and rate.get((1, 1, precision)):
      d["speedup_vs_1x1"] = m["examples_per_sec_global"] / rate[(1, 1, precision)]
    if p > 1 and base:
      d["scaling_efficiency"] = m["examples_per_sec_global"] / (p * base)
    if not r.get("independent") and bound.get((p, t, precision)):
      d["share_of_independent"] = (m["examples_per_sec_global"] /
                                   bound[(p, t, precision)])
    own = peak_suffix(PEAK_DTYPES[precision])
    for suffix in ([""] + (["-bfloat16", "-float16"] if gpu else [])):
      one = peaks.get(peak_key(1, t) + (suffix or own))
      if one:
        d["per_process_mfu" + suffix] = (d["achieved_tflops_per_process"] /
                                         max(one["per_process_best"]))
      agg = peaks.get(peak_key(p, t) + (suffix or own))
      if agg:
        d["global_mfu" + suffix] = d["achieved_tflops_global"] / agg["aggregate_best"]
    r["derived"] = d
  return runs


def run_key(run):
  """(processes, threads, precision) of a run record."""
  return run["processes"], run["threads"], run["precision"]


def comparisons(runs):
  """Lines comparing settings within each precision, then precisions per setting.

  With more than one precision, each line of setting_comparisons starts with its
  precision ("bf16: 2x1 vs 1x1 ..."); then every setting's bf16 or fp16 run is
  compared with its fp32 run.
  """
  precisions = list(dict.fromkeys(r["precision"] for r in runs))
  lines = []
  for precision in precisions:
    tag = precision + ": " if len(precisions) > 1 else ""
    lines += [tag + line for line in setting_comparisons(
        [r for r in runs if r["precision"] == precision])]
  fp32 = {r["setting"]: r["metrics"]["examples_per_sec_global"]
          for r in runs if r["precision"] == "fp32"}
  for r in runs:
    g = r["metrics"]["examples_per_sec_global"]
    if r["precision"] != "fp32" and fp32.get(r["setting"]):
      lines.append("%s %s vs fp32: %.2fx (%.2f vs %.2f examples/sec)" % (
          r["setting"], r["precision"], g / fp32[r["setting"]], g, fp32[r["setting"]]))
  return lines


def setting_comparisons(runs):
  """Lines comparing equal-core settings: Px1 vs 1x1 (efficiency), Px1 vs 1xP.

  With independent runs: Px1 as a share of P independent 1x1 jobs, and those
  jobs vs 1xP (the most any Px1 could beat 1xP by on this machine). All runs
  are of one precision.
  """
  by = {(r["processes"], r["threads"]): r for r in runs if not r.get("independent")}
  bound = {(r["processes"], r["threads"]): r for r in runs if r.get("independent")}
  lines = []
  for (p, t), r in sorted(by.items()):
    if t != 1 or p == 1:
      continue
    g = r["metrics"]["examples_per_sec_global"]
    if (1, 1) in by:
      lines.append("%dx1 vs 1x1 scaling efficiency: %.1f%% (%.2f vs %d x %.2f "
                   "examples/sec)" % (p, 100 * r["derived"]["scaling_efficiency"], g, p,
                                      by[(1, 1)]["metrics"]["examples_per_sec_global"]))
    if (1, p) in by:
      other = by[(1, p)]["metrics"]["examples_per_sec_global"]
      lines.append("%dx1 vs 1x%d speedup (same cores): %.2fx (%.2f vs %.2f "
                   "examples/sec)" % (p, p, g / other, g, other))
    if (p, t) in bound:
      ind = bound[(p, t)]["metrics"]
      lines.append("%dx1 vs %d independent 1x1 jobs at once (no communication): %.1f%% "
                   "(%.2f vs %.2f examples/sec; timed windows overlap %.0f%%)" % (
                       p, p, 100 * g / ind["examples_per_sec_global"], g,
                       ind["examples_per_sec_global"], 100 * ind["timed_overlap"]))
      if (1, p) in by:
        other = by[(1, p)]["metrics"]["examples_per_sec_global"]
        lines.append("%d independent 1x1 jobs vs 1x%d: %.2fx (the most %dx1 could "
                     "reach against 1x%d here)" % (
                         p, p, ind["examples_per_sec_global"] / other, p, p))
  return lines


def pct(value):
  return "%.1f%%" % (100 * value) if value is not None else "n/a"


def scaling_cell(r):
  """Scaling-efficiency cell: efficiency for P>1, speedup for 1xT, baseline 1x1."""
  d = r["derived"]
  if r["processes"] > 1:
    return pct(d.get("scaling_efficiency")) + (
        " (%s of independent)" % pct(d["share_of_independent"])
        if "share_of_independent" in d else "")
  if r["threads"] <= 1:
    return "1.00 (baseline)"
  return "speedup %.2fx" % d["speedup_vs_1x1"] if "speedup_vs_1x1" in d else "n/a"


def format_table(runs, peaks, gpu):
  """The results as a markdown table (plus a table of the matmul peaks)."""
  head = ["processes" if gpu else "processes x threads", "precision",
          "global examples/sec",
          "per-process examples/sec",
          "scaling efficiency vs 1" if gpu else
          "scaling efficiency vs 1x1 (PxT: vs P x 1xT; 1xT: speedup)",
          "step p50 (s)", "achieved TFLOP/s (global)",
          "per-process MFU (%% of 1-process%s peak of its precision)" % (
              "" if gpu else " T-thread"),
          "global MFU (% of P-process aggregate peak of its precision)"]
  if gpu:
    head += ["per-process MFU vs bf16 peak", "per-process MFU vs fp16 peak"]
  rows = []
  for r in runs:
    m, d = r["metrics"], r["derived"]
    row = [r["setting"], r["precision"], "%.2f" % m["examples_per_sec_global"],
           "%.2f" % m["examples_per_sec_per_process"], scaling_cell(r),
           "%.3f" % m["step_time_p50_s"], "%.4f" % d["achieved_tflops_global"],
           pct(d.get("per_process_mfu")), pct(d.get("global_mfu"))]
    if gpu:
      row += [pct(d.get("per_process_mfu-bfloat16")), pct(d.get("per_process_mfu-float16"))]
    rows.append(row)
  lines = markdown(head, rows)
  if peaks:
    lines += [""] + markdown(
        ["matmul peak", "processes", "threads each", "dtype", "n",
         "per-process TFLOP/s (best)", "aggregate TFLOP/s", "oneDNN kernel"],
        [[k, str(v["processes"]), str(v["threads"] or "GPU"), v["dtype"], str(v["n"]),
          ", ".join("%.4f" % x for x in v["per_process_best"]),
          "%.4f" % v["aggregate_best"], ", ".join(v.get("onednn_matmul") or ["none"])]
         for k, v in peaks.items()])
  return lines


def markdown(head, rows):
  """Lines of a markdown table."""
  lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
  return lines + ["| " + " | ".join(row) + " |" for row in rows]


def machine_info(peaks):
  """Cores, CPU model, load, Python/TF/Horovod versions (TF from a peak worker)."""
  info = {"nproc": os.cpu_count(), "platform": platform.platform(),
          "python": platform.python_version(), "cpu_model": cpu_model(),
          "loadavg": list(os.getloadavg())}
  try:
    info["usable_cores"] = len(os.sched_getaffinity(0))
  except AttributeError:
    pass
  try:
    from importlib import metadata  # pylint: disable=import-outside-toplevel
    info["horovod_version"] = metadata.version("horovod")
  except Exception:  # pylint: disable=broad-except
    info["horovod_version"] = None
  if peaks:
    first = next(iter(peaks.values()))
    info["tf_version"], info["gpus"] = first["tf_version"], first["gpus"]
  else:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    info["tf_version"] = tf.__version__
  return info


def cpu_model():
  """The 'model name' of /proc/cpuinfo, or platform.processor()."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown"
