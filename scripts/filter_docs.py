"""Write each filter's documentation, plugins/filter/<name>.yml, from the filter itself.

    python scripts/filter_docs.py            # write the files
    python scripts/filter_docs.py --check    # fail when one is missing or stale (make check)

A filter file defines several filters, so ansible-doc reads each filter's documentation from
plugins/filter/<name>.yml. That file is written here from one source, the filter's docstring
(the description), its signature (the positional arguments) and the first role or playbook
that uses it (the example), and committed: the repository is the collection as it installs, and
`ansible-doc -t filter sglang.deploy.<name>` works in the clone. A filter without a docstring is
refused, and so is one whose docstring's `Args:` section does not say what each argument is (the
value it is applied to too): each becomes that option's description in ansible-doc.
"""

import argparse
import functools
import importlib
import inspect
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
COLLECTION = "sglang.deploy"


def filters():
    """{name: function} of every filter the collection's source defines."""
    # The filters import the collection's own plugin_utils by their FQCN (collections/ holds
    # the link ansible_collections/sglang/deploy -> this repository).
    if str(ROOT / "collections") not in sys.path:
        sys.path.insert(0, str(ROOT / "collections"))
    found = {}
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        module = importlib.import_module(f"ansible_collections.sglang.deploy.plugins.filter.{path.stem}")
        found.update(module.FilterModule().filters())
    return found


@functools.lru_cache(maxsize=None)
def _role_files():
    """(path relative to the repo, its lines) of every role task, template and vars file and
    playbook, read once for all the filters' examples."""
    paths = sorted([*ROOT.glob("roles/*/tasks/**/*.yml"), *ROOT.glob("roles/*/templates/*"),
                    *ROOT.glob("roles/*/vars/*.yml"), *ROOT.glob("playbooks/*.yml")])
    return tuple((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8").splitlines())
                 for path in paths)


def first_use(fqcn):
    """The path and the lines (to the end of the expression) of the first role or playbook
    file that uses filter `fqcn`; (None, []) when none does."""
    pattern = re.compile(re.escape(fqcn) + r"\b")
    for path, lines in _role_files():
        for number, line in enumerate(lines, 1):
            if pattern.search(line):
                use = lines[number - 1:number + 7]
                end = next((i for i, text in enumerate(use) if "}}" in text or "%}" in text),
                           len(use) - 1)
                return path, use[:end + 1]
    return None, []


def split_args(text):
    """(the docstring without its `Args:` section, {argument: what it is}). The section is a
    paragraph `Args:` whose lines are `    name: text`, continued by lines indented deeper."""
    head, found, rest = text.partition("\nArgs:\n")
    if not found:
        return text, {}
    section, _, tail = rest.partition("\n\n")
    args, name = {}, None
    for line in section.splitlines():
        match = re.match(r"    (\w+): (.*)", line)
        if match:
            name = match.group(1)
            args[name] = match.group(2).strip()
        elif name and line.startswith("     "):
            args[name] += " " + line.strip()
    return (head + ("\n\n" + tail if tail else "")).strip(), args


def filter_doc(name, function, collection):
    """The documentation of one filter, from its docstring and signature."""
    text, said = split_args(inspect.getdoc(function) or "")
    if not text:
        raise SystemExit(f"filter {name} has no docstring: write one, it is its documentation")
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
    short = re.split(r"(?<=[.:])\s", paragraphs[0], maxsplit=1)[0].rstrip(":.")
    params = list(inspect.signature(function).parameters.values())
    unsaid = [p.name for p in params if p.name not in said]
    if unsaid:
        raise SystemExit(f"filter {name}: its docstring's Args: section must say what "
                         f"{', '.join(unsaid)} is")
    options = {"_input": {"description": f"C({params[0].name}), the value the filter is applied "
                                         f"to: {said[params[0].name]}", "type": "raw", "required": True}}
    for param in params[1:]:
        option = {"description": said[param.name], "type": "raw"}
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


def rendered():
    """{path: text} of every filter's documentation file."""
    return {ROOT / "plugins" / "filter" / f"{name}.yml":
            "# Written by scripts/filter_docs.py from the filter's docstring: edit that, not this.\n"
            + yaml.safe_dump(filter_doc(name, function, COLLECTION), sort_keys=False, width=100,
                             allow_unicode=True)
            for name, function in sorted(filters().items())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a file is missing or stale")
    args = parser.parse_args()
    docs = rendered()
    stale = [path for path, text in docs.items()
             if not path.exists() or path.read_text(encoding="utf-8") != text]
    orphans = sorted(set((ROOT / "plugins" / "filter").glob("*.yml")) - set(docs))
    if args.check:
        if stale or orphans:
            names = ", ".join(p.name for p in [*stale, *orphans])
            sys.exit(f"filter docs out of date ({names}): run python scripts/filter_docs.py")
        return
    for path in stale:
        path.write_text(docs[path], encoding="utf-8")
    for path in orphans:
        path.unlink()
    print(f"{len(docs)} filter docs, {len(stale)} written, {len(orphans)} removed")


if __name__ == "__main__":
    main()
