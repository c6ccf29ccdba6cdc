"""Every filter's documentation is typed and shows a real call (issue 46).

scripts/filter_docs.py writes plugins/filter/<name>.yml from each filter's docstring. Here each
one is held to: a type on every option, on the value it is applied to (`_input`) and on what it
returns (`_value`), `raw` only where the text says which types it takes ("a mapping or a
list"); an example that is a call of it, taken from the file it names among the roles,
playbooks and role templates when any of them calls it (found there, whitespace aside), else
the docstring's hand-made `Example:`, which renders. The check is a function of one filter's
documentation, shown failing on each kind of fault.
"""

import copy
import importlib.util
import inspect
import re
from pathlib import Path

import jinja2
import pytest

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = "sglang.deploy"
TYPES = {"str", "int", "float", "bool", "list", "dict", "path", "raw"}
# Where the roles and playbooks call filters: their YAML, then the role templates.
CALLER_GLOBS = ("roles/**/*.yml", "playbooks/*.yml", "deploy.yml", "roles/*/templates/**/*")
# A raw value's text names the types it takes: "any of ...", or two kinds joined by "or".
_KIND = (r"(?:string|text|number|integer|int|float|boolean|bool|list|mapping|dict|path|null|"
         r"none)s?")
RAW_SAID = re.compile(r"\bany of\b|\b%s\b[^.;:]*?\bor\b[^.;:]*?\b%s\b" % (_KIND, _KIND), re.I)
FROM = re.compile(r"# From (\S+):")
BY_HAND = "# Written by hand (no role or playbook calls this filter):"
# Filters still untyped (a ratchet: type one and take it out of here).
NOT_YET = set()


def _build():
    spec = importlib.util.spec_from_file_location("filter_docs", ROOT / "scripts" / "filter_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILD = _build()
FILTERS = BUILD.filters()


def _caller_texts():
    seen, out = set(), {}
    for pattern in CALLER_GLOBS:
        for path in sorted(ROOT.glob(pattern)):
            if path.is_file() and path not in seen:
                seen.add(path)
                out[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    return out


CALLER_TEXTS = _caller_texts()


def _call(name):
    """A call of the filter: piped, or named to map() and friends."""
    return re.compile(r"(?:\|\s*|[\"'])%s\.%s\b(?![.])" % (re.escape(COLLECTION), name))


def callers(name):
    """The files of the roles and playbooks that call filter `name`."""
    return [path for path, text in CALLER_TEXTS.items() if _call(name).search(text)]


def _squashed(text):
    return "".join(text.split())


def problems(name, doc, called_from, texts):
    """What is wrong with filter `name`'s documentation `doc` (filter_doc's answer), given the
    files that call it and {path: text} of the files that may."""
    found = []
    entries = {f"option {option}": entry
               for option, entry in doc["DOCUMENTATION"]["options"].items()}
    entries["the return value"] = doc["RETURN"]["_value"]
    for what, entry in entries.items():
        if entry.get("type") not in TYPES:
            found.append(f"{what}: type {entry.get('type')!r} is not one of Ansible's")
        elif entry["type"] == "raw" and not RAW_SAID.search(entry.get("description", "")):
            found.append(f"{what} is raw and its text does not say which types it takes (give it "
                         "a type in the docstring, or say e.g. 'a mapping or a list')")
        if entry.get("elements") is not None and (entry["type"] != "list"
                                                  or entry["elements"] not in TYPES):
            found.append(f"{what}: elements {entry['elements']!r} of a {entry['type']}")
    head, _, body = doc["EXAMPLES"].partition("\n")
    lines = body.splitlines()
    if not lines or not all(line.startswith("#") for line in lines):
        found.append("the example is not lines of YAML comments")
    call = "\n".join(line[2:] for line in lines)
    if not _call(name).search(call):
        found.append("no example: its EXAMPLES show no call of it")
    where = FROM.fullmatch(head)
    if called_from:
        if not where:
            found.append(f"its example is not taken from a call ({', '.join(called_from)} call it)")
        elif where.group(1) not in called_from:
            found.append(f"its example names {where.group(1)}, which does not call it")
        elif _squashed(call) not in _squashed(texts[where.group(1)]):
            found.append(f"its example is not found in {where.group(1)}")
    elif head != BY_HAND:
        found.append("no role or playbook calls it and its example is not the docstring's "
                     "Example: (write a minimal call there)")
    return found


def _problems_of(name):
    return problems(name, BUILD.filter_doc(name, FILTERS[name], COLLECTION), callers(name),
                    CALLER_TEXTS)


def test_every_filter_is_typed_and_shows_a_real_call():
    bad = {name: found for name in sorted(set(FILTERS) - NOT_YET) if (found := _problems_of(name))}
    assert len(FILTERS) > 30 and not bad, bad
    not_called = [name for name in FILTERS if not callers(name)]
    assert not not_called, not_called  # every example is a real call


def test_the_filters_left_untyped_are_the_listed_ones():
    """The ratchet: each one listed still falls short, and its docstring is not in a filter file
    (those are all typed)."""
    for name in sorted(NOT_YET):
        source = Path(inspect.getsourcefile(inspect.unwrap(FILTERS[name]))).resolve()
        assert _problems_of(name), f"{name} is typed now: take it out of NOT_YET"
        assert source.parent.name == "plugin_utils", (name, source)


def _env():
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update({f"{COLLECTION}.{name}": function for name, function in FILTERS.items()})
    return env


def test_every_filter_is_called_by_a_role_or_playbook_and_hand_made_examples_render():
    """A filter is the collection's API: one no role or playbook calls is a helper of the
    filter that does (the checks sglang_input_violations runs, the dashboard of the pack, the
    upgrade plan's lines), not a filter of its own. A hand-made example still renders."""
    env = _env()
    hand = {}
    for name, function in sorted(FILTERS.items()):
        doc = BUILD.filter_doc(name, function, COLLECTION)["EXAMPLES"]
        if doc.startswith(BY_HAND):
            hand[name] = "\n".join(line[2:] for line in doc.splitlines()[1:])
    for name, call in hand.items():
        env.from_string(call).render()  # raises on a call the filter refuses
    assert not hand, f"filters no role or playbook calls: {sorted(hand)}"


def _doc(name):
    return copy.deepcopy(BUILD.filter_doc(name, FILTERS[name], COLLECTION))


@pytest.mark.parametrize("fault, expected", [
    ("raw option", "option tolerance is raw and its text does not say"),
    ("untyped input", "option _input: type None"),
    ("raw return", "the return value is raw"),
    ("no example", "no example"),
    ("example from elsewhere", "names roles/sglang/vars/main.yml, which does not call it"),
    ("example not in the file", "is not found in roles/sglang/tasks/proof/bench.yml"),
    ("hand example for a called filter", "its example is not taken from a call"),
    ("elements of a dict", "elements 'str' of a dict"),
])
def test_the_check_fails_on_each_fault(fault, expected):
    doc = _doc("sglang_proof_gate")
    options = doc["DOCUMENTATION"]["options"]
    assert not problems("sglang_proof_gate", doc, callers("sglang_proof_gate"), CALLER_TEXTS)
    if fault == "raw option":
        options["tolerance"]["type"] = "raw"
    elif fault == "untyped input":
        del options["_input"]["type"]
    elif fault == "raw return":
        doc["RETURN"]["_value"]["type"] = "raw"
    elif fault == "no example":
        doc["EXAMPLES"] = "# From roles/sglang/tasks/proof/bench.yml:\n# {{ value }}\n"
    elif fault == "example from elsewhere":
        doc["EXAMPLES"] = doc["EXAMPLES"].replace("roles/sglang/tasks/proof/bench.yml",
                                                  "roles/sglang/vars/main.yml")
    elif fault == "example not in the file":
        doc["EXAMPLES"] = doc["EXAMPLES"].replace("sglang_proof_baseline", "other_baseline")
    elif fault == "hand example for a called filter":
        doc["EXAMPLES"] = BY_HAND + "\n# {{ {} | sglang.deploy.sglang_proof_gate }}\n"
    elif fault == "elements of a dict":
        options["baseline"]["elements"] = "str"
    found = problems("sglang_proof_gate", doc, callers("sglang_proof_gate"), CALLER_TEXTS)
    assert any(expected in line for line in found), found


def test_a_raw_value_that_says_its_types_passes():
    doc = _doc("sglang_tune_score")
    assert doc["DOCUMENTATION"]["options"]["_input"]["type"] == "raw"
    assert not problems("sglang_tune_score", doc, callers("sglang_tune_score"), CALLER_TEXTS)
    doc["DOCUMENTATION"]["options"]["_input"]["description"] = "what the bench measured."
    assert problems("sglang_tune_score", doc, callers("sglang_tune_score"), CALLER_TEXTS)


def test_a_filter_no_role_calls_needs_a_hand_example():
    texts = {"roles/x/tasks/main.yml": "- ansible.builtin.debug:\n    msg: hello\n"}
    doc = _doc("sglang_proof_gate")
    found = problems("sglang_proof_gate", doc, [], texts)
    assert any("its example is not the docstring's Example:" in line for line in found), found


def test_the_docstring_gives_the_types_the_return_and_the_example():
    def sglang_example(workers, port=30000, extra=None):
        """What it does.

        Args:
            workers (list of str): the replicas' URLs,
                at least one.
            port (int): the port.
            extra (raw): a mapping or a list: more.
        Returns:
            list of str: the tokens.
        Example:
            {{ ['http://a:1'] | sglang.deploy.sglang_example(8000) }}
        """

    doc = BUILD.filter_doc("sglang_example", sglang_example, COLLECTION)
    options = doc["DOCUMENTATION"]["options"]
    assert options["_input"] == {
        "description": "C(workers), the value the filter is applied to: the replicas' URLs, at "
                       "least one.", "type": "list", "elements": "str", "required": True}
    assert options["port"] == {"description": "the port.", "type": "int", "default": 30000}
    assert options["extra"]["type"] == "raw"
    assert doc["RETURN"]["_value"] == {"description": "the tokens.", "type": "list",
                                       "elements": "str"}
    assert doc["EXAMPLES"] == (BY_HAND + "\n# {{ ['http://a:1'] | sglang.deploy.sglang_example"
                                         "(8000) }}\n")
    assert doc["DOCUMENTATION"]["description"] == ["What it does."]


@pytest.mark.parametrize("args, returns, message", [
    ("value (mapping): x.", "dict: y.", "type 'mapping' is not one of Ansible's"),
    ("value (dict of str): x.", "dict: y.", "only a list has elements"),
    ("value (dict): x.", "the verdict.", "its Returns: section starts with the type"),
])
def test_a_type_ansible_does_not_know_is_refused(args, returns, message):
    def sglang_example(value):
        pass

    sglang_example.__doc__ = f"What it does.\n\nArgs:\n    {args}\nReturns:\n    {returns}\n"
    with pytest.raises(SystemExit, match=re.escape(message)):
        BUILD.filter_doc("sglang_example", sglang_example, COLLECTION)


def test_the_example_is_the_whole_expression_as_written():
    text = ("- name: Gate\n  vars:\n    gate: >-\n      {{ proof | sglang.deploy.sglang_proof_gate(\n"
            "           base, {'a': {'b': 1}}) }}\n  when: x | sglang.deploy.sglang_proof_gate\n")
    offset = text.index("sglang.deploy.")
    assert BUILD.expression_at(text, offset) == [
        "{{ proof | sglang.deploy.sglang_proof_gate(", "     base, {'a': {'b': 1}}) }}"]
    bare = text.rindex("sglang.deploy.")
    assert BUILD.expression_at(text, bare) == ["when: x | sglang.deploy.sglang_proof_gate"]
