#!/usr/bin/env bash
# Build the Debian 12 systemd image that molecule and the demo run as a "GPU host" without a GPU.
# No container registry is reachable here, so the image is made with debootstrap from the same
# Debian mirror apt uses, then imported into podman. Skipped when the image already exists.
set -euo pipefail

image="${SGLANG_TEST_IMAGE:-localhost/sglang-deploy-host:bookworm}"
# dbus: systemd-run (preflight's sandboxed resolution) talks to systemd over the bus, as on
# any server install.
# prometheus (with promtool) and prometheus-node-exporter: the monitoring pack's real readers
# (molecule default); installed disabled, a scenario starts them.
packages=systemd,systemd-sysv,dbus,python3,python3-venv,python3-pip,sudo,iproute2,procps,ca-certificates,curl,prometheus,prometheus-node-exporter
# The image is rebuilt when what it holds changes (the label carries this script's hash).
recipe=$(sha256sum "$0" | cut -c1-12)

if podman image exists "$image" && [[ "$(podman image inspect --format '{{ index .Config.Labels "sglang-deploy.recipe" }}' "$image")" == "$recipe" ]]; then
  echo "image $image exists, not rebuilding"
  exit 0
fi

mirror="${DEBIAN_MIRROR:-}"
if [[ -z "$mirror" ]]; then
  # The mirror this machine's apt already uses (never a hard-coded host).
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
fi
if [[ -z "$mirror" ]]; then
  mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
fi
if [[ -z "$mirror" ]]; then
  echo "cannot find a Debian mirror: set DEBIAN_MIRROR" >&2
  exit 1
fi

rootfs=$(mktemp -d /var/tmp/sglang-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT

echo "debootstrap bookworm from $mirror"
debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" "$mirror" >/dev/null

# Trust the same CAs as this machine (a TLS-intercepting proxy's CA lives here on some networks).
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
  chroot "$rootfs" update-ca-certificates >/dev/null
fi

# A container has no consoles to log in on; Prometheus and node_exporter start only where a
# scenario asks for them.
rm -f "$rootfs"/etc/systemd/system/getty.target.wants/* || true
rm -f "$rootfs"/etc/systemd/system/multi-user.target.wants/prometheus*.service \
  "$rootfs"/etc/systemd/system/timers.target.wants/prometheus-node-exporter-* || true
apt_clean_dirs=("$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*_Packages)
rm -f "${apt_clean_dirs[@]}" || true

tar -C "$rootfs" -c . | podman import --change 'CMD=["/sbin/init"]' \
  --change "LABEL sglang-deploy.recipe=$recipe" - "$image" >/dev/null
echo "built $image"
