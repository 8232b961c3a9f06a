#!/usr/bin/env bash
# Idempotent setup: system packages and a Python with torch==2.11.0.
# Prints nothing but progress; writes the chosen Python to $MEGAFOLD_CACHE/python.
# - Debian packages are installed only when a header or tool is missing (a GPU host
#   without network can bring headers in MEGAFOLD_DEPS_PREFIX instead).
# - An importable torch is used as is (e.g. the GPU image's); otherwise a virtual
#   environment under the user's cache directory gets torch==2.11.0, so fresh
#   clones and CI reuse it.
set -euo pipefail

TORCH_VERSION=2.11.0
CACHE="${MEGAFOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/megafold}"
mkdir -p "$CACHE"

have_header() {  # have_header <relative path>: in the system or in MEGAFOLD_DEPS_PREFIX
  [ -f "/usr/include/$1" ] || { [ -n "${MEGAFOLD_DEPS_PREFIX:-}" ] && [ -f "$MEGAFOLD_DEPS_PREFIX/include/$1" ]; }
}

missing=()
have_header gemmi/mmread.hpp      || missing+=(gemmi-dev)
have_header tao/pegtl.hpp         || missing+=(tao-pegtl-dev)
have_header zlib.h                || missing+=(zlib1g-dev)
have_header nlohmann/json.hpp     || missing+=(nlohmann-json3-dev)
have_header gtest/gtest.h         || missing+=(libgtest-dev)
have_header gloo/algorithm.h      || missing+=(libgloo-dev)  # torch's wheel has c10d's Gloo backend, not gloo's headers
have_header rdkit/GraphMol/GraphMol.h || missing+=(librdkit-dev)  # SMILES ligands (the RDKit plugin)
have_header boost/config.hpp      || missing+=(libboost-dev)  # RDKit's headers include Boost's
command -v cmake  >/dev/null      || missing+=(cmake)
command -v g++    >/dev/null      || missing+=(g++)
command -v ccache >/dev/null      || missing+=(ccache)
command -v ninja  >/dev/null      || missing+=(ninja-build)
command -v python3 >/dev/null     || missing+=(python3)
# A venv for torch needs ensurepip (Debian ships it separately as python3-venv).
if command -v python3 >/dev/null && ! python3 -c "import torch" >/dev/null 2>&1 &&
   ! python3 -c "import venv, ensurepip" >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
if [ ${#missing[@]} -gt 0 ] && [ -n "${MEGAFOLD_DEPS_PREFIX:-}" ]; then
  # An offline host brings its dependencies in MEGAFOLD_DEPS_PREFIX; tools it lacks (ccache)
  # only cost speed.
  echo "setup: offline host (MEGAFOLD_DEPS_PREFIX set); not installing: ${missing[*]}"
elif [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python with torch: an existing one wins, else our own venv.
py=""
for cand in "${MEGAFOLD_PYTHON:-}" python3 "$CACHE/venv/bin/python"; do
  [ -n "$cand" ] || continue
  if "$cand" -c "import torch" >/dev/null 2>&1; then py="$cand"; break; fi
done
if [ -z "$py" ]; then
  echo "setup: no importable torch; creating $CACHE/venv with torch==$TORCH_VERSION (one-time, several GB)"
  python3 -m venv "$CACHE/venv"
  "$CACHE/venv/bin/pip" install -q --upgrade pip
  "$CACHE/venv/bin/pip" install -q "torch==$TORCH_VERSION" numpy pytest safetensors matplotlib scikit-build-core
  py="$CACHE/venv/bin/python"
fi
# pytest runs the Python-side tests (safetensors: the exported weights load in PyTorch;
# matplotlib: megafold.metrics.plot; scikit-build-core: `pip install .` of the package);
# installed next to torch when absent.
if ! "$py" -c "import pytest, numpy, safetensors, matplotlib, scikit_build_core" >/dev/null 2>&1; then
  if [ -n "${MEGAFOLD_DEPS_PREFIX:-}" ]; then
    echo "setup: offline host (MEGAFOLD_DEPS_PREFIX set); not installing the Python test packages"
  else
    "$py" -m pip install -q pytest numpy safetensors matplotlib scikit-build-core
  fi
fi
command -v "$py" >/dev/null 2>&1 && py="$(command -v "$py")"
echo "$py" > "$CACHE/python"

# The wwPDB Chemical Component Dictionary as the binary table the loader maps (data/ccd.h):
# ligands, ions and non-standard residues take their atoms and reference conformers from it.
# Built once from the CCD in biotite's wheel (a 63 MB file; CC0).
ccd="$CACHE/ccd/components.mfccd"
if [ ! -s "$ccd" ]; then
  if ! "$py" -c "import biotite" >/dev/null 2>&1; then
    if [ -n "${MEGAFOLD_DEPS_PREFIX:-}" ]; then
      echo "setup: offline host without biotite; no CCD table (ligands are skipped; set MEGAFOLD_CCD to bring one)"
    else
      "$py" -m pip install -q "biotite==1.6.0"
    fi
  fi
  if "$py" -c "import biotite" >/dev/null 2>&1; then
    "$py" "$(dirname "$0")/../data/reference/make_ccd.py" "$ccd"
  fi
fi
echo "setup: python $("$py" -c 'import sys,torch;print(sys.version.split()[0], "torch", torch.__version__)') at $py"
