"""Assemble the sglang.deploy collection from this repository and build its tarball.

    python scripts/build_collection.py [--output dist] [--tree build/collection]

The collection's source lives in this repository, each file once:
- collections/ansible_collections/sglang/deploy/: galaxy.yml, meta/, changelogs/,
  CHANGELOG.rst and plugins/ (filter, module_utils, plugin_utils);
- roles/<role>/library/*.py: the modules (-> plugins/modules/);
- roles/<role>/action_plugins/*.py: action plugins (-> plugins/action/): Ansible loads a
  role's own plugin directories only for roles outside collections;
- roles/ and playbooks/ (deploy.yml joins them), README.md and LICENSE at the top level.
The roles name the filters by FQCN (sglang.deploy.*): Ansible looks a short filter name up
neither in a role's own collection nor in a collection role's filter_plugins/.

Prints the tarball's path. Nothing here rewrites code: the files are copied as they are.
"""

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "collections" / "ansible_collections" / "sglang" / "deploy"
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
# A role's plugin directories -> the collection's plugins/<kind>/.
ROLE_PLUGINS = {"library": "modules", "action_plugins": "action"}


def assemble(tree):
    """Lay the collection out under `tree`/ansible_collections/<ns>/<name>; returns that path."""
    meta = yaml.safe_load((SOURCE / "galaxy.yml").read_text(encoding="utf-8"))
    dest = tree / "ansible_collections" / meta["namespace"] / meta["name"]
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(SOURCE, dest, ignore=shutil.ignore_patterns(
        "__pycache__", "*.pyc", "fragments"))
    for name in ("README.md", "LICENSE"):
        shutil.copy2(ROOT / name, dest / name)
    for role in sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir()):
        shutil.copytree(role, dest / "roles" / role.name, ignore=shutil.ignore_patterns(
            "__pycache__", "*.pyc", *ROLE_PLUGINS))
        for subdir, kind in ROLE_PLUGINS.items():
            target = dest / "plugins" / kind
            target.mkdir(parents=True, exist_ok=True)
            for plugin in sorted((role / subdir).glob("*.py")):
                if (target / plugin.name).exists():
                    sys.exit(f"{plugin.name} is in two roles' {subdir}/")
                shutil.copy2(plugin, target / plugin.name)
    shutil.copytree(ROOT / "playbooks", dest / "playbooks", ignore=IGNORE)
    shutil.copy2(ROOT / "deploy.yml", dest / "playbooks" / "deploy.yml")
    return dest


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(ROOT / "dist"))
    parser.add_argument("--tree", default=str(ROOT / "build" / "collection"))
    args = parser.parse_args()
    dest = assemble(Path(args.tree))
    Path(args.output).mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["ansible-galaxy", "collection", "build", str(dest), "--force",
                          "--output-path", args.output], capture_output=True, text=True,
                         check=False)
    if out.returncode:
        sys.exit(out.stdout + out.stderr)
    print(out.stdout.strip().rsplit(" ", 1)[-1])


if __name__ == "__main__":
    main()
