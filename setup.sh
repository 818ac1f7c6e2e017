#!/usr/bin/env bash
# Makes the libtorch that a tch version expects available to this repository:
#   bash setup.sh        tch 0.26 (feature tch-0-26, the default): libtorch 2.13, linked as
#                        .libtorch, which .cargo/config.toml hands to torch-sys
#   bash setup.sh 0.25   tch 0.25 (feature tch-0-25): libtorch 2.12, linked as
#                        .torch/libtorch-0.25 (.ci/tch builds with it)
#   bash setup.sh 0.24   tch 0.24 (feature tch-0-24): libtorch 2.11, linked as
#                        .torch/libtorch-0.24
# Each version is installed once from PyPI (torch, and the CUDA `crt` headers gpu-scope's CUDA
# backend needs), about 5 GB and 2 minutes: the default into .venv (whose python the benchmark
# uses for its PyTorch rows), another into .torch/venv-<torch version>, or into that too when
# .venv already holds another torch. A .venv or .torch/venv-* that has the version is reused.
# For the default, does nothing when you set LIBTORCH or LIBTORCH_USE_PYTORCH yourself.
set -euo pipefail
cd "$(dirname "$0")"
# The build needs Rust 1.88+ (what Cargo.lock's versions ask) and a C++17 compiler (gpu-scope's
# shim and torch-sys are C++): said here, before the install, rather than by the build.
rust=$({ rustc --version 2>/dev/null || true; } | sed -n 's/^rustc 1\.\([0-9]*\)\..*/\1/p')
if [ -z "$rust" ] || [ "$rust" -lt 88 ]; then
  found=${rust:+1.$rust}
  echo "setup: need Rust 1.88 or newer, found ${found:-none} (https://rustup.rs; rustup update)" >&2
  exit 1
fi
cxx=${CXX:-c++}
if ! command -v "${cxx%% *}" >/dev/null; then # CXX may be a wrapper: "ccache g++"
  echo "setup: need a C++17 compiler, and found no ${cxx%% *} (e.g. apt-get install g++, or set CXX)" >&2
  exit 1
fi
# shellcheck disable=SC2086 # word-split on purpose: the wrapper and its compiler
if ! printf '#include <optional>\nint main() { return std::optional<int>(0).value(); }\n' \
  | $cxx -std=c++17 -x c++ -fsyntax-only - 2>/dev/null; then
  echo "setup: $cxx cannot compile C++17 (-std=c++17): install g++ 8 or newer, or set CXX" >&2
  exit 1
fi
default=0.26
tch=${1:-$default}
case $tch in
  0.24) version=2.11.0 ;;
  0.25) version=2.12.0 ;;
  0.26) version=2.13.0 ;;
  *) echo "setup: no libtorch known for tch $tch; use 0.26 (the default), 0.25 or 0.24" >&2; exit 2 ;;
esac
if [ "$tch" = "$default" ]; then link=.libtorch; else link=.torch/libtorch-$tch; fi

if [ "$tch" = "$default" ] && { [ -n "${LIBTORCH:-}" ] || [ -n "${LIBTORCH_USE_PYTORCH:-}" ]; }; then
  # As torch-sys reads them: LIBTORCH_USE_PYTORCH first, and LIBTORCH_LIB in LIBTORCH's place.
  lib=${LIBTORCH_LIB:-${LIBTORCH:-}}/lib
  if [ -z "${LIBTORCH_USE_PYTORCH:-}" ] && [ ! -f "$lib/libtorch_cpu.so" ]; then
    echo "setup: $lib has no libtorch_cpu.so: point LIBTORCH at a libtorch $version folder" \
      "(the one holding lib/ and include/), or unset it to install one from PyPI" >&2
    exit 1
  fi
  echo "setup: using your own libtorch (LIBTORCH or LIBTORCH_USE_PYTORCH is set)"
  exit 0
fi
# PyPI's CUDA 13 runtime wheel ships its headers without crt/, which gpu-scope's CUDA backend
# needs at build time (runtime/build.rs); the nvidia-cuda-crt wheel (130 KB) has them.
crt=nvidia-cuda-crt==13.0.88
ready() { # $1: a torch folder
  [ -f "$1/lib/libtorch_cpu.so" ] && grep -q "^__version__ = '$version" "$1/version.py" 2>/dev/null \
    && [ -f "$1/../nvidia/cu13/include/crt/host_defines.h" ]
}
if ready "$link"; then
  exit 0
fi

mkdir -p .torch
torch_dir=
for venv in .venv ".torch/venv-$version"; do
  for dir in "$venv"/lib/python3*/site-packages/torch; do
    if ready "$dir"; then torch_dir=$dir; fi
  done
done
if [ -z "$torch_dir" ]; then
  python=${PYTHON:-python3}
  if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
    echo "setup: need Python 3 with venv and pip (e.g. apt-get install python3-venv)," >&2
    echo "       or point LIBTORCH at a libtorch $version folder." >&2
    exit 1
  fi
  # PyPI has torch 2.11 to 2.13 for Python 3.10 and newer only: pip would say "no matching
  # distribution", which reads like a network problem.
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "setup: torch==$version needs Python 3.10 or newer; $python is" \
      "$("$python" -c 'import platform; print(platform.python_version())'). Set PYTHON to a" \
      "newer python3 (PYTHON=python3.12 bash setup.sh), or point LIBTORCH at a libtorch" \
      "$version folder." >&2
    exit 1
  fi
  venv=.torch/venv-$version
  site=lib/python3*/site-packages
  # .venv unless it holds another version of torch: one that is this version, or whose install
  # was cut short before pip wrote its version (dist-info), is installed again there.
  if [ "$tch" = "$default" ] && { ! compgen -G ".venv/$site/torch-[0-9]*.dist-info" >/dev/null \
    || compgen -G ".venv/$site/torch-$version.dist-info" >/dev/null; }; then
    venv=.venv
  fi
  repair=
  for dir in "$venv"/$site/torch; do
    # Cut short (no library, or no version file): pip would take it for installed.
    if [ -d "$dir" ] && { [ ! -f "$dir/lib/libtorch_cpu.so" ] || [ ! -f "$dir/version.py" ]; }; then
      repair=--force-reinstall
    fi
  done
  free_kb=$(df -Pk . | awk 'NR == 2 { print $4 }')
  if [ -n "$free_kb" ] && [ "$free_kb" -lt 6000000 ]; then
    echo "setup: torch==$version needs about 6 GB of free disk to install; $PWD has" \
      "$((free_kb / 1048576)) GB free. Free some space and run setup.sh again." >&2
    exit 1
  fi
  echo "setup: installing torch==$version from PyPI into $venv (about 5 GB, a few minutes)"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  # shellcheck disable=SC2086 # $repair: one flag or none
  if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $repair \
    "torch==$version" "$crt"; then
    echo "setup: pip could not install torch==$version. It needs PyPI (the network, or pip's" \
      "index and proxy settings) and about 5 GB free where pip downloads too (\$TMPDIR, and" \
      "~/.cache/pip); fix that and run setup.sh again, or point LIBTORCH at a libtorch" \
      "$version folder." >&2
    exit 1
  fi
  torch_dir=$("$venv/bin/python" -c 'import os, torch; print(os.path.relpath(os.path.dirname(torch.__file__)))')
fi
# A relative link, so that the checkout can move.
target=$torch_dir
case $link in */*) target=../$torch_dir ;; esac
ln -sfn "$target" "$link"
echo "setup: libtorch $version for tch $tch ready at $link -> $torch_dir"
