"""Data that flows in the open (issue 46): every internal fact a task reads was set before it on
the way from the entry point, or handed to the step by name where it is included.

The walk follows each entry point of the roles in task order, into every import and include
(a role's own files and other roles' `tasks_from`), and keeps the facts set so far (set_fact,
register; a fact set under a condition counts as set) and the names handed in as `vars:` by
the includes and blocks around a task. A fact a task reads is one its templates name, or one a
role var they name reads (vars/main.yml, followed to the facts under it, so a lazy role var
hides nothing). Reads that say they may be absent (`| default(...)`, `is defined`) and another
host's facts (`hostvars[...]`, set by an earlier play) are not required. The header test
(test_role_layout.py) lists each file's reads; this one checks that the flow provides them.
"""

import re
import shutil

import pytest
import yaml

from support import ROOT
from support.role_yaml import NESTED, fact_writers, set_names, strings, walk

FACT = re.compile(r"\b__sglang_\w+")
NAME = re.compile(r"\b[a-z_]\w*\b")
# A read that allows the fact to be absent: `x | default(...)`, `x.y | default`, `x is defined`.
OPTIONAL = re.compile(r"(__sglang_\w+)(?:\.\w+|\[[^\]]*\])*\s*(?:\|\s*default\b|is\s+(?:not\s+)?defined)")
# A template a value renders (its reads are the value's): lookup('ansible.builtin.template', 'x').
TEMPLATE = re.compile(r"lookup\('ansible\.builtin\.template',\s*'([^']+)'")
# The argument of default(): read only when what it stands in for is absent.
DEFAULT_ARG = re.compile(r"default\(\s*(__sglang_\w+)")
# Another host's facts (set by an earlier play): hostvars[h].x, map('extract', hostvars, 'x').
ANOTHER_HOST = re.compile(r"hostvars\[[^\]]+\]\s*(?:\.|\[')\s*(__sglang_\w+)|hostvars,\s*'(__sglang_\w+)'")
INCLUDES = ("ansible.builtin.import_tasks", "ansible.builtin.include_tasks")
ROLE_INCLUDES = ("ansible.builtin.import_role", "ansible.builtin.include_role")
# Keys of a task whose templates its own result may already feed (its register).
AFTER = ("until", "changed_when", "failed_when")


def role_vars(role, root=ROOT):
    path = root / f"roles/{role}/vars/main.yml"
    return yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else {}


def guarded(task):
    """The facts a task's `when` allows to be absent: the task does not run without them."""
    return {name for text in strings(task.get("when")) for name in OPTIONAL.findall(text)}


def reads_of(texts, defs):
    """The facts `texts` read and may not do without, through the lazy definitions in `defs`
    ({name: template}: the role's vars, the vars of the includes and blocks around, the task's
    own), each followed to the facts under it as Ansible evaluates it where it is used."""
    required, seen = set(), set()
    todo = list(texts)
    while todo:
        text = todo.pop()
        todo += [template.read_text(encoding="utf-8") for name in TEMPLATE.findall(text)
                 for template in ROOT.glob(f"roles/*/templates/{name}")]
        maybe = {name for pair in ANOTHER_HOST.findall(text) for name in pair if name}
        maybe |= set(OPTIONAL.findall(text)) | set(DEFAULT_ARG.findall(text))
        for name in set(NAME.findall(text)) & set(defs):
            if name not in seen:
                seen.add(name)
                todo += list(strings(defs[name]))
        required |= {name for name in FACT.findall(text) if name not in defs and name not in maybe}
    return required


def own_texts(task):
    """The templates a task evaluates itself: not its nested tasks, not the names it sets, not
    the checks that read its own result, not its vars (lazy: read where they are used)."""
    own = {key: value for key, value in task.items()
           if key not in NESTED + AFTER + ("register", "vars")}
    facts = own.get("ansible.builtin.set_fact")
    if isinstance(facts, dict):
        own["ansible.builtin.set_fact"] = list(facts.values())
    if any(key in task for key in INCLUDES + ROLE_INCLUDES):
        own = {key: value for key, value in own.items() if key not in INCLUDES + ROLE_INCLUDES}
    return list(strings(own))


class Flow:
    """One entry point's walk: the reads no earlier task or include provided."""

    def __init__(self, root=ROOT):
        self.root, self.missing = root, []
        self.lazy = {role: role_vars(role, root) for role in ROLES}

    def entry(self, role, name):
        """Walk entry point `name` of `role`; the reads found missing."""
        self.file(role, f"{name}.yml", set(), self.lazy[role], [])
        return self.missing

    def file(self, role, rel, known, defs, trail):
        path = self.root / f"roles/{role}/tasks/{rel}"
        tasks = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        return self.tasks(role, tasks, known, defs, trail + [f"{role}/{rel}"])

    def tasks(self, role, tasks, known, defs, trail):
        known = set(known)
        for task in tasks:
            known |= self.task(role, task, known, defs, trail)
        return known

    def task(self, role, task, known, defs, trail):
        defs = {**defs, **(task.get("vars") or {})}
        for fact in sorted(reads_of(own_texts(task), defs) - known - guarded(task)):
            self.missing.append(f"{' > '.join(trail)}: {task.get('name', '?')!r} reads {fact}")
        made = set_names(task)
        for key in INCLUDES:
            if key in task:
                spec = task[key]
                rel = spec["file"] if isinstance(spec, dict) else spec
                # step.yml: one include whose file a var of its own names; every one is walked.
                steps = defs.get("sglang_step_files", {})
                choices = [steps[defs["sglang_step"]]] if "{{" in rel else [rel]
                for one in choices:
                    made |= self.file(role, one, known, defs, trail)
        for key in ROLE_INCLUDES:
            if key in task and task[key].get("tasks_from"):
                other = task[key]["name"].split(".")[-1]
                outside = {name: value for name, value in defs.items() if name not in self.lazy[role]}
                made |= self.file(other, task[key]["tasks_from"] + ".yml", known,
                                  {**self.lazy[other], **outside}, trail)
        if any(key in task for key in NESTED):
            body = self.tasks(role, task.get("block") or [], known, defs, trail)
            rescue = self.tasks(role, task.get("rescue") or [], body, defs, trail)
            made |= body | rescue | self.tasks(role, task.get("always") or [], body | rescue, defs, trail)
        return made


ROLES = ("sglang", "sglang_tune", "sglang_router")
ROLE_TASK_FILES = sorted(ROOT.glob("roles/*/tasks/**/*.yml"))


def entry_points():
    """Every entry point but `step`, whose one step a caller names: it is walked, step by step
    in the caller's order, from the sglang_tune role's."""
    for role in ROLES:
        specs = yaml.safe_load((ROOT / f"roles/{role}/meta/argument_specs.yml").read_text(encoding="utf-8"))
        yield from ((role, name) for name in specs["argument_specs"] if name != "step")


@pytest.mark.parametrize("role, entry", list(entry_points()))
def test_every_fact_a_step_reads_was_set_before_it_or_handed_to_it(role, entry):
    missing = Flow().entry(role, entry)
    assert not missing, "\n".join(missing)


def test_the_smoke_entry_point_without_the_env_it_predicts_in_is_caught(tmp_path):
    """Issue 46's bug: playbooks/smoke.yml on a release without preflight.json predicted with a
    role var (__sglang_env) that read a fact only the deploy's host/read.yml sets. The include
    now hands the step the env that serves, and no role var reads a fact; put the old role var
    back and take the include's away, and the walk names the hidden read."""
    shutil.copytree(ROOT / "roles", tmp_path / "roles")
    smoke = tmp_path / "roles/sglang/tasks/smoke.yml"
    handed = '  vars:\n    __sglang_env: {path: "{{ sglang_venv }}"}\n'
    assert handed in smoke.read_text(encoding="utf-8")
    smoke.write_text(smoke.read_text(encoding="utf-8").replace(handed, ""), encoding="utf-8")
    role_vars_file = tmp_path / "roles/sglang/vars/main.yml"
    with role_vars_file.open("a", encoding="utf-8") as out:
        out.write('__sglang_env: "{{ __sglang_prereqs.env }}"\n')
    missing = Flow(tmp_path).entry("sglang", "smoke")
    assert missing and all(line.endswith("reads __sglang_prereqs") for line in missing), missing
    assert any("sglang/smoke.yml > sglang/release/predict.yml" in line for line in missing)


def test_a_step_input_no_include_hands_over_is_caught(tmp_path):
    """Without the role var, the same include left out is a step input nobody hands over."""
    shutil.copytree(ROOT / "roles", tmp_path / "roles")
    smoke = tmp_path / "roles/sglang/tasks/smoke.yml"
    handed = '  vars:\n    __sglang_env: {path: "{{ sglang_venv }}"}\n'
    smoke.write_text(smoke.read_text(encoding="utf-8").replace(handed, ""), encoding="utf-8")
    missing = Flow(tmp_path).entry("sglang", "smoke")
    assert missing and all(line.endswith("reads __sglang_env") for line in missing), missing


def test_no_include_parameter_stands_in_for_a_fact():
    """A step's inputs are its own names (sglang_go_live_release, sglang_verify_preflight...),
    handed over where it is included: never a fact's name, which the include would outrank
    for that call only (issue 46; 3 names at 7 sites when its work began)."""
    facts = fact_writers(ROLE_TASK_FILES)
    shadowing = {}
    for path in sorted(ROOT.glob("roles/*/tasks/**/*.yml")):
        for task, _tags in walk(yaml.safe_load(path.read_text(encoding="utf-8"))):
            for name in task.get("vars") or {}:
                if name in facts:
                    shadowing.setdefault(name, set()).add(path.relative_to(ROOT).as_posix())
    print(f"include parameters standing in for a fact: {sum(map(len, shadowing.values()))} "
          f"sites, {len(shadowing)} names: {sorted(shadowing)}")
    assert not shadowing, shadowing


# Role vars (vars/main.yml) that read a fact, evaluated lazily wherever they are used: none (issue
# 46; 9 of 22 when its work began, f0071c0). What a step needs from a fact is handed to it by
# name where it is included, or the step reads the fact itself (its Reads header says so).
FACT_READING_ROLE_VARS = {}


def test_no_role_var_reads_a_fact():
    found = {}
    for role in ROLES:
        lazy = role_vars(role)
        for name, value in lazy.items():
            others = {k: v for k, v in lazy.items() if k != name}
            if reads_of(list(strings(value)), others):
                found.setdefault(role, set()).add(name)
    print(f"role vars that read facts: {sum(map(len, found.values()))}: {found}")
    assert found == FACT_READING_ROLE_VARS


def test_another_role_reads_the_deploys_steps_only_through_their_result():
    """The tuner makes, starts and proves each candidate with the deploy's steps (its entry point
    `step`) and reads what they found from the step's one output, __sglang_step_result: none of
    the deploy role's own facts (it read ten, __sglang_url to __sglang_restore, issue 46)."""
    deploys = set(fact_writers(ROLE_TASK_FILES)) - {"__sglang_step_result"}
    read = {}
    for path in sorted(ROOT.glob("roles/sglang_tune/tasks/*.yml")):
        texts = strings(yaml.safe_load(path.read_text(encoding="utf-8")))
        for fact in {name for text in texts for name in FACT.findall(text)} & deploys:
            if not fact.startswith("__sglang_tune"):
                read.setdefault(fact, set()).add(path.name)
    print(f"the deploy's facts the tuner reads: {len(read)}: {sorted(read)}")
    assert not read, read
