"""The roles' and playbooks' YAML as the layout and data-flow tests read it: every string, every
task (with the tags of the blocks around it), the facts a task sets and who sets each."""

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
    if "roles" in path.relative_to(ROOT).parts[:1]:
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
