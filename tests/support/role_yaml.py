"""The roles' and playbooks' YAML as the layout and data-flow tests read it: every string, every
task (with the tags of the blocks around it), the facts a task sets and who sets each."""

import re

import yaml

from support import ROOT

NESTED = ("block", "rescue", "always")


def strings(node):
    """Every string in a loaded YAML document, keys too."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from strings(key)
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def walk(tasks, inherited=()):
    """Yields (task, tags inherited from the blocks around it plus its own), blocks' tasks too."""
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        tags = tuple(inherited) + tuple(task.get("tags") or ())
        yield task, tags
        for key in NESTED:
            yield from walk(task.get(key), tags)


def set_names(task):
    """The facts a task sets: set_fact's names, its register."""
    facts = task.get("ansible.builtin.set_fact")
    names = {name for name in facts if name != "cacheable"} if isinstance(facts, dict) else set()
    return names | ({task["register"]} if "register" in task else set())


def tasks_of(path):
    """Every task of a role's task file, or of a playbook's plays (their `tasks`)."""
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    if path.parent.name == "tasks" or "tasks" in path.parent.parts[-3:-1]:
        return list(walk(document))
    return [item for play in document for item in walk(play.get("tasks"))]


def fact_writers(paths):
    """{fact: the files among `paths` that set it (set_fact, register)}."""
    writers = {}
    for path in paths:
        for task, _tags in tasks_of(path):
            for name in set_names(task):
                writers.setdefault(name, set()).add(path.relative_to(ROOT).as_posix())
    return writers


FACT = re.compile(r"\b__sglang_\w+")
# A template a task renders: its reads are the task's (lookup('ansible.builtin.template', 'x')).
TEMPLATE = re.compile(r"lookup\('ansible\.builtin\.template',\s*'([^']+)'")


def facts_in(text, role):
    """The internal facts `text` names, with those of the role's templates it renders."""
    names = set(FACT.findall(text))
    for name in TEMPLATE.findall(text):
        names |= set(FACT.findall((role / "templates" / name).read_text(encoding="utf-8")))
    return names


def facts_of(path):
    """(read, set): the internal facts a task file uses (in its tasks and the templates they
    render) that none of its tasks sets, and those it sets (set_fact, register). Names a task
    passes in `vars:` and the role's vars/main.yml values are neither (no role var reads a
    fact: test_data_flow.py)."""
    role = next(parent for parent in path.parents if parent.parent.name == "roles")
    role_vars = set(yaml.safe_load((role / "vars/main.yml").read_text(encoding="utf-8"))
                    if (role / "vars/main.yml").exists() else {})
    sets, passed, used = set(), set(), set()
    for task, _ in tasks_of(path):
        sets |= {name for name in set_names(task) if name.startswith("__sglang_")}
        passed |= {name for name in task.get("vars") or {} if name.startswith("__sglang_")}
        for key, value in task.items():
            if key not in ("block", "rescue", "always"):
                used |= {fact for text in strings(value) for fact in facts_in(text, role)}
    return sorted(used - sets - passed - role_vars), sorted(sets - passed)
