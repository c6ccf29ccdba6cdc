#!/usr/bin/env bash
# Build, once, the offline wheelhouse of a FULL sglang install (torch with CUDA, flashinfer,
# transformers, ... ~200 wheels, ~5 GB) that molecule/real installs into a GPU-less host as a
# GPU host would. It lives outside the clone, keyed by what it holds: the SGLang version, the
# hosts' Python and platform, and the hash of the pinned set
#   ~/.cache/sglang-deploy/wheelhouse-full/sglang-0.5.23-py3.11-linux_x86_64-<hash>/
# A run finds it complete (a `.complete` marker written last) and changes nothing.
# Prints the directory on stdout (progress goes to stderr).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
version="${SGLANG_REAL_VERSION:-0.5.23}"
uv_version="${SGLANG_UV_VERSION:-0.13.9}"
python="${WHEELHOUSE_PYTHON:-python3}"
if [[ -x "$here/.venv/bin/python" && -z "${WHEELHOUSE_PYTHON:-}" ]]; then
  python="$here/.venv/bin/python"
fi

pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
platform=$("$python" -c 'import sysconfig; print(sysconfig.get_platform().replace("-", "_"))')
lock="$here/scripts/wheelhouse-full/sglang-${version}-py${pyver}.txt"
if [[ ! -f "$lock" ]]; then
  echo "no pinned set for sglang ${version} on Python ${pyver}: ${lock#"$here"/} is missing" >&2
  echo "(the wheels must match the hosts' Python: run this with a Python of that version," >&2
  echo " e.g. WHEELHOUSE_PYTHON=python3.11)" >&2
  exit 1
fi
hash=$( (cat "$lock"; echo "uv==${uv_version}") | sha256sum | cut -c1-8)
root="$HOME/.cache/sglang-deploy/wheelhouse-full"
dest="$root/sglang-${version}-py${pyver}-${platform}-${hash}"

# The unhashed name points at the last complete build: what molecule/real mounts.
link() { ln -sfn "$(basename "$dest")" "$root/sglang-${version}-py${pyver}-${platform}"; }

if [[ -f "$dest/.complete" ]]; then
  echo "wheelhouse-full: $dest is complete" >&2
  link
  echo "$dest"
  exit 0
fi

mkdir -p "$root"
partial="$dest.partial"
mkdir -p "$partial"
start=$(date +%s)
echo "wheelhouse-full: sglang ${version} and its dependencies for Python ${pyver} into $dest" >&2
# `pip wheel` takes published wheels as they are and builds the few sdists into wheels, for
# this Python and platform (the hosts': Debian 12, Python 3.11, x86_64). Kept files are
# reused, so an interrupted build resumes. The pinned set is the whole truth: pip's config
# files (a machine's constraints or local find-links) are not read; PIP_CERT still applies.
PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= PIP_CONSTRAINT= "$python" -m pip --disable-pip-version-check -q wheel --no-deps --no-cache-dir \
  -w "$partial" -r "$lock" "uv==${uv_version}" >&2
count=$(find "$partial" -name '*.whl' | wc -l)
expected=$(( $(grep -c '==' "$lock") + 1 ))
if (( count < expected )); then
  echo "wheelhouse-full: $count wheels, expected $expected" >&2
  exit 1
fi
rm -rf "$dest"
mv "$partial" "$dest"
du -sh "$dest" | awk -v n="$count" -v s="$(( $(date +%s) - start ))" \
  '{print "wheelhouse-full: " n " wheels, " $1 ", built in " s " s"}' >&2
touch "$dest/.complete"
link
echo "$dest"
