"""Repository-wide style rules that reviewers should not have to check by eye."""

import io
import os
import re
import subprocess
import tokenize

from conftest import ROOT

TAG = "# Horovod:"


def tracked_python_files():
  """The project's .py files: git's tracked ones, or a walk outside a git checkout."""
  try:
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return [p for p in out.split() if os.path.exists(os.path.join(ROOT, p))]
  except (OSError, subprocess.CalledProcessError):
    found = []
    for folder, dirs, files in os.walk(ROOT):
      dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
      found += [os.path.relpath(os.path.join(folder, f), ROOT) for f in files
                if f.endswith(".py")]
    return sorted(found)


def hvd_rows(text):
  """Rows (1-based) where code uses the name hvd and a dot (a NAME token, not text in a string)."""
  tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)]
  return sorted({t.start[0] for t, nxt in zip(tokens, tokens[1:])
                 if t.type == tokenize.NAME and t.string == "hvd" and nxt.string == "."})


def test_every_line_calling_hvd_is_tagged():
  untagged = []
  for path in tracked_python_files():
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
      text = f.read()
    lines = text.split("\n")
    for row in hvd_rows(text):
      if TAG in lines[row - 1] or (row > 1 and TAG in lines[row - 2]):
        continue
      untagged.append("%s:%d: %s" % (path, row, lines[row - 1].strip()))
  # Horovod: the failure lists every untagged line.
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
