#!/usr/bin/env bash
# ansible-test sanity on the sglang.deploy collection as built (dist/, `make collection`),
# installed outside this clone: ansible-test wants the collection under
# ansible_collections/<ns>/<name>, and reads a work tree's files from git. Python 3.11 only, in a venv of its own cached outside the clone
# (~/.cache/sglang-deploy/ansible-test-<core>): ansible-core as pinned in requirements.txt plus
# the tools ansible-test asks for (--requirements, from PyPI, into the per-test venvs it keeps
# in ~/.ansible/test/venv; a no-op once there). ansible-test bootstraps pip in those venvs
# with get-pip.py from ci-files.testing.ansible.com, unreachable here: a stand-in at the path
# it caches that script at takes pip from the interpreter's ensurepip, then installs from PyPI.
# Skipped: pslint (no PowerShell) and shellcheck (no shell scripts in the collection).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/sglang-sanity.XXXXXX)
trap 'rm -rf "$work"' EXIT
version=$(python -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["version"])' "$root/galaxy.yml")
ansible-galaxy collection install --force -p "$work" "$root/dist/sglang-deploy-$version.tar.gz" >/dev/null
dest=$work/ansible_collections/sglang/deploy
# The sanity ignore file is the repository's (tests/ is not part of the built collection).
mkdir -p "$dest/tests/sanity" && cp "$root"/tests/sanity/ignore-*.txt "$dest/tests/sanity/"
core=$(sed -n 's/^ansible-core==//p' "$root/requirements.txt")
venv=${SGLANG_DEPLOY_CACHE:-$HOME/.cache/sglang-deploy}/ansible-test-$core
if [ ! -e "$venv/.installed" ]; then
  rm -rf "$venv"
  python3.11 -m venv "$venv"
  "$venv/bin/pip" install --disable-pip-version-check -q "ansible-core==$core"
  touch "$venv/.installed"
fi
pip_version=$(sed -n "s/^ *pip='\\([0-9.]*\\)',\$/\\1/p" \
  "$venv/lib/python3.11/site-packages/ansible_test/_internal/python_requirements.py")
get_pip=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
if [ ! -e "$get_pip" ]; then
  mkdir -p "$(dirname "$get_pip")"
  cat > "$get_pip" <<'PY'
# Stand-in for get-pip.py, written by sglang-deploy's scripts/sanity.sh: pip from ensurepip,
# then the packages asked for, from PyPI (get-pip's own --no-setuptools/--no-wheel dropped).
import subprocess
import sys

# In a child: ensurepip.bootstrap() in-process would switch pip's config off (PIP_CONFIG_FILE),
# and with it the site's certificate and index settings.
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
argv = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + argv))
PY
fi
cd "$dest"
PATH="$venv/bin:$PATH" "$venv/bin/ansible-test" sanity --local --python 3.11 --requirements \
  --skip-test pslint --skip-test shellcheck "$@"
