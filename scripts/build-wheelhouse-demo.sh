#!/usr/bin/env bash
# The demo host's wheelhouse: the full sglang install's wheels (torch with CUDA, transformers,
# ...: scripts/build-wheelhouse-full.sh, cached outside the clone) and the demo's own (the test
# stand-in engine: scripts/build-wheelhouse.sh), hardlinked into one directory that the demo
# container mounts read-only (make demo). Its ml-env then holds SGLang's dependencies, and the
# proof at the workload runs SGLang's own benchmark (python -m sglang.bench_serving) there.
# Links cost no space; a second run changes nothing. Prints the directory.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
full=$(bash "$here/scripts/build-wheelhouse-full.sh")
small="${SGLANG_DEPLOY_WHEELHOUSE:-$here/.cache/wheelhouse}"
dest="$here/.cache/wheelhouse-demo"
mkdir -p "$dest"
# Updated in place, never replaced: the running demo container mounts this directory. A
# hardlink where both sit on one filesystem, else a copy.
for wheel in "$full"/*.whl "$small"/*.whl; do
  target="$dest/$(basename "$wheel")"
  if [[ ! "$target" -ef "$wheel" ]]; then
    ln -f "$wheel" "$target" 2>/dev/null || cp -f "$wheel" "$target"
  fi
done
echo "$dest"
