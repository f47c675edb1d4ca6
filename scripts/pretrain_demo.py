"""The Python steps of scripts/run_pretrain_demo.sh: model config and summary.

  python scripts/pretrain_demo.py config --bert_config_file F --hidden_size 256 ...
  python scripts/pretrain_demo.py summary --test_file T --pretrain_dir P \\
      --pretrained_dirs A,B --scratch_dirs C,D --baseline_file F --times_file S \\
      --output_file OUT [--curve STEP=E,F ...]

`config` sets the model size of a bert_config.json in place (the corpus script
writes the demo's default size). `summary` prints one table: test accuracy of
the fine-tunings from the pretrained checkpoint and from random weights (each
seed and the mean), the n-gram baseline, the pretraining's own eval, and the
wall time of each stage of this run; it also writes it to --output_file and the
numbers to the same path with a .json suffix. Each --curve adds the fine-tunings
from the checkpoint of that pretraining step: the summary then gives the curve
of test accuracy against pretraining steps and minutes, from random weights (0)
to the last checkpoint.
"""

import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import summarize_run  # pylint: disable=wrong-import-position
from train_metrics import atomic_write_text  # pylint: disable=wrong-import-position

PROG = "pretrain_demo.py"
BASELINE_PATTERN = re.compile(r"dev_accuracy = ([0-9.]+) test_accuracy = ([0-9.]+)")


def set_model_size(path, hidden_size, num_hidden_layers, num_attention_heads,
                   intermediate_size, min_positions):
  """Rewrites bert_config.json at `path` with this model size.

  max_position_embeddings becomes at least `min_positions`.
  """
  if hidden_size % num_attention_heads:
    raise ValueError("hidden size %d is not a multiple of %d attention heads" %
                     (hidden_size, num_attention_heads))
  with open(path, encoding="utf-8") as f:
    config = json.load(f)
  config.update(hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                num_attention_heads=num_attention_heads,
                intermediate_size=intermediate_size,
                max_position_embeddings=max(config["max_position_embeddings"],
                                            min_positions))
  atomic_write_text(path, json.dumps(config, indent=2, sort_keys=True) + "\n")


def read_baseline(path):
  """(dev, test) accuracy from data/baseline_ngram.py's output, or None."""
  if not path:
    return None
  with open(path, encoding="utf-8") as f:
    match = BASELINE_PATTERN.search(f.read())
  if not match:
    raise summarize_run.SummaryError("%s: no accuracy line of baseline_ngram.py" % path)
  return float(match.group(1)), float(match.group(2))


def read_times(path):
  """Rows (stage, status, seconds, note) of the stage table."""
  rows = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      if line.strip():
        stage, status, secs, note = line.rstrip("\n").split("\t")
        rows.append((stage, status, int(secs), note))
  return rows


def fine_tuning_accuracies(dirs, test_file):
  """[(seed folder, dev accuracy, test accuracy)] of finished run_classifier.py jobs."""
  results = []
  for output_dir in dirs:
    _, numbers = summarize_run.summarize(output_dir, test_file)
    results.append((output_dir, numbers["dev_accuracy"], numbers["test_accuracy"]))
  return results


def mean(values):
  return sum(values) / len(values)


def format_accuracies(label, results):
  """One line: mean test accuracy, then each seed's test (and mean dev)."""
  tests = [r[2] for r in results]
  per_seed = ", ".join("%.4f" % t for t in tests)
  return "  %-28s test %.4f  (dev %.4f; %d seed(s): %s)" % (
      label, mean(tests), mean([r[1] for r in results]), len(tests), per_seed)


def pretraining_lines(pretrain_dir, label="pretraining:"):
  """What the pretraining reached: its eval on the records, steps, throughput."""
  lines = ["%-14s %s" % (label, pretrain_dir)]
  eval_path = os.path.join(pretrain_dir, "eval_results.txt")
  if os.path.isfile(eval_path):
    ev = summarize_run.read_eval_results(eval_path)
    lines.append("  step %d: masked_lm_accuracy %.4f (loss %.3f), next_sentence_accuracy "
                 "%.4f (loss %.3f), on the training records" %
                 (ev.get("global_step", 0), ev.get("masked_lm_accuracy", 0.0),
                  ev.get("masked_lm_loss", 0.0), ev.get("next_sentence_accuracy", 0.0),
                  ev.get("next_sentence_loss", 0.0)))
  m = read_train_metrics(pretrain_dir)
  if m:
    speed = ("too few steps to time" if not m["steps_timed"] else
             "%.1f sequences/sec global, %.1f per process" %
             (m["examples_per_sec_global"], m["examples_per_sec_per_process"]))
    lines.append("  %d steps in %.0f s on %d processes, global batch %d: %s" %
                 (m["steps_run"], m["total_train_time_s"], m["processes"],
                  m["global_batch"], speed))
  return lines


def read_train_metrics(pretrain_dir):
  """run_pretraining.py's train_metrics.json in `pretrain_dir`, or None."""
  path = os.path.join(pretrain_dir, "train_metrics.json")
  if not os.path.isfile(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def parse_curve(specs):
  """[(step, [folder, ...])] from --curve values STEP=FOLDER[,FOLDER...]."""
  points = []
  for spec in specs:
    step, sep, dirs = spec.partition("=")
    if not sep or not step.isdigit() or not dirs:
      raise ValueError("--curve %r: expected STEP=FOLDER[,FOLDER...]" % spec)
    points.append((int(step), dirs.split(",")))
  return sorted(points)


def curve_lines(points, scratch, pretrained, last_step, metrics, phase2_metrics=None):
  """The curve: mean test accuracy against pretraining steps and minutes.

  `points` are [(step, fine-tuning results)] of the intermediate checkpoints;
  random weights are step 0 and `pretrained` is `last_step`, plus phase 2 when
  `phase2_metrics` is given. Minutes are the pretraining's measured seconds per
  step (of its last run, if resumed) times the step, so they are marked as
  estimates; phase 2 adds its measured training time.
  """
  per_step = (metrics["total_train_time_s"] / metrics["steps_run"]
              if metrics and metrics["steps_run"] else None)
  rows = [(0, scratch, "  random weights", 0.0)] + [
      (step, results, "", 0.0) for step, results in points]
  if phase2_metrics:
    rows.append((last_step, pretrained, "  + phase 2: %d steps" %
                 phase2_metrics["steps_run"], phase2_metrics["total_train_time_s"]))
  else:
    rows.append((last_step, pretrained, "", 0.0))
  lines = ["accuracy against pretraining (test, mean over seeds; minutes estimated "
           "from the pretraining's seconds per step):"]
  for step, results, note, extra_s in rows:
    minutes = ("%6.1f min" % ((step * per_step + extra_s) / 60) if per_step else
               "     ? min")
    tests = [r[2] for r in results]
    lines.append("  step %7d  %s  test %.4f  (%d seed(s))%s" % (
        step, minutes, mean(tests), len(tests), note))
  return lines


def summary_text(test_file, pretrain_dir, pretrained_dirs, scratch_dirs, baseline_file,
                 times_file, curve=(), last_step=0, phase2_dir=""):
  """Returns (text, numbers) of the summary.

  `curve` is parse_curve's list; `last_step` the last step of `pretrain_dir`;
  `pretrained_dirs` started from its checkpoint or, if given, from the end of
  the phase 2 in `phase2_dir`.
  """
  pretrained = fine_tuning_accuracies(pretrained_dirs, test_file)
  scratch = fine_tuning_accuracies(scratch_dirs, test_file)
  points = [(step, fine_tuning_accuracies(dirs, test_file)) for step, dirs in curve]
  baseline = read_baseline(baseline_file)
  gain = mean([r[2] for r in pretrained]) - mean([r[2] for r in scratch])
  lines = ["== bert-horovod pretraining demo ==",
           "fine-tuned on %s (test accuracy, mean over seeds):" % test_file,
           format_accuracies("from the pretrained model", pretrained),
           format_accuracies("from random weights", scratch)]
  if baseline:
    lines.append("  %-28s test %.4f  (dev %.4f)" % ("char 1-3-gram baseline",
                                                   baseline[1], baseline[0]))
  else:
    lines.append("  char 1-3-gram baseline       skipped (no scikit-learn)")
  lines.append("  pretraining gain:            %+.2f points over random weights" %
               (100 * gain))
  lines += pretraining_lines(pretrain_dir)
  if phase2_dir:
    lines += pretraining_lines(phase2_dir, "phase 2:")
  if points:
    lines += curve_lines(points, scratch, pretrained, last_step,
                         read_train_metrics(pretrain_dir),
                         read_train_metrics(phase2_dir) if phase2_dir else None)
  lines.append("stage times (this run):")
  rows = read_times(times_file)
  for stage, status, secs, note in rows:
    lines.append("  %-28s %-7s %6d s  %s" % (stage, status, secs, note))
  lines.append("  %-28s %-7s %6d s" % ("total", "", sum(r[2] for r in rows)))
  numbers = {
      "pretrained_test_accuracy": [r[2] for r in pretrained],
      "scratch_test_accuracy": [r[2] for r in scratch],
      "baseline_test_accuracy": baseline[1] if baseline else None,
      "stage_seconds": {r[0]: r[2] for r in rows},
      "stage_status": {r[0]: r[1] for r in rows},
      "curve_test_accuracy": {str(step): [r[2] for r in results]
                              for step, results in points},
  }
  return "\n".join(lines) + "\n", numbers


def main(argv=None):
  parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
  commands = parser.add_subparsers(dest="command", required=True)
  config = commands.add_parser("config", help="set the model size of a bert_config.json")
  config.add_argument("--bert_config_file", required=True)
  for name in ("hidden_size", "num_hidden_layers", "num_attention_heads",
               "intermediate_size", "min_positions"):
    config.add_argument("--" + name, type=int, required=True)
  summary = commands.add_parser("summary", help="print and write the summary")
  summary.add_argument("--test_file", required=True)
  summary.add_argument("--pretrain_dir", required=True)
  summary.add_argument("--pretrained_dirs", required=True, help="comma-separated")
  summary.add_argument("--scratch_dirs", required=True, help="comma-separated")
  summary.add_argument("--baseline_file", default="",
                       help="baseline_ngram.py's output (empty: skipped)")
  summary.add_argument("--times_file", required=True)
  summary.add_argument("--output_file", required=True)
  summary.add_argument("--pretrain_steps", type=int, default=0,
                       help="the step of the checkpoint --pretrained_dirs started from")
  summary.add_argument("--phase2_dir", default="",
                       help="phase 2's folder, if --pretrained_dirs started from it")
  summary.add_argument("--curve", action="append", default=[],
                       help="STEP=FOLDER[,FOLDER...]: fine-tunings from the checkpoint "
                       "of that pretraining step (repeatable)")
  args = parser.parse_args(argv)
  try:
    if args.command == "config":
      set_model_size(args.bert_config_file, args.hidden_size, args.num_hidden_layers,
                     args.num_attention_heads, args.intermediate_size, args.min_positions)
      return 0
    text, numbers = summary_text(args.test_file, args.pretrain_dir,
                                 args.pretrained_dirs.split(","),
                                 args.scratch_dirs.split(","), args.baseline_file,
                                 args.times_file, parse_curve(args.curve),
                                 args.pretrain_steps, args.phase2_dir)
  except (OSError, ValueError, KeyError) as e:  # SummaryError is a ValueError.
    sys.stderr.write("%s: error: %s\n" % (PROG, e))
    return 2
  atomic_write_text(args.output_file, text)
  atomic_write_text(os.path.splitext(args.output_file)[0] + ".json",
                    json.dumps(numbers, indent=2, sort_keys=True) + "\n")
  sys.stdout.write(text)
  return 0


if __name__ == "__main__":
  sys.exit(main())
