"""How the roles are wired: what is internal, and which tags reach which tasks.

Variables a role sets itself (set_fact, register) are internal and carry a `__<role>_`
prefix; the inputs (`sglang_*`, `sglang_router_*`) are the ones documented in defaults and
the argument specs.
"""

from pathlib import Path

import yaml

from support import ROOT

TASK_FILES = sorted(ROOT.glob("roles/*/tasks/*.yml"))
PLAYBOOKS = [ROOT / "deploy.yml", *sorted(ROOT.glob("playbooks/*.yml"))]


def walk(tasks, inherited=()):
    """Yields (task, tags inherited from the blocks around it plus its own)."""
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        tags = tuple(inherited) + tuple(task.get("tags") or ())
        yield task, tags
        for key in ("block", "rescue", "always"):
            yield from walk(task.get(key), tags)


def role_tasks(path: Path):
    return list(walk(yaml.safe_load(path.read_text(encoding="utf-8"))))


def playbook_tasks(path: Path):
    return [item for play in yaml.safe_load(path.read_text(encoding="utf-8"))
            for item in walk(play.get("tasks"))]


def set_names(task):
    facts = task.get("ansible.builtin.set_fact")
    names = [name for name in facts if name != "cacheable"] if isinstance(facts, dict) else []
    return names + ([task["register"]] if "register" in task else [])


def test_facts_the_roles_set_are_marked_internal():
    offenders = []
    for path in TASK_FILES + PLAYBOOKS:
        tasks = role_tasks(path) if path in TASK_FILES else playbook_tasks(path)
        for task, _ in tasks:
            offenders += [f"{path.relative_to(ROOT)}: {name}" for name in set_names(task)
                          if not name.startswith("__sglang_")]
    assert not offenders, offenders


def test_no_input_is_named_like_an_internal_fact():
    for defaults in ROOT.glob("roles/*/defaults/main.yml"):
        names = yaml.safe_load(defaults.read_text(encoding="utf-8"))
        assert not [name for name in names if name.startswith("_")], defaults
