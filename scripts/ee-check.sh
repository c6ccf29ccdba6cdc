#!/usr/bin/env bash
# `make ee`: the execution environment's definition (execution-environment.yml) as
# ansible-builder reads it. `ansible-builder create` writes the build context (Containerfile,
# the collection tarball, the pip and bindep lists) into a temporary directory, with no container
# engine; the image itself is built where one runs (docs/awx.md). ansible-builder, pinned here,
# lives in a venv of its own cached outside the clone, keyed by its version
# (~/.cache/sglang-deploy/ansible-builder-<version>). Needs the tarball `make collection` built.
set -euo pipefail
ANSIBLE_BUILDER_VERSION=3.2.0
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${SGLANG_DEPLOY_CACHE:-$HOME/.cache/sglang-deploy}/ansible-builder-$ANSIBLE_BUILDER_VERSION
if [ ! -e "$venv/.installed" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --disable-pip-version-check -q "ansible-builder==$ANSIBLE_BUILDER_VERSION"
  touch "$venv/.installed"
fi
work=$(mktemp -d /tmp/sglang-ee.XXXXXX)
trap 'rm -rf "$work"' EXIT
version=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["version"])' "$root/galaxy.yml")
tarball=sglang-deploy-$version.tar.gz
echo "ansible-builder $("$venv/bin/ansible-builder" --version) create --file execution-environment.yml --context $work/context --output-filename Containerfile"
# From the root: the definition names the tarball relative to itself (dist/), and ansible-builder
# writes nothing but the context; its file is a Containerfile whichever engines the host has
# (ansible-builder names it after the runtime it finds: a Dockerfile where only docker runs).
cd "$root"
"$venv/bin/ansible-builder" create --file execution-environment.yml --context "$work/context" \
  --output-filename Containerfile 2>&1 \
  | tee "$work/create.log"
# ansible-builder only warns when a file to copy is missing: a definition naming another
# version than galaxy.yml's, or no `make collection` first, must fail here.
if grep -q "No matches" "$work/create.log" || [ ! -s "$work/context/_build/collections/$tarball" ]; then
  echo "FAILED: the build context lacks collections/$tarball (galaxy.yml's version; make collection)" >&2
  exit 1
fi
grep -q "^FROM " "$work/context/Containerfile"
grep -qx "name: collections/$tarball" <(sed -n 's/^ *- *//p' "$work/context/_build/requirements.yml")
echo "build context: $(cd "$work/context" && find . -type f | sort | tr '\n' ' ')"
