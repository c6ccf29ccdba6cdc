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
# The collection's own playbooks resolve its roles by their short names.
ansible-playbook -i localhost, sglang.deploy.deploy --syntax-check
