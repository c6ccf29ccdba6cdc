#!/usr/bin/env bash
# Build (once) a venv holding the full `sglang==VERSION` with all its dependencies, CUDA wheels
# included (they install without a GPU), for preflight what-ifs and the tests that ask real
# SGLang releases what they resolve. Prints the venv's path.
#
#   scripts/build-sglang-venv.sh 0.5.23        # ~10 GB of wheels in uv's cache, ~40 s here
#
# Cached outside the clone, keyed by what it holds (version, Python, the pins below):
# $SGLANG_DEPLOY_CACHE (default ~/.cache/sglang-deploy)/full-venvs/<version>-py<X.Y>-<hash>.
# uv links each venv from its cache, so a second venv of the same release costs seconds.
set -euo pipefail

version="${1:?usage: build-sglang-venv.sh VERSION}"
here=$(cd "$(dirname "$0")/.." && pwd)
cache="${SGLANG_DEPLOY_CACHE:-$HOME/.cache/sglang-deploy}"
python="${SGLANG_VENV_PYTHON:-python3.11}"
uv="${UV:-$(command -v uv || echo "$here/.venv/bin/uv")}"
pins="$here/scripts/sglang-venv-pins/$version.txt"

pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# Bytecode compiled at build: nothing imported from it writes .pyc (PYTHONDONTWRITEBYTECODE in
# the Makefile, a read-only env under a unit), and without them every import compiles again.
key=$( { echo "sglang==$version python$pyver bytecode"; cat "$pins" 2>/dev/null || true; } | sha256sum | cut -c1-12)
venv="$cache/full-venvs/$version-py$pyver-$key"

if [[ -f "$venv/.complete" ]]; then
  echo "$venv"
  exit 0
fi
mkdir -p "$cache/full-venvs"
rm -rf "$venv"
"$uv" venv --quiet --python "$python" "$venv" >&2
requirements=("sglang==$version")
if [[ -f "$pins" ]]; then
  requirements+=(-r "$pins")
fi
start=$(date +%s)
VIRTUAL_ENV="$venv" "$uv" pip install --quiet --compile-bytecode "${requirements[@]}" >&2
echo "built $venv in $(( $(date +%s) - start )) s" >&2
touch "$venv/.complete"
echo "$venv"
