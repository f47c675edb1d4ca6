"""Summarizes a finished run_classifier.py job: accuracies, time, throughput, paths.

  python scripts/summarize_run.py --output_dir OUT --test_file data/sentiment/test.tsv

Test accuracy is computed from OUT/test_results.tsv against the labels of the test
file. The summary is printed and written to OUT/demo_summary.txt (atomically).
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from train_metrics import atomic_write_text  # pylint: disable=wrong-import-position


class SummaryError(ValueError):
  """A result file that is missing or does not match the test file."""


def read_lines(path):
  if not os.path.isfile(path):
    raise SummaryError("%s: no such file" % path)
  with open(path, encoding="utf-8") as f:
    return [line.rstrip("\n") for line in f if line.strip()]


def read_eval_results(path):
  """eval_results.txt as a dict of floats."""
  return {k: float(v) for k, v in (l.split(" = ") for l in read_lines(path))}


def test_accuracy(results_path, test_file, label_list):
  """Accuracy of the argmax of each line of test_results.tsv against test_file."""
  probs = [[float(x) for x in line.split("\t")] for line in read_lines(results_path)]
  labels = [line.split("\t", 1)[0] for line in read_lines(test_file)]
  if len(probs) != len(labels):
    raise SummaryError("%s has %d lines but %s has %d" %
                       (results_path, len(probs), test_file, len(labels)))
  correct = sum(label_list[max(range(len(p)), key=p.__getitem__)] == y
                for p, y in zip(probs, labels))
  return correct / float(len(labels)), len(labels)


def summarize(output_dir, test_file, wall_secs=None):
  """Returns the summary text of the job in `output_dir`."""
  label_list = read_lines(os.path.join(output_dir, "label_list.txt"))
  ev = read_eval_results(os.path.join(output_dir, "eval_results.txt"))
  acc, n_test = test_accuracy(os.path.join(output_dir, "test_results.tsv"), test_file,
                              label_list)
  lines = ["== bert-horovod run summary ==",
           "dev accuracy:   %.4f  (eval_loss %.4f, global_step %d)" %
           (ev["eval_accuracy"], ev["eval_loss"], ev["global_step"]),
           "test accuracy:  %.4f  (%d examples)" % (acc, n_test)]
  metrics_path = os.path.join(output_dir, "train_metrics.json")
  if os.path.isfile(metrics_path):
    m = json.load(open(metrics_path))
    lines.append("training:       %.0fs on %d processes x %d threads, global batch %d" %
                 (m["total_train_time_s"], m["processes"], m["threads_per_process"],
                  m["global_batch"]))
    lines.append("throughput:     %.1f examples/sec global, %.1f per process" %
                 (m["examples_per_sec_global"], m["examples_per_sec_per_process"]))
  if wall_secs is not None:
    lines.append("wall time:      %.0fs (data preparation, training, eval, predict)" %
                 wall_secs)
  lines.append("checkpoint:     %s" % os.path.join(output_dir, "checkpoint"))
  lines.append("results:        %s, %s" % (os.path.join(output_dir, "eval_results.txt"),
                                           os.path.join(output_dir, "test_results.tsv")))
  return "\n".join(lines) + "\n", {"dev_accuracy": ev["eval_accuracy"],
                                    "test_accuracy": acc}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--test_file", required=True)
  parser.add_argument("--wall_secs", type=float, default=None)
  args = parser.parse_args(argv)
  try:
    text, numbers = summarize(args.output_dir, args.test_file, args.wall_secs)
  except SummaryError as e:
    sys.stderr.write("summarize_run.py: error: %s\n" % e)
    return 2
  atomic_write_text(os.path.join(args.output_dir, "demo_summary.txt"), text)
  atomic_write_text(os.path.join(args.output_dir, "demo_summary.json"),
                    json.dumps(numbers) + "\n")
  sys.stdout.write(text)
  return 0


if __name__ == "__main__":
  sys.exit(main())
