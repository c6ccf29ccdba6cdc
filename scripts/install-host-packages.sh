#!/usr/bin/env bash
# System packages the tests and the demo need: podman (+ runc: crun fails on some cgroup
# setups) to run systemd containers, debootstrap to build their image locally, python3-venv.
set -euo pipefail
need=()
for cmd in podman:podman runc:runc debootstrap:debootstrap; do
  command -v "${cmd%%:*}" >/dev/null 2>&1 || need+=("${cmd##*:}")
done
python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
if ((${#need[@]})); then
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  echo "installing: ${need[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${need[@]}" >/dev/null
fi

# promtool for the alert rules' unit tests (tests/unit/test_alert_rules.py, in make check as in
# make test): Debian's prometheus package, unpacked (not installed: no service is set up) into a
# cache outside the clone, keyed by the package's version.
cache="${SGLANG_DEPLOY_CACHE:-$HOME/.cache/sglang-deploy}/promtool"
version=$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')
if [[ -z "$version" || "$version" == "(none)" ]]; then
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  version=$(apt-cache policy prometheus | awk '/Candidate:/ {print $2}')
fi
dest="$cache/${version//[^A-Za-z0-9.+-]/_}"
if [[ ! -x "$dest/promtool" ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && apt-get download -qq "prometheus=$version" 2>/dev/null)
  dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
  mkdir -p "$dest"
  install -m 0755 "$work/root/usr/bin/promtool" "$dest/promtool.new"
  mv "$dest/promtool.new" "$dest/promtool"
  echo "promtool $version in $dest"
fi
