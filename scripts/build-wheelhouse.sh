#!/usr/bin/env bash
# Build the offline wheelhouses that test and demo hosts install from (no index on the host):
# the real sglang wheel (installed there with --no-deps), the test stand-in engine, PyYAML and
# uv (the role's installer);
# and, in a second directory, sglang-router with its dependencies (the router host's venv).
# Files already present are kept, so a second run changes nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
dest="${1:-${SGLANG_DEPLOY_WHEELHOUSE:-$here/.cache/wheelhouse}}"
# Space-separated: the pin the demo deploys, plus any other version a test scenario installs.
sglang_versions="${SGLANG_VERSIONS:-0.5.23}"
# The hosts' Python (Debian 12 containers: 3.11), not necessarily the controller's.
host_python="${WHEELHOUSE_PYTHON_VERSION:-3.11}"
pip=(python3 -m pip --disable-pip-version-check -q)
if [[ -x "$here/.venv/bin/python" ]]; then
  pip=("$here/.venv/bin/python" -m pip --disable-pip-version-check -q)
fi

mkdir -p "$dest"

for sglang_version in $sglang_versions; do
  if ! compgen -G "$dest/sglang-${sglang_version}-*.whl" >/dev/null; then
    echo "wheelhouse: sglang ${sglang_version}"
    "${pip[@]}" download --no-deps --only-binary=:all: --python-version "$host_python" \
      -d "$dest" "sglang==${sglang_version}"
  fi
done

# uv, the role's default installer (installed with pip into its own venv on the host).
uv_version="${SGLANG_UV_VERSION:-0.13.9}"
if ! compgen -G "$dest/uv-${uv_version}-*.whl" >/dev/null; then
  echo "wheelhouse: uv ${uv_version}"
  "${pip[@]}" download --no-deps --only-binary=:all: --python-version "$host_python" \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$dest" "uv==${uv_version}"
fi

if ! compgen -G "$dest/[Pp][Yy][Yy][Aa][Mm][Ll]-*.whl" >/dev/null; then
  echo "wheelhouse: pyyaml"
  "${pip[@]}" download --no-deps --only-binary=:all: --python-version "$host_python" \
    -d "$dest" "pyyaml==6.0.2"
fi

# prometheus_client: the stand-in's /metrics on hosts whose env has SGLang's sources only (the
# version SGLang 0.5.23's full install resolves).
if ! compgen -G "$dest/prometheus_client-0.26.0-*.whl" >/dev/null; then
  echo "wheelhouse: prometheus-client"
  "${pip[@]}" download --no-deps --only-binary=:all: --python-version "$host_python" \
    -d "$dest" "prometheus-client==0.26.0"
fi

# Rebuilt when its sources or its version (pyproject.toml) are newer than the wheel.
standin=("$dest"/sglang_standin-*.whl)
if [[ ! -e "${standin[0]}" ]] || [[ -n "$(find "$here/tests/standin" -newer "${standin[0]}" -type f \
      \( -name '*.py' -o -name pyproject.toml \) -print -quit)" ]]; then
  echo "wheelhouse: sglang-standin (tests/standin)"
  rm -f "$dest"/sglang_standin-*.whl
  build=$(mktemp -d)
  cp -r "$here/tests/standin/." "$build/"
  "${pip[@]}" wheel --no-deps -w "$dest" "$build"
  rm -rf "$build"
fi

# The router: its own directory, so that replicas do not receive its wheels.
router_dest="${SGLANG_DEPLOY_ROUTER_WHEELHOUSE:-$here/.cache/wheelhouse-router}"
router_version="${SGLANG_ROUTER_VERSION:-0.3.2}"
if ! compgen -G "$router_dest/sglang_router-${router_version}-*.whl" >/dev/null; then
  echo "wheelhouse: sglang-router ${router_version} and its dependencies"
  mkdir -p "$router_dest"
  "${pip[@]}" download --only-binary=:all: --python-version "$host_python" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform linux_x86_64 \
    -d "$router_dest" "sglang-router==${router_version}"
fi

ls -1 "$dest" "$router_dest"
