"""Write each filter's documentation, plugins/filter/<name>.yml, from the filter itself.

    python scripts/filter_docs.py            # write the files
    python scripts/filter_docs.py --check    # fail when one is missing or stale (make check)

A filter file defines several filters, so ansible-doc reads each filter's documentation from
plugins/filter/<name>.yml. That file is written here from one source, the filter's docstring
(the description, the types, the return value), its signature (the positional arguments) and a
call of it in the roles and playbooks (the example), and committed: the repository is the
collection as it installs, and `ansible-doc -t filter sglang.deploy.<name>` works in the clone.

The docstring's sections, Google style:

    Args:
        proof (dict): what sglang_serving_bench returned.        one line per argument, the
        tolerance (float): the fraction ...                       value it is applied to too
        workers (list of str): the replicas' URLs ...             (continued further indented)
    Returns:
        dict: {ok, failures, warnings}: the verdict.             its type, then what it is
    Example:
        {{ '::1' | sglang.deploy.sglang_connect_host }}

The type is one of Ansible's (str, int, float, bool, list, dict, path, raw; `list of <type>`
gives the elements' too); `raw` is for a value of several types, and the text says which. The
example is a call in roles/**/*.yml, playbooks/*.yml, deploy.yml or the role templates: the
shortest whole Jinja expression that calls it (the first of those as short), as written, with the
file it is from. `Example:` is for a filter no role or playbook calls (only Python or the tests
do). A filter without a docstring is refused, and so is one whose `Args:` section does not say
what each argument is, one with a type Ansible does not know, and one whose `Returns:` does not
start with its type. tests/unit/test_filter_docs.py holds every filter to a type per option, a
reason for each raw one, and an example found where it says.
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
# Ansible's documentation types, and the files the roles and playbooks call filters from, in the
# order their calls are listed (the YAML first, the role templates last).
TYPES = ("str", "int", "float", "bool", "list", "dict", "path", "raw")
TYPE_SPEC = re.compile(r"(%s)(?: of (%s))?" % ("|".join(TYPES), "|".join(TYPES)))
CALLERS = ("roles/**/*.yml", "playbooks/*.yml", "deploy.yml", "roles/*/templates/**/*")
SECTIONS = ("Args:", "Returns:", "Example:")
FROM = "# From {path}:\n"
BY_HAND = "# Written by hand (no role or playbook calls this filter):\n"
NO_EXAMPLE = "# No example: no role or playbook calls it and its docstring has no Example: section.\n"


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
def caller_files():
    """(path relative to the repo, its text) of every file that may call a filter, in the order
    CALLERS gives, each read once for all the filters' examples."""
    seen, out = set(), []
    for pattern in CALLERS:
        for path in sorted(ROOT.glob(pattern)):
            if path.is_file() and path not in seen:
                seen.add(path)
                out.append((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")))
    return tuple(out)


def call_pattern(fqcn):
    """A call of filter `fqcn`: piped (`| fqcn`, `| fqcn(`), or named to map() and friends."""
    return re.compile(r"(?:\|\s*|[\"'])" + re.escape(fqcn) + r"\b(?![.])")


def _close(text, start):
    """The end of the Jinja expression or statement opened at `start` ({{ or {%), past its
    closing }} or %} at bracket depth 0 outside strings; None when it does not close."""
    close = "}}" if text.startswith("{{", start) else "%}"
    depth, quote, i = 0, None, start + 2
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif depth == 0 and text.startswith(close, i):
            return i + 2
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        i += 1
    return None


def expression_at(text, offset):
    """The lines of the whole Jinja expression around the call at `offset`, as written, its
    continuation lines shifted left by the column it opens at; a bare expression (a `when:` or
    `that:` line) is its line, stripped."""
    start = max(text.rfind("{{", 0, offset), text.rfind("{%", 0, offset))
    end = _close(text, start) if start >= 0 else None
    if end is None or end <= offset:
        line_start = text.rfind("\n", 0, offset) + 1
        line_end = text.find("\n", offset)
        return [text[line_start:None if line_end < 0 else line_end].strip()]
    column = start - (text.rfind("\n", 0, start) + 1)
    first, *rest = text[start:end].split("\n")
    # Continuation lines keep their place under the opening; ones written left of it (a
    # double-quoted YAML scalar folds them) go under the expression, past the `{{ `.
    shift = min([column] + [len(line) - len(line.lstrip(" ")) for line in rest if line.strip()])
    pad = "" if shift == column else "   "
    return [first.rstrip(), *((pad + line[shift:]).rstrip() for line in rest)]


def calls(fqcn):
    """[(path, lines of the expression)] of every call of filter `fqcn` in the roles,
    playbooks and role templates, in file order."""
    pattern = call_pattern(fqcn)
    return [(path, expression_at(text, match.start()))
            for path, text in caller_files() for match in pattern.finditer(text)]


def example_call(fqcn):
    """(path, lines) of the call the example shows: the shortest whole Jinja expression that
    calls filter `fqcn` (the first of those as short), else the first bare one (a `when:`);
    (None, []) when none calls it."""
    found = calls(fqcn)
    if not found:
        return None, []
    braced = [call for call in found if call[1][0].startswith(("{{", "{%"))]
    return min(braced or found, key=lambda call: len(" ".join(" ".join(call[1]).split())))


def sections(text):
    """(the docstring's description, {section: its lines, dedented}) for Args:, Returns: and
    Example:. A section is its header line and the lines indented under it (blank lines inside
    too); the first line back at the margin resumes the description."""
    description, found, current = [], {}, None
    for line in text.splitlines():
        if line.strip() in SECTIONS and not line.startswith(" "):
            current = found.setdefault(line.strip().rstrip(":"), [])
        elif current is not None and (line.startswith(" ") or not line.strip()):
            current.append(line)
        else:
            current = None
            description.append(line)
    for name, lines in found.items():
        while lines and not lines[-1].strip():
            lines.pop()
        found[name] = [line[4:] if line.startswith("    ") else line.strip() for line in lines]
    return "\n".join(description).strip(), found


def type_of(spec, where):
    """{type, elements?} of a docstring type (`dict`, `list of str`); refused when Ansible
    has no such type."""
    match = TYPE_SPEC.fullmatch(spec.strip())
    if not match:
        raise SystemExit(f"{where}: type {spec!r} is not one of Ansible's ({', '.join(TYPES)}, "
                         "list of <type>)")
    if match.group(2) and match.group(1) != "list":
        raise SystemExit(f"{where}: only a list has elements ({spec!r})")
    return {"type": match.group(1), **({"elements": match.group(2)} if match.group(2) else {})}


def split_args(text):
    """(the docstring without its sections, {argument: (its type or None, what it is)}). The
    Args: lines are `name (type): text` or `name: text`, continued by lines indented deeper."""
    description, found = sections(text)
    args, name = {}, None
    for line in found.get("Args", []):
        match = re.match(r"(\w+)(?: \(([^)]*)\))?: (.*)", line)
        if match:
            name = match.group(1)
            args[name] = [match.group(2), match.group(3).strip()]
        elif name and line.startswith(" "):
            args[name][1] += " " + line.strip()
    return description, {name: tuple(said) for name, said in args.items()}


def _typed(name, spec, where):
    return type_of(spec, f"filter {name}: {where}") if spec else {"type": "raw"}


def returns(name, found, short):
    """The RETURN entry: the type and text of the docstring's Returns: section (its first line
    `type: text`, continued below), else raw and the short description."""
    lines = found.get("Returns")
    if not lines:
        return {"description": short, "type": "raw"}
    spec, colon, text = lines[0].partition(": ")
    if not colon and TYPE_SPEC.fullmatch(lines[0].rstrip(":")):
        spec, text = lines[0].rstrip(":"), ""
    if not TYPE_SPEC.fullmatch(spec.strip()):
        raise SystemExit(f"filter {name}: its Returns: section starts with the type, e.g. "
                         f"`dict: what it is`, not {lines[0]!r}")
    text = " ".join([text.strip(), *(line.strip() for line in lines[1:])]).strip()
    return {"description": text or short, **_typed(name, spec, "Returns")}


def examples(name, found, collection):
    """The EXAMPLES text: a call in the roles and playbooks (example_call), else the docstring's
    Example:, as YAML comments."""
    where, lines = example_call(f"{collection}.{name}")
    head = FROM.format(path=where) if where else BY_HAND
    lines = lines or found.get("Example") or []
    if not lines:
        return NO_EXAMPLE + f"# {{{{ value | {collection}.{name} }}}}\n"
    return head + "".join(f"# {line}".rstrip() + "\n" for line in lines)


def filter_doc(name, function, collection):
    """The documentation of one filter, from its docstring and signature."""
    doc = inspect.getdoc(function) or ""
    text, said = split_args(doc)
    if not text:
        raise SystemExit(f"filter {name} has no docstring: write one, it is its documentation")
    found = sections(doc)[1]
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
    short = re.split(r"(?<=[.:])\s", paragraphs[0], maxsplit=1)[0].rstrip(":.")
    params = list(inspect.signature(function).parameters.values())
    unsaid = [p.name for p in params if p.name not in said]
    if unsaid:
        raise SystemExit(f"filter {name}: its docstring's Args: section must say what "
                         f"{', '.join(unsaid)} is")
    spec, what = said[params[0].name]
    options = {"_input": {"description": f"C({params[0].name}), the value the filter is applied "
                                         f"to: {what}", **_typed(name, spec, params[0].name),
                          "required": True}}
    for param in params[1:]:
        spec, what = said[param.name]
        option = {"description": what, **_typed(name, spec, param.name)}
        if param.default is inspect.Parameter.empty:
            option["required"] = True
        elif param.default is not None:
            default = param.default
            option["default"] = list(default) if isinstance(default, tuple) else default
        options[param.name] = option
    return {
        "DOCUMENTATION": {
            "name": name,
            "author": ["sglang-deploy maintainers (@sglang-deploy)"],
            "short_description": short,
            "description": paragraphs,
            "positional": ", ".join(["_input"] + [p.name for p in params[1:]]),
            "options": options,
        },
        "EXAMPLES": examples(name, found, collection),
        "RETURN": {"_value": returns(name, found, short)},
    }


class _Dumper(yaml.SafeDumper):
    """safe_dump that writes EXAMPLES, lines of YAML comments, as a literal block."""


_Dumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if text.startswith("#") and "\n" in text else None))


def rendered():
    """{path: text} of every filter's documentation file."""
    return {ROOT / "plugins" / "filter" / f"{name}.yml":
            "# Written by scripts/filter_docs.py from the filter's docstring: edit that, not this.\n"
            + yaml.dump(filter_doc(name, function, COLLECTION), Dumper=_Dumper, sort_keys=False,
                        width=100, allow_unicode=True)
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
