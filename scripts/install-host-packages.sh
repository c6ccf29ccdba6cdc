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
