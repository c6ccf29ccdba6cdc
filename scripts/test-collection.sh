#!/usr/bin/env bash
# Install the built collection like a consumer does and run a consumer playbook outside this
# clone: the FQCN role, a module and a filter; a syntax check, then a check-mode run against
# localhost. Usage: scripts/test-collection.sh dist/sglang-deploy-<version>.tar.gz
set -euo pipefail
tarball=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/sglang-consumer.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r "$root/tests/collection/consumer/." "$work/"
cd "$work"
unset ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH ANSIBLE_COLLECTIONS_PATHS ANSIBLE_FILTER_PLUGINS \
  ANSIBLE_LIBRARY ANSIBLE_MODULE_UTILS ANSIBLE_ROLES_PATH
sed -i "s|@TARBALL@|$tarball|" requirements.yml
ansible-galaxy collection install -r requirements.yml -p ./collections >/dev/null
ansible-galaxy collection list sglang.deploy -p ./collections 2>/dev/null | grep -E '^sglang\.deploy '
# Every module's documentation renders by FQCN from the installed collection (one call).
modules=(./collections/ansible_collections/sglang/deploy/plugins/modules/*.py)
names=()
for module in "${modules[@]}"; do names+=("sglang.deploy.$(basename "$module" .py)"); done
ansible-doc "${names[@]}" >/dev/null
echo "ansible-doc: ${#names[@]} modules render by FQCN"
# And every filter's (plugins/filter/<name>.yml, written by the build from its docstring).
mapfile -t filters < <(ansible-doc -t filter -l sglang.deploy | awk '{print $1}')
undocumented=$(ansible-doc -t filter -l sglang.deploy | grep -c UNDOCUMENTED || true)
[ "$undocumented" -eq 0 ] || { echo "filters without documentation: $undocumented" >&2; exit 1; }
ansible-doc -t filter "${filters[@]}" >/dev/null
echo "ansible-doc: ${#filters[@]} filters render by FQCN"
ansible-playbook -i localhost, site.yml --syntax-check
ansible-playbook -i localhost, site.yml --check
# Every public entry point of the three roles by FQCN, in check mode, each against a host
# nothing can reach: the part that runs on the controller runs (argument spec, input checks,
# rendering, the filters they call), the first task that needs the host ends it as unreachable.
ANSIBLE_STDOUT_CALLBACK=ansible.builtin.json ansible-playbook -i inventory.yml entry_points.yml \
  --check >entry_points.json 2>entry_points.err || true
python3 - entry_points.json <<'CHECK'
import json, sys
report = json.load(open(sys.argv[1]))
# What each host must end as: the render step needs no host; the tuner refuses check mode
# before it needs one; every other entry point is cut at its first task on the host.
expected = {"ep_sglang_step": "ok", "ep_tune_main": "refused"}
messages = {host: result.get("msg", "") for play in report["plays"] for task in play["tasks"]
            for host, result in task["hosts"].items() if result.get("failed")}
bad = []
for host, stats in sorted(report["stats"].items()):
    if host == "anchor":
        continue
    outcome = ("unreachable" if stats["unreachable"] and not stats["failures"]
               else "refused" if stats["failures"] and "cannot run with --check" in messages.get(host, "")
               else "ok" if not stats["unreachable"] and not stats["failures"] else "FAILED")
    want = expected.get(host, "unreachable")
    print(f"{host:24s} {stats['ok']:3d} tasks ok on the controller, then {outcome}")
    if outcome != want:
        bad.append(f"{host}: {outcome}, expected {want}: {messages.get(host, '')[:300]}")
if len(report["stats"]) != 13 or bad:
    sys.exit(f"entry points: {len(report['stats']) - 1} of 12 ran; " + "; ".join(bad))
CHECK
# The collection's own playbooks resolve its roles by their short names.
ansible-playbook -i localhost, sglang.deploy.deploy --syntax-check
