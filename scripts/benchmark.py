"""Throughput benchmark: real run_classifier.py (or run_pretraining.py) training on synthetic data.

  python scripts/benchmark.py                         # CPU: settings 1x1,1x2,2x1
  python scripts/benchmark.py --settings 1x1,2x1,1x2,2x2,4x1 --steps 40
  python scripts/benchmark.py --independent     # + 2 plain 1x1 jobs at once (bound)
  python scripts/benchmark.py --precision fp32,bf16  # + bf16 (--use_amp) runs
  python scripts/benchmark.py --gpu --settings 1,2,4 --precision fp16 \
      --extra_args=--use_xla
  python scripts/benchmark.py --task pretrain --settings 1x1,2x1  # run_pretraining.py

Every setting PxT (P processes x T intra-op threads; with --gpu just P, one GPU
each) runs `horovodrun -np P --mpi|--gloo python run_classifier.py --do_train
--max_train_steps=STEPS --intra_op_threads=T ...` --repeats times, interleaved
(1x1, 1x2, 2x1, 1x1, ...), and keeps its fastest run. --precision adds a second
axis: every setting runs in each precision (bf16 and, on GPUs, fp16 add
--use_amp), interleaved the same way. The task is generated: a
vocab `[PAD] [UNK] [CLS] [SEP] [MASK] w0 w1 ...`, a bert_config.json from the
flags, and train.tsv lines of random words that fill the whole sequence. Rates
come from the train_metrics.json rank 0 writes (5 untimed warm-up steps).

--task pretrain trains run_pretraining.py (masked LM + next sentence, AdamW
unless --extra_args says otherwise) on one TFRecord file of random full-length
sequences, each with --max_predictions_per_seq masked positions (default 15% of
the sequence + 1: 20 at 128, Hugging Face's collator rate) and a random
next-sentence label; rates are sequences/sec, FLOPs include the masked-LM head.

--independent also runs every CPU setting PxT with P > 1 as P plain `python
run_classifier.py` jobs at once (no Horovod): their summed rate bounds PxT.

Matmul peaks (for MFU): subprocesses time n x n matmuls in the dtype of every
--precision (on GPU always float32, bfloat16 and float16), one process alone and
P at once; the JSON records the oneDNN kernel each ran (bf16 on AMX:
brg:avx512_core_amx). A run's MFU is against its own precision's peak. FLOPs and
MFU are defined in scripts/benchmark_report.py; the subprocesses are started by
scripts/benchmark_processes.py.

Prints a markdown table; writes every raw number, the configuration and the
machine to --json_out (default <work_dir>/benchmark.json).
"""

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmark_processes import (  # pylint: disable=wrong-import-position
    BenchmarkError, log, measure_matmul_peak, run_jobs, worker_env)
from benchmark_report import (  # pylint: disable=wrong-import-position
    PEAK_DTYPES, combine_independent, comparisons, derive, flops_report, format_table,
    machine_info, peak_key, peak_suffix, setting_name, train_flops_per_example)
from train_metrics import atomic_write_text  # pylint: disable=wrong-import-position

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WARMUP_STEPS = 5  # train_metrics.ThroughputHook's default; excluded from timing.
TASK_SCRIPTS = {"classifier": "run_classifier.py", "pretrain": "run_pretraining.py"}
PRETRAIN_RECORDS = "pretrain.tfrecord"


# ----------------------------------------------------------------------------
# Command line


def parse_args(argv=None):
  """The benchmark's flags."""
  p = argparse.ArgumentParser(
      description="Throughput/MFU benchmark of run_classifier.py or run_pretraining.py "
      "on synthetic data.",
      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--task", choices=["classifier", "pretrain"], default="classifier",
                 help="What trains: run_classifier.py, or run_pretraining.py on "
                 "synthetic masked-LM records.")
  p.add_argument("--settings", default=None,
                 help="Comma-separated PxT (processes x threads per process); with "
                 "--gpu, process counts (one GPU each). Default 1x1,1x2,2x1; with "
                 "--gpu 1,2,4,... up to the GPUs nvidia-smi lists.")
  p.add_argument("--gpu", action="store_true",
                 help="GPU benchmark: settings are process counts, one GPU each.")
  p.add_argument("--steps", type=int, default=20,
                 help="Training steps per run, including %d untimed warm-up steps "
                 "(the default benchmark takes ~7 min on 2 idle cores)." % WARMUP_STEPS)
  p.add_argument("--repeats", type=int, default=2,
                 help="Runs of every setting, interleaved; the fastest counts (keeps "
                 "a shared machine's drift out of the comparison).")
  p.add_argument("--batch", type=int, default=16, help="Batch size per process.")
  p.add_argument("--precision", default="fp32",
                 help="Comma-separated precisions, each a run of every setting: fp32, "
                 "bf16 (run_classifier.py --use_amp: bfloat16 matmuls, on CPUs with "
                 "avx512_bf16 or amx_bf16) and, with --gpu, fp16 (--use_amp on GPUs). "
                 "MFU is against the matmul peak of the run's precision.")
  # The model of every run.
  for name, default in (("num_hidden_layers", 6), ("hidden_size", 384),
                        ("num_attention_heads", 12), ("intermediate_size", 1536),
                        ("max_seq_length", 128)):
    p.add_argument("--" + name, type=int, default=default)
  p.add_argument("--max_predictions_per_seq", type=int, default=0,
                 help="--task pretrain: masked positions per sequence (0 = 15%% of "
                 "--max_seq_length + 1).")
  p.add_argument("--vocab_size", type=int, default=30522,
                 help="Vocabulary rows (30522 = BERT-base's uncased vocab).")
  p.add_argument("--num_examples", type=int, default=0,
                 help="Lines of train.tsv (0 = enough for 4 global batches of the "
                 "largest setting, at least 256; the input repeats).")
  p.add_argument("--work_dir", default=None,
                 help="Where the task and runs go (default: a new temporary dir, kept).")
  p.add_argument("--json_out", default=None,
                 help="Results JSON (default <work_dir>/benchmark.json).")
  p.add_argument("--extra_args", default="",
                 help="Extra flags passed to run_classifier.py, e.g. '--use_xla' (use "
                 "--extra_args=\"...\"). Not --use_amp: it is refused here, --precision "
                 "sets it and labels the runs.")
  # The matmul peak behind MFU.
  for name, kind, default, text in (
      ("matmul_n", int, 0, "Matmul size for the peak (0 = 2048 on CPU, 8192 on GPU)."),
      ("peak_secs", float, 2.0, "Seconds of one timed matmul window."),
      ("peak_repeats", int, 3, "Timed windows per peak measurement (the best counts).")):
    p.add_argument("--" + name, type=kind, default=default, help=text)
  p.add_argument("--skip_peak", action="store_true",
                 help="Do not measure matmul peaks (no MFU columns).")
  p.add_argument("--independent", action="store_true",
                 help="Also run every CPU setting PxT with P > 1 as P plain "
                 "single-process jobs at once: the rate PxT would reach if Horovod "
                 "cost nothing.")
  p.add_argument("--controller", choices=["auto", "gloo", "mpi"], default="auto",
                 help="horovodrun --mpi or --gloo; auto = mpi when Horovod was built "
                 "with MPI and mpirun is on PATH, else gloo.")
  p.add_argument("--horovodrun", default=None,
                 help="horovodrun executable (default: on PATH or next to python).")
  p.add_argument("--script", default=None,
                 help="The training script (default: the task's, run_classifier.py "
                 "or run_pretraining.py).")
  p.add_argument("--timeout", type=float, default=1800,
                 help="Seconds before one training run is killed.")
  p.add_argument("--seed", type=int, default=12345, help="Seed of the synthetic data.")
  args = p.parse_args(argv)
  if args.settings is None:
    args.settings = default_gpu_settings() if args.gpu else "1x1,1x2,2x1"
  if args.matmul_n <= 0:
    args.matmul_n = 8192 if args.gpu else 2048
  if args.script is None:
    args.script = os.path.join(ROOT, TASK_SCRIPTS[args.task])
  if args.max_predictions_per_seq <= 0:
    args.max_predictions_per_seq = args.max_seq_length * 15 // 100 + 1
  return args


def default_gpu_settings():
  """'1,2,4,...' up to the number of GPUs `nvidia-smi -L` lists ('1' if unknown)."""
  try:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                         timeout=60).stdout
    count = sum(line.startswith("GPU ") for line in out.splitlines())
  except (OSError, subprocess.SubprocessError):
    count = 0
  counts, p = [], 1
  while p <= max(count, 1):
    counts.append(str(p))
    p *= 2
  return ",".join(counts)


def parse_settings(text, gpu):
  """'1x1,1x2,2x1' -> [(1, 1), (1, 2), (2, 1)]; with gpu, '1,2' -> [(1, 0), (2, 0)].

  Threads 0 means "not set" (GPU runs). Raises BenchmarkError on a bad item.
  """
  settings = []
  for item in (s.strip() for s in text.split(",")):
    if not item:
      continue
    try:
      if gpu:
        p, t = int(item), 0
      else:
        p_text, t_text = item.lower().split("x")
        p, t = int(p_text), int(t_text)
    except ValueError:
      raise BenchmarkError("--settings: bad item %r (expected %s)" %
                           (item, "a process count" if gpu else "PxT, e.g. 2x1"))
    if p < 1 or (not gpu and t < 1):
      raise BenchmarkError("--settings: %r must have positive counts" % item)
    if (p, t) not in settings:
      settings.append((p, t))
  if not settings:
    raise BenchmarkError("--settings: no setting given")
  return settings


def parse_precisions(text, gpu):
  """'fp32,bf16' -> ["fp32", "bf16"]; fp32 and what --use_amp trains in here.

  --use_amp trains in bfloat16 on CPUs and in float16 on GPUs
  (distributed.choose_compute_type). Raises BenchmarkError on any other item.
  """
  allowed = ["fp32", "fp16"] if gpu else ["fp32", "bf16"]
  precisions = []
  for item in (s.strip().lower() for s in text.split(",")):
    if item and item not in allowed:
      raise BenchmarkError("--precision: %r is not one of %s %s" % (
          item, ", ".join(allowed), "with --gpu (--use_amp is float16 on GPUs)" if gpu
          else "on CPU (--use_amp is bfloat16 on CPUs; fp16 needs --gpu)"))
    if item and item not in precisions:
      precisions.append(item)
  if not precisions:
    raise BenchmarkError("--precision: no precision given")
  return precisions


def check_precisions(precisions, extra_args, gpu):
  """BenchmarkError if --extra_args sets --use_amp, or bf16 has no CPU support."""
  for flag in extra_args.split():
    if flag.lstrip("-").split("=")[0] in ("use_amp", "nouse_amp"):
      raise BenchmarkError("--extra_args: %s is set by --precision (use --precision "
                           "%s)" % (flag, "fp32,fp16" if gpu else "fp32,bf16"))
  import distributed  # pylint: disable=import-outside-toplevel
  if "bf16" in precisions and not distributed.cpu_supports_bfloat16():
    raise BenchmarkError("--precision bf16: this CPU has no bfloat16 instructions "
                         "(no avx512_bf16 or amx_bf16 in /proc/cpuinfo)")


def validate_args(args):
  """Checks flag values; raises BenchmarkError."""
  for name in ("steps", "batch", "num_hidden_layers", "hidden_size",
               "num_attention_heads", "intermediate_size", "max_seq_length",
               "peak_repeats", "repeats"):
    if getattr(args, name) < 1:
      raise BenchmarkError("--%s must be positive" % name)
  if args.steps <= WARMUP_STEPS:
    raise BenchmarkError("--steps must exceed the %d warm-up steps" % WARMUP_STEPS)
  if args.hidden_size % args.num_attention_heads:
    raise BenchmarkError("--hidden_size must be a multiple of --num_attention_heads")
  if args.vocab_size < len(SPECIAL_TOKENS) + 1:
    raise BenchmarkError("--vocab_size must be at least %d" % (len(SPECIAL_TOKENS) + 1))
  if args.max_seq_length < 3:
    raise BenchmarkError("--max_seq_length must be at least 3")
  if args.task == "pretrain" and args.max_predictions_per_seq > args.max_seq_length - 3:
    raise BenchmarkError("--max_predictions_per_seq must be below --max_seq_length - 2 "
                         "(the positions of [CLS] and both [SEP] are never masked)")
  if not os.path.isfile(args.script):
    raise BenchmarkError("--script: %s not found" % args.script)


# ----------------------------------------------------------------------------
# Synthetic task


def bert_config_dict(args):
  """The bert_config.json contents (Google's keys) for the benchmark flags."""
  return {
      "vocab_size": args.vocab_size, "hidden_size": args.hidden_size,
      "num_hidden_layers": args.num_hidden_layers,
      "num_attention_heads": args.num_attention_heads,
      "intermediate_size": args.intermediate_size, "hidden_act": "gelu",
      "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
      "max_position_embeddings": max(512, args.max_seq_length),
      "type_vocab_size": 2, "initializer_range": 0.02,
  }


def write_vocab(path, vocab_size):
  """vocab.txt: the 5 special tokens, then w0 .. w{vocab_size-6}."""
  words = SPECIAL_TOKENS + ["w%d" % i for i in range(vocab_size - len(SPECIAL_TOKENS))]
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(words) + "\n")


def write_train_tsv(path, num_examples, seq_length, vocab_size, seed):
  """train.tsv: `label<TAB>` + seq_length random words; labels random 0/1.

  seq_length words are more than the seq_length - 2 that fit next to [CLS] and
  [SEP], so every example fills the sequence (no padding).
  """
  rng = random.Random(seed)
  num_words = vocab_size - len(SPECIAL_TOKENS)
  with open(path, "w", encoding="utf-8") as f:
    for _ in range(num_examples):
      words = " ".join("w%d" % rng.randrange(num_words) for _ in range(seq_length))
      f.write("%d\t%s\n" % (rng.randint(0, 1), words))


def write_pretraining_records(path, num_examples, args):
  """A TFRecord file of `num_examples` random pretraining sequences (Google's features).

  Each fills --max_seq_length: [CLS] A [SEP] B [SEP] with random words, the
  segments split at a random point, --max_predictions_per_seq distinct masked
  positions (never [CLS] or [SEP]) labelled with random words, and a random
  next-sentence label.
  """
  import create_pretraining_data as cpd  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  rng = random.Random(args.seed)
  s, p = args.max_seq_length, args.max_predictions_per_seq
  first_word = len(SPECIAL_TOKENS)
  cls_id, sep_id = SPECIAL_TOKENS.index("[CLS]"), SPECIAL_TOKENS.index("[SEP]")
  with tf.io.TFRecordWriter(path) as writer:
    for _ in range(num_examples):
      a_len = rng.randint(1, s - 4)
      words = [rng.randrange(first_word, args.vocab_size) for _ in range(s - 3)]
      ids = [cls_id] + words[:a_len] + [sep_id] + words[a_len:] + [sep_id]
      segments = [0] * (a_len + 2) + [1] * (s - a_len - 2)
      candidates = [i for i, t in enumerate(ids) if t not in (cls_id, sep_id)]
      positions = sorted(rng.sample(candidates, p))
      labels = [rng.randrange(first_word, args.vocab_size) for _ in positions]
      instance = cpd.Instance(ids, segments, positions, labels, rng.random() < 0.5)
      writer.write(cpd.serialize_instance(instance, s, p))


def write_task(task_dir, args, num_examples):
  """Writes vocab.txt, bert_config.json and the task's data; returns their paths.

  The data is train.tsv (classifier) or PRETRAIN_RECORDS (--task pretrain).
  """
  os.makedirs(task_dir, exist_ok=True)
  paths = {"data_dir": task_dir,
           "vocab_file": os.path.join(task_dir, "vocab.txt"),
           "bert_config_file": os.path.join(task_dir, "bert_config.json")}
  write_vocab(paths["vocab_file"], args.vocab_size)
  with open(paths["bert_config_file"], "w") as f:
    json.dump(bert_config_dict(args), f, indent=2)
  if args.task == "pretrain":
    write_pretraining_records(os.path.join(task_dir, PRETRAIN_RECORDS), num_examples,
                              args)
  else:
    write_train_tsv(os.path.join(task_dir, "train.tsv"), num_examples,
                    args.max_seq_length, args.vocab_size, args.seed)
  return paths


def default_num_examples(args, settings):
  """Enough lines for 4 global batches of the largest setting (at least 256)."""
  if args.num_examples > 0:
    return args.num_examples
  return max(256, 4 * args.batch * max(p for p, _ in settings))


# ----------------------------------------------------------------------------
# Matmul peaks (subprocesses)


def measure_peaks(settings, precisions, args):
  """Matmul peaks for the settings, in the dtype of every precision (GPU: all three).

  Returns:
    dict name -> measurement; names "T<t>" (one process at t threads, CPU),
    "P<p>xT<t>" (p processes at once), on GPU "GPU" and "P<p>xGPU"; float32 peaks
    as they are, the others with "-bfloat16" or "-float16" appended.
  """
  peaks = {}
  dtypes = (["float32", "bfloat16", "float16"] if args.gpu else
            [PEAK_DTYPES[precision] for precision in precisions])
  for dtype in dtypes:
    suffix = peak_suffix(dtype)
    for p, t in sorted(set((1, t) for _, t in settings)) + sorted(
        set((p, t) for p, t in settings if p > 1)):
      key = peak_key(p, t) + suffix
      log("measuring matmul peak %s (%d process(es) x %s, %s, n=%d)" %
          (key, p, "%d thread(s)" % t if t else "1 GPU", dtype, args.matmul_n))
      peaks[key] = measure_matmul_peak(p, t, args.matmul_n, dtype, args.gpu,
                                       args.peak_secs, args.peak_repeats)
  return peaks


# ----------------------------------------------------------------------------
# Training runs


def find_horovodrun(explicit):
  """The horovodrun executable, or a BenchmarkError saying how to get it."""
  candidates = [explicit] if explicit else [
      shutil.which("horovodrun"),
      os.path.join(os.path.dirname(sys.executable), "horovodrun")]
  for c in candidates:
    if c and os.path.isfile(c) and os.access(c, os.X_OK):
      return c
  raise BenchmarkError(
      "horovodrun not found%s; install Horovod (bash scripts/setup.sh) and activate "
      "its venv, or pass --horovodrun PATH" % (" at %s" % explicit if explicit else
                                                " on PATH or next to %s" %
                                                sys.executable))


def horovod_controllers(horovodrun):
  """The controllers `horovodrun --check-build` marks available, e.g. {"gloo", "mpi"}."""
  try:
    out = subprocess.run([horovodrun, "--check-build"], capture_output=True, text=True,
                         timeout=300).stdout
  except (OSError, subprocess.TimeoutExpired):
    return set()
  section = out.split("Available Controllers:", 1)[-1].split("Available Tensor", 1)[0]
  return {name.lower() for name in re.findall(r"\[X\]\s+(\w+)", section)}


def resolve_controller(requested, available, mpirun_on_path):
  """'gloo' or 'mpi' for --controller; BenchmarkError if the requested one is missing."""
  if requested == "auto":
    return "mpi" if "mpi" in available and mpirun_on_path else "gloo"
  if requested == "mpi" and not ("mpi" in available and mpirun_on_path):
    raise BenchmarkError("--controller mpi: %s" % (
        "mpirun is not on PATH" if "mpi" in available else
        "this Horovod was built without MPI (bash scripts/setup.sh builds it with MPI)"))
  if requested not in available:
    raise BenchmarkError("--controller %s: this Horovod was built without it" % requested)
  return requested


def classifier_command(horovodrun, args, paths, processes, threads, precision,
                       output_dir):
  """The horovodrun command line of one training run (args.controller: gloo or mpi)."""
  return [horovodrun, "-np", str(processes), "--" + args.controller] + script_command(
      args, paths, threads, precision, output_dir)


def script_command(args, paths, threads, precision, output_dir):
  """`python run_classifier.py|run_pretraining.py <flags>` of one process's run.

  Precisions other than fp32 add --use_amp (bfloat16 on CPUs, float16 on GPUs).
  """
  cmd = [sys.executable, args.script, "--do_train",
         "--bert_config_file=" + paths["bert_config_file"],
         "--output_dir=" + output_dir,
         "--max_seq_length=%d" % args.max_seq_length,
         "--train_batch_size=%d" % args.batch,
         "--save_checkpoints_steps=100000", "--log_every_secs=30",
         "--seed=%d" % args.seed]
  if args.task == "pretrain":
    cmd += ["--input_file=" + os.path.join(paths["data_dir"], PRETRAIN_RECORDS),
            "--max_predictions_per_seq=%d" % args.max_predictions_per_seq,
            "--num_train_steps=%d" % args.steps, "--num_warmup_steps=0",
            "--optimizer=adamw"]
  else:
    cmd += ["--task_name=tsv", "--data_dir=" + paths["data_dir"],
            "--vocab_file=" + paths["vocab_file"],
            "--max_train_steps=%d" % args.steps, "--num_train_epochs=1000"]
  if threads:
    cmd += ["--intra_op_threads=%d" % threads, "--inter_op_threads=1"]
  if precision != "fp32":
    cmd.append("--use_amp")
  return cmd + args.extra_args.split()


def fresh_run_dir(args, name, repeat):
  """An empty <work_dir>/runs/<name>[-run<repeat+1>] (spaces in name become '-')."""
  run_dir = os.path.join(args.work_dir, "runs", name.replace(" ", "-") + (
      "" if args.repeats == 1 else "-run%d" % (repeat + 1)))
  shutil.rmtree(run_dir, ignore_errors=True)
  os.makedirs(run_dir)
  return run_dir


def run_setting(horovodrun, args, paths, processes, threads, precision, repeat=0):
  """Trains one setting (its `repeat`-th run) in a fresh directory; returns its record."""
  name = setting_name(processes, threads)
  run_dir = fresh_run_dir(args, "%s %s" % (name, precision), repeat)
  cmd = classifier_command(horovodrun, args, paths, processes, threads, precision,
                           os.path.join(run_dir, "output"))
  log("running %s %s: %s" % (name, precision, " ".join(cmd)))
  wall, (metrics,) = run_jobs([cmd], [run_dir], worker_env(args.gpu, None, threads),
                             args.timeout)
  log("  %s %s: %.1f examples/sec global, step p50 %.3fs, %.0fs wall" % (
      name, precision, metrics["examples_per_sec_global"], metrics["step_time_p50_s"],
      wall))
  return {"setting": name, "processes": processes, "threads": threads,
          "precision": precision, "command": cmd, "wall_s": wall, "run_dir": run_dir,
          "metrics": metrics}


def run_independent(args, paths, processes, threads, precision, repeat=0):
  """Runs `processes` single-process jobs of `threads` threads at once; one record.

  No launcher and no Horovod communication: each job is `python run_classifier.py`
  with its own output dir. The record's metrics sum the jobs' examples/sec
  ("examples_per_sec_global"), average their per-process rate and p50/p90 step
  times, and give "timed_overlap": the share of the jobs' mean timed window during
  which all of them were timing (1.0 = their timed steps ran side by side).
  """
  name = setting_name(processes, threads) + " independent"
  run_dir = fresh_run_dir(args, "%s %s" % (name, precision), repeat)
  job_dirs = [os.path.join(run_dir, "job%d" % i) for i in range(processes)]
  for d in job_dirs:
    os.makedirs(d)
  cmds = [script_command(args, paths, threads, precision, os.path.join(d, "output"))
          for d in job_dirs]
  log("running %s %s: %d x %s" % (name, precision, processes, " ".join(cmds[0])))
  wall, jobs = run_jobs(cmds, job_dirs, worker_env(args.gpu, None, threads),
                        args.timeout)
  metrics = combine_independent(jobs)
  log("  %s: %.1f examples/sec summed, timed windows overlap %.0f%%, %.0fs wall" % (
      name, metrics["examples_per_sec_global"], 100 * metrics["timed_overlap"], wall))
  return {"setting": name, "processes": processes, "threads": threads,
          "precision": precision, "independent": True, "command": cmds[0],
          "wall_s": wall, "run_dir": run_dir, "metrics": metrics}


def run_all_settings(horovodrun, args, paths, settings, precisions):
  """Runs every setting in every precision args.repeats times, interleaved.

  Returns the fastest run of each (setting, precision). With args.independent,
  every CPU setting with P > 1 is followed by its independent runs
  (run_independent), reported as setting "PxT independent".
  Each returned record lists all its runs' global rates in "repeat_rates" and
  the directories of the others in "other_run_dirs".
  """
  keys = []
  for p, t in settings:
    for precision in precisions:
      keys.append((p, t, precision, False))
      if args.independent and p > 1 and t:
        keys.append((p, t, precision, True))
  by_setting = {k: [] for k in keys}
  for repeat in range(args.repeats):
    for p, t, precision, independent in keys:
      by_setting[(p, t, precision, independent)].append(
          run_independent(args, paths, p, t, precision, repeat) if independent else
          run_setting(horovodrun, args, paths, p, t, precision, repeat))
  best = []
  for key in keys:
    records = by_setting[key]
    fastest = max(records, key=lambda r: r["metrics"]["examples_per_sec_global"])
    fastest = dict(fastest, repeat_rates=[r["metrics"]["examples_per_sec_global"]
                                          for r in records],
                   other_run_dirs=[r["run_dir"] for r in records if r is not fastest])
    best.append(fastest)
  return best


# ----------------------------------------------------------------------------
# The whole benchmark


def run_benchmark(args):
  """Runs everything; returns the results dict (also written to args.json_out)."""
  t_start = time.time()
  validate_args(args)
  settings = parse_settings(args.settings, args.gpu)
  precisions = parse_precisions(args.precision, args.gpu)
  check_precisions(precisions, args.extra_args, args.gpu)
  horovodrun = find_horovodrun(args.horovodrun)
  args.controller = resolve_controller(args.controller, horovod_controllers(horovodrun),
                                       shutil.which("mpirun") is not None)
  log("Horovod controller: %s" % args.controller)
  if not args.work_dir:
    args.work_dir = tempfile.mkdtemp(prefix="bert-benchmark-")
  os.makedirs(args.work_dir, exist_ok=True)
  args.json_out = args.json_out or os.path.join(args.work_dir, "benchmark.json")
  load_before = os.getloadavg()
  if not args.gpu and load_before[0] > 0.5:
    log("warning: load average %.2f before starting; the machine is not quiet, "
        "numbers will be noisy" % load_before[0])

  import modeling  # pylint: disable=import-outside-toplevel
  config = modeling.BertConfig.from_dict(bert_config_dict(args))
  flops = train_flops_per_example(
      config, args.max_seq_length,
      args.max_predictions_per_seq if args.task == "pretrain" else 0)
  report = flops_report(config, args.max_seq_length, flops)
  for line in report:
    log(line)
  num_examples = default_num_examples(args, settings)
  paths = write_task(os.path.join(args.work_dir, "task"), args, num_examples)
  log("task: %s, %d examples of %d tokens in %s" % (
      args.task, num_examples, args.max_seq_length, paths["data_dir"]))

  peaks = {} if args.skip_peak else measure_peaks(settings, precisions, args)
  runs = run_all_settings(horovodrun, args, paths, settings, precisions)
  derive(runs, peaks, flops["train_total"], args.gpu)
  results = {
      "config": {"args": vars(args), "bert_config": bert_config_dict(args),
                 "num_examples": num_examples, "precisions": precisions,
                 "settings": [setting_name(p, t) for p, t in settings]},
      "flops": dict(flops, lines=report),
      "machine": dict(machine_info(peaks), loadavg_before=list(load_before)),
      "peaks": peaks, "runs": runs, "comparisons": comparisons(runs),
      "total_wall_s": time.time() - t_start,
  }
  results["table"] = format_table(runs, peaks, args.gpu)
  atomic_write_text(args.json_out, json.dumps(results, indent=2) + "\n")
  return results


def main(argv=None):
  """Entry point; returns the exit status (1 on a BenchmarkError)."""
  args = parse_args(argv)
  try:
    results = run_benchmark(args)
  except BenchmarkError as e:
    sys.stderr.write("benchmark.py: error: %s\n" % e)
    return 1
  print("\n".join(results["flops"]["lines"]))
  print()
  print("Horovod controller: %s (processes on one host exchange gradients %s)" % (
      args.controller, "through Open MPI's shared memory" if args.controller == "mpi"
      else "over TCP"))
  print("\n".join(results["table"]))
  print()
  for line in results["comparisons"]:
    print(line)
  m = results["machine"]
  print("\nmachine: %s cores, %s, TF %s, load average %.2f before / %.2f after; "
        "total wall %.0fs" % (m["nproc"], m["cpu_model"], m["tf_version"],
                              m["loadavg_before"][0], m["loadavg"][0],
                              results["total_wall_s"]))
  print("results: %s" % args.json_out)
  return 0


if __name__ == "__main__":
  sys.exit(main())
