#!/usr/bin/env bash
# Makes libtorch 2.11.0 (the version tch 0.24 expects) available to this repository.
# Does nothing when it already is, or when you set LIBTORCH / LIBTORCH_USE_PYTORCH yourself.
# Otherwise installs torch==2.11.0 from PyPI into .venv and links .libtorch to it, which
# .cargo/config.toml hands to torch-sys.
set -euo pipefail
cd "$(dirname "$0")"
version=2.11.0

if [ -n "${LIBTORCH:-}" ] || [ -n "${LIBTORCH_USE_PYTORCH:-}" ]; then
  echo "setup: using your own libtorch (LIBTORCH or LIBTORCH_USE_PYTORCH is set)"
  exit 0
fi
# PyPI's CUDA 13 runtime wheel ships its headers without crt/, which gpu-scope's CUDA backend
# needs at build time (runtime/build.rs); the nvidia-cuda-crt wheel (130 KB) has them.
crt=nvidia-cuda-crt==13.0.88
if [ -f .libtorch/lib/libtorch_cpu.so ] && grep -q "^__version__ = '$version" .libtorch/version.py 2>/dev/null \
  && [ -f .libtorch/../nvidia/cu13/include/crt/host_defines.h ]; then
  exit 0
fi

python=${PYTHON:-python3}
if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "setup: need Python 3 with venv and pip (e.g. apt-get install python3-venv)," >&2
  echo "       or point LIBTORCH at a libtorch $version folder." >&2
  exit 1
fi
echo "setup: installing torch==$version from PyPI into .venv (about 5 GB, a few minutes)"
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==$version" "$crt"
torch_dir=$(.venv/bin/python -c 'import os, torch; print(os.path.relpath(os.path.dirname(torch.__file__)))')
ln -sfn "$torch_dir" .libtorch
echo "setup: libtorch $version ready at $torch_dir"
