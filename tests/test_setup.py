"""scripts/setup.sh and requirements.txt: what a new user's set-up gets.

The interpreter search runs against stand-in interpreters (tiny shell scripts on
a temporary PATH that report a version), so nothing is installed or built.
"""

import ast
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

SETUP = os.path.join(ROOT, "scripts", "setup.sh")
BASH = shutil.which("bash")
# Tools setup.sh uses before it installs anything.
TOOLS = ("dirname", "basename", "sed")


def stand_in_path(tmp_path, interpreters, extra=()):
  """A PATH folder with `name` scripts printing "VERSION VENV_OK" for each
  (name, version, venv_ok) in `interpreters`, the tools setup.sh needs, and
  `extra` scripts (name -> body)."""
  folder = tmp_path / "bin"
  folder.mkdir()
  for name, version, venv_ok in interpreters:
    (folder / name).write_text("#!/bin/sh\necho '%s %d'\n" % (version, venv_ok))
    (folder / name).chmod(0o755)
  for name, body in dict(extra).items():
    (folder / name).write_text("#!/bin/sh\n" + body + "\n")
    (folder / name).chmod(0o755)
  for tool in TOOLS:
    os.symlink(shutil.which(tool), str(folder / tool))
  return str(folder)


def run_setup(tmp_path, interpreters, *args, extra=(), **env_extra):
  """Runs setup.sh with only the stand-ins on PATH; returns the CompletedProcess."""
  env = {"PATH": stand_in_path(tmp_path, interpreters, extra), "HOME": str(tmp_path),
         "VENV": str(tmp_path / "venv")}
  env.update(env_extra)
  return subprocess.run([BASH, SETUP] + list(args), env=env, capture_output=True,
                        text=True, timeout=60)


def test_picks_the_newest_supported_interpreter(tmp_path):
  proc = run_setup(tmp_path, [("python3", "3.12", 1), ("python3.10", "3.10", 1),
                              ("python3.9", "3.9", 1)], "--check_python")
  assert proc.returncode == 0, proc.stderr
  assert "Python 3.10: %s" % (tmp_path / "bin" / "python3.10") in proc.stdout
  assert not (tmp_path / "venv").exists()


def test_python3_is_used_when_its_version_fits(tmp_path):
  proc = run_setup(tmp_path, [("python3", "3.11", 1)], "--check_python")
  assert proc.returncode == 0, proc.stderr
  assert "Python 3.11: %s" % (tmp_path / "bin" / "python3") in proc.stdout


def test_no_suitable_python_stops_before_anything_with_what_to_do(tmp_path):
  marker = tmp_path / "installed"
  installer = "touch '%s'" % marker
  proc = run_setup(tmp_path, [("python3", "3.12", 1), ("python3.13", "3.13", 1)],
                   extra={"apt-get": installer, "sudo": installer, "dpkg": installer})
  assert proc.returncode == 2, (proc.stdout, proc.stderr)
  first = proc.stderr.splitlines()[0]
  assert first.startswith("setup.sh: error: no Python 3.9, 3.10 or 3.11"), proc.stderr
  assert "python3 (3.12)" in first and "python3.11 (not found)" in first
  for hint in ("python3.11-venv", "uv python install 3.11", "pyenv install 3.11",
               "PYTHON="):
    assert hint in proc.stderr, (hint, proc.stderr)
  assert "found on PATH" not in proc.stderr  # no uv here
  assert not (tmp_path / "venv").exists() and not marker.exists()
  assert "Traceback" not in proc.stderr and "No matching distribution" not in proc.stderr


def test_uv_on_path_is_offered(tmp_path):
  proc = run_setup(tmp_path, [("python3", "3.13", 1)], "--check_python",
                   extra={"uv": "exit 1"})
  assert proc.returncode == 2
  assert ("uv (found on PATH): uv python install 3.11 && "
          'PYTHON="$(uv python find 3.11)" bash scripts/setup.sh') in proc.stderr


def test_explicit_python_of_another_version_is_refused(tmp_path):
  proc = run_setup(tmp_path, [("python3.11", "3.11", 1), ("mypy3", "3.12", 1)],
                   "--check_python", PYTHON="mypy3")
  assert proc.returncode == 2
  assert "tried: mypy3 (3.12)" in proc.stderr  # not silently another one


def test_python_without_venv_module_names_the_package(tmp_path):
  proc = run_setup(tmp_path, [("python3.11", "3.11", 0)], "--check_python")
  assert proc.returncode == 2
  assert "python3.11 (3.11 without venv/ensurepip: install python3.11-venv)" in proc.stderr


def test_this_interpreter_passes_the_real_probe(tmp_path):
  """The probe itself, on the interpreter running the tests (3.9-3.11 by design)."""
  env = dict(os.environ, PYTHON=sys.executable, VENV=str(tmp_path / "venv"))
  proc = subprocess.run([BASH, SETUP, "--check_python"], env=env, capture_output=True,
                        text=True, timeout=60)
  assert proc.returncode == 0, proc.stderr
  assert "Python %d.%d: " % sys.version_info[:2] in proc.stdout


# ------------------------------------------------------------------ requirements


def third_party_imports():
  """Top-level names imported by the product, scripts/ and data/ (not tests)."""
  folders = (ROOT, os.path.join(ROOT, "scripts"), os.path.join(ROOT, "data"))
  local = {os.path.splitext(n)[0] for folder in folders for n in os.listdir(folder)
           if n.endswith(".py")}
  names = {}
  for folder in folders:
    for name in sorted(os.listdir(folder)):
      if not name.endswith(".py"):
        continue
      path = os.path.join(folder, name)
      with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
      for node in ast.walk(tree):
        if isinstance(node, ast.Import):
          modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
          modules = [node.module]
        else:
          continue
        for module in modules:
          top = module.split(".")[0]
          if top not in sys.stdlib_module_names and top not in local:
            names.setdefault(top, os.path.relpath(path, ROOT))
  return names


# Import name -> the requirement that provides it (absl-py and tensorflow-estimator
# come with TensorFlow; horovod is built by setup.sh).
PROVIDERS = {"tensorflow": "tensorflow-cpu", "absl": "tensorflow-cpu",
             "tensorflow_estimator": "tensorflow-cpu", "sklearn": "scikit-learn",
             "horovod": None}


def read_pins(name):
  """{requirement: version} of a requirements file at the repository root."""
  with open(os.path.join(ROOT, name)) as f:
    return dict(line.strip().split("==") for line in f
                if line.strip() and not line.startswith("#"))


def test_every_imported_package_is_pinned_in_requirements():
  """What setup.sh installs (requirements.txt) or, for optional tools, what they
  name in their error (requirements-extra.txt)."""
  pinned, extra = read_pins("requirements.txt"), read_pins("requirements-extra.txt")
  imports = third_party_imports()
  assert "safetensors" in imports  # scripts/convert_hf_checkpoint.py
  for module, where in sorted(imports.items()):
    requirement = PROVIDERS.get(module, module)
    if requirement is None:
      continue
    assert requirement in pinned or requirement in extra, (
        "%s imports %s, which requirements.txt (what scripts/setup.sh installs) lacks"
        % (where, module))


def test_missing_optional_dependency_is_one_line(tmp_path):
  """data/baseline_ngram.py without scikit-learn: one line naming what to install."""
  for part in ("train", "dev", "test"):
    (tmp_path / (part + ".tsv")).write_text("1\tgood\n0\tbad\n")
  blocker = ("import runpy, sys; sys.modules['sklearn'] = None; "
             "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")
  proc = subprocess.run([sys.executable, "-c", blocker,
                         os.path.join(ROOT, "data", "baseline_ngram.py"),
                         "--data_dir", str(tmp_path)],
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr.splitlines() == [
      "baseline_ngram.py: error: needs scikit-learn, an optional dependency: install it "
      "with `pip install -r requirements-extra.txt`"], proc.stderr[-2000:]
