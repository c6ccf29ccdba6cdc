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

Each filter's documentation (plugins/filter/<name>.yml, what `ansible-doc -t filter` reads) is
written from the filter itself: its docstring, its signature, and the line of a role that uses
it as the example. Nothing else is generated, and nothing rewrites code: the files are copied
as they are.

Prints the tarball's path.
"""

import argparse
import functools
import importlib
import inspect
import re
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
    write_filter_docs(dest / "plugins" / "filter", f"{meta['namespace']}.{meta['name']}")
    return dest


def filters():
    """{name: function} of every filter the collection's source defines."""
    # The filters import the collection's own plugin_utils by their FQCN.
    if str(ROOT / "collections") not in sys.path:
        sys.path.insert(0, str(ROOT / "collections"))
    found = {}
    for path in sorted((SOURCE / "plugins" / "filter").glob("*.py")):
        module = importlib.import_module(f"ansible_collections.sglang.deploy.plugins.filter.{path.stem}")
        found.update(module.FilterModule().filters())
    return found


@functools.lru_cache(maxsize=None)
def _role_files():
    """(path relative to the repo, its lines) of every role task, template and vars file and
    playbook, read once for all the filters' examples."""
    paths = sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/templates/*"),
                    *ROOT.glob("roles/*/vars/*.yml"), *ROOT.glob("playbooks/*.yml")])
    return tuple((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8").splitlines())
                 for path in paths)


def first_use(fqcn):
    """'path:line' and the lines (to the end of the expression) of the first role or playbook
    file that uses filter `fqcn`; (None, []) when none does."""
    pattern = re.compile(re.escape(fqcn) + r"\b")
    for path, lines in _role_files():
        for number, line in enumerate(lines, 1):
            if pattern.search(line):
                use = lines[number - 1:number + 7]
                end = next((i for i, text in enumerate(use) if "}}" in text or "%}" in text),
                           len(use) - 1)
                return f"{path}:{number}", use[:end + 1]
    return None, []


def filter_doc(name, function, collection):
    """The documentation of one filter, from its docstring and signature."""
    text = inspect.getdoc(function) or ""
    if not text:
        raise SystemExit(f"filter {name} has no docstring: write one, it is its documentation")
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
    short = re.split(r"(?<=[.:])\s", paragraphs[0], maxsplit=1)[0].rstrip(":.")
    params = list(inspect.signature(function).parameters.values())
    options = {"_input": {"description": f"C({params[0].name}), the value the filter is applied to.",
                          "type": "raw", "required": True}}
    for param in params[1:]:
        option = {"description": f"C({param.name}), positional argument {len(options)} "
                                 "(see the description).", "type": "raw"}
        if param.default is inspect.Parameter.empty:
            option["required"] = True
        elif param.default is not None:
            default = param.default
            option["default"] = list(default) if isinstance(default, tuple) else default
        options[param.name] = option
    where, lines = first_use(f"{collection}.{name}")
    indent = min((len(text) - len(text.lstrip()) for text in lines), default=0)
    examples = "".join(
        [f"# As the sglang.deploy roles use it ({where}):\n" if where else ""]
        + [f"#   {text[indent:]}\n" for text in lines]) or f"# {{{{ value | {collection}.{name} }}}}\n"
    return {
        "DOCUMENTATION": {
            "name": name,
            "author": ["sglang-deploy maintainers (@sglang-deploy)"],
            "short_description": short,
            "description": paragraphs,
            "positional": ", ".join(["_input"] + [p.name for p in params[1:]]),
            "options": options,
        },
        "EXAMPLES": examples,
        "RETURN": {"_value": {"description": short, "type": "raw"}},
    }


def write_filter_docs(directory, collection):
    for name, function in sorted(filters().items()):
        doc = filter_doc(name, function, collection)
        (directory / f"{name}.yml").write_text(
            yaml.safe_dump(doc, sort_keys=False, width=100, allow_unicode=True), encoding="utf-8")


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
