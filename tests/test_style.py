"""Repository-wide style rules that reviewers should not have to check by eye."""

import os
import re
import subprocess

from conftest import ROOT

HVD_CALL = re.compile(r"(?<![`\w.])hvd\.")  # `hvd.x` in backticks is prose
TAG = "# Horovod:"


def tracked_python_files():
  out = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, check=True,
                       capture_output=True, text=True).stdout
  return [p for p in out.split() if os.path.exists(os.path.join(ROOT, p))]


def code_part(line):
  """`line` without a trailing comment or docstring text (good enough for `hvd.`)."""
  return line.split("#", 1)[0]


def test_every_line_calling_hvd_is_tagged():
  untagged = []
  for path in tracked_python_files():
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
      lines = f.read().split("\n")
    for i, line in enumerate(lines):
      if not HVD_CALL.search(code_part(line)):
        continue
      if TAG in line or (i > 0 and TAG in lines[i - 1]):
        continue
      untagged.append("%s:%d: %s" % (path, i + 1, line.strip()))
  assert not untagged, ("lines calling hvd. without '%s' on them or the line above:\n%s"
                        % (TAG, "\n".join(untagged)))


def test_python_files_indent_with_two_spaces():
  """Google style: the first indented line of every module uses 2 spaces."""
  four = []
  for path in tracked_python_files():
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
      text = f.read()
    # The first block opened by `def`/`class`/`if`/... at column 0.
    m = re.search(r"^(?:def|class|if|for|while|with|try)\b.*:\n((?:[ ]*\n)*)( +)\S",
                  text, re.M)
    if m and len(m.group(2)) != 2:
      four.append("%s: indents by %d spaces" % (path, len(m.group(2))))
  assert not four, "\n".join(four)
