"""Data that flows in the open (issues 46, 56): every internal fact a task reads was set before
it on the way from the entry point, and every input a step reads was handed to it by name where
it is included.

The walk follows each entry point of the roles in task order, into every import and include
(a role's own files and other roles' `tasks_from`), and keeps the facts set so far (set_fact,
register; a fact set under a condition counts as set) and the names handed in as `vars:` by
the includes and blocks around a task (a step's inputs, `sglang_unlock_lock`). What a task
reads is what its templates name, or what a role var or an include's var they name reads,
followed to the facts under it, so a lazy definition hides nothing. Reads that say they may be
absent (`| default(...)`, `is defined`) are not required.

The rules on top of the walk: a step another file includes reads only the run's context (the
facts the inputs step and the host's read set once) and its own inputs, each named in its
header; no role var and no task or block `vars:` reads a fact; what a host reads from another
(`hostvars[...]`) is a name the other host holds. The header test (test_role_layout.py) lists
each file's reads; this one checks that the flow provides them.
"""

import re
import shutil

import pytest
import yaml

from support import ROOT
from support.role_yaml import NESTED, fact_writers, facts_of, set_names, strings, tasks_of, walk

FACT = re.compile(r"\b__sglang_\w+")
NAME = re.compile(r"\b[a-z_]\w*\b")
# A read that allows the fact to be absent: `x | default(...)`, `x.y | default`, `x is defined`.
OPTIONAL = re.compile(r"((?:__)?sglang_\w+)(?:\.\w+|\[[^\]]*\])*\s*(?:\|\s*default\b|is\s+(?:not\s+)?defined)")
# A template a value renders (its reads are the value's): lookup('ansible.builtin.template', 'x').
TEMPLATE = re.compile(r"lookup\('ansible\.builtin\.template',\s*'([^']+)'")
# The argument of default(): read only when what it stands in for is absent.
DEFAULT_ARG = re.compile(r"default\(\s*((?:__)?sglang_\w+)")
# Another host's facts (set by an earlier play): hostvars[h].x, map('extract', hostvars, 'x').
ANOTHER_HOST = re.compile(r"hostvars\[[^\]]+\]\s*(?:\.|\[')\s*(__sglang_\w+)|hostvars,\s*'(__sglang_\w+)'")
INCLUDES = ("ansible.builtin.import_tasks", "ansible.builtin.include_tasks")
ROLE_INCLUDES = ("ansible.builtin.import_role", "ansible.builtin.include_role")
# Keys of a task whose templates its own result may already feed (its register).
AFTER = ("until", "changed_when", "failed_when")


def role_vars(role, root=ROOT):
    path = root / f"roles/{role}/vars/main.yml"
    return yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else {}


def role_variables(root=ROOT):
    """Every role's inputs (its defaults, its entry points' options) and role vars: the names
    a host holds whichever step runs."""
    names = set()
    for role in ROLES:
        names |= set(role_vars(role, root))
        names |= set(yaml.safe_load((root / f"roles/{role}/defaults/main.yml").read_text(encoding="utf-8")))
        specs = yaml.safe_load((root / f"roles/{role}/meta/argument_specs.yml").read_text(encoding="utf-8"))
        for entry in specs["argument_specs"].values():
            names |= set(entry.get("options") or {})
    return names


def step_inputs(root=ROOT):
    """The names the includes hand their steps (`vars:` of an include, `sglang_go_live_release`)
    that are no role's input (a default, an entry point's option) or role var: a step that uses
    one needs every include of it to hand it over."""
    handed = set()
    for path in root.glob("roles/*/tasks/**/*.yml"):
        for task, _tags in walk(yaml.safe_load(path.read_text(encoding="utf-8"))):
            if any(key in task for key in INCLUDES + ROLE_INCLUDES):
                handed |= {name for name in task.get("vars") or {} if name.startswith("sglang_")}
    return handed - role_variables(root)


def guarded(task):
    """The facts a task's `when` allows to be absent: the task does not run without them."""
    return {name for text in strings(task.get("when")) for name in OPTIONAL.findall(text)}


def reads_of(texts, defs, inputs=frozenset()):
    """The facts `texts` read and may not do without, through the lazy definitions in `defs`
    ({name: template}: the role's vars, the vars of the includes and blocks around, the task's
    own), each followed to the facts under it as Ansible evaluates it where it is used. What a
    definition read as optional (`sglang_unlock_lock is defined`) reads is optional too."""
    required, seen = set(), {}
    todo = [(text, False) for text in texts]
    while todo:
        text, optional = todo.pop()
        todo += [(template.read_text(encoding="utf-8"), optional) for name in TEMPLATE.findall(text)
                 for template in ROOT.glob(f"roles/*/templates/{name}")]
        maybe = {name for pair in ANOTHER_HOST.findall(text) for name in pair if name}
        maybe |= set(OPTIONAL.findall(text)) | set(DEFAULT_ARG.findall(text))
        for name in set(NAME.findall(text)) & set(defs):
            under = optional or name in maybe
            if seen.get(name, True) and not (name in seen and under):
                seen[name] = under
                todo += [(one, under) for one in strings(defs[name])]
        if not optional:
            named = set(FACT.findall(text)) | (set(NAME.findall(text)) & inputs)
            required |= {name for name in named if name not in defs and name not in maybe}
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
        self.inputs = step_inputs()

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
        guard = guarded(task)
        guard |= reads_of([text for name in guard & set(defs) for text in strings(defs[name])], defs, self.inputs)
        for fact in sorted(reads_of(own_texts(task), defs, self.inputs) - known - guard):
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


def test_a_step_input_an_include_leaves_out_is_caught(tmp_path):
    """A step's own input (sglang_undo_target) is required like a fact: the include that does
    not hand it over is named."""
    shutil.copytree(ROOT / "roles", tmp_path / "roles")
    rollback = tmp_path / "roles/sglang/tasks/rollback.yml"
    handed = '            sglang_undo_target: "{{ __sglang_rollback.target }}"\n'
    assert handed in rollback.read_text(encoding="utf-8")
    rollback.write_text(rollback.read_text(encoding="utf-8").replace(handed, ""), encoding="utf-8")
    missing = Flow(tmp_path).entry("sglang", "rollback")
    assert missing and all(line.endswith("reads sglang_undo_target") for line in missing), missing


def included_steps(root=ROOT):
    """{step file: the files that include it}: every task file of a role that another includes
    (import_tasks, include_tasks; step.yml's one include, each file it may name)."""
    steps = {}
    for role in ROLES:
        tasks = root / f"roles/{role}/tasks"
        for path in sorted(tasks.glob("**/*.yml")):
            for task, _tags in walk(yaml.safe_load(path.read_text(encoding="utf-8"))):
                for key in INCLUDES:
                    if key not in task:
                        continue
                    spec = task[key]
                    rel = spec["file"] if isinstance(spec, dict) else spec
                    named = (task.get("vars") or {}).get("sglang_step_files", {}).values() if "{{" in rel else [rel]
                    for one in named:
                        steps.setdefault(tasks / one, set()).add(path)
    return steps


def roles_entered(path, root=ROOT):
    """The entry points of other roles a task file includes (include_role tasks_from): what
    they set is set by the file, like its own steps'."""
    return {root / f"roles/{task[key]['name'].split('.')[-1]}/tasks/{task[key]['tasks_from']}.yml"
            for task, _tags in walk(yaml.safe_load(path.read_text(encoding="utf-8")))
            for key in ROLE_INCLUDES if isinstance(task.get(key), dict) and task[key].get("tasks_from")}


# The run's context: the facts the inputs step and the host's read set, each in one file, before
# any other step runs: what the server is asked (its config, env, URL, unit), the profile, the
# host's prerequisites. Every step may read them; every other fact a step reads is handed to it.
CONTEXT_STEPS = {"roles/sglang/tasks/inputs/render_args.yml", "roles/sglang/tasks/host/read.yml"}


def facts_and_context():
    """(every fact a task sets, those only the context steps set). A name no task sets is not a
    fact but an input handed to a step under a fact's name (`__sglang_env`), which the walk
    above requires where it is not optional."""
    writers = fact_writers(ROLE_TASK_FILES)
    return set(writers), {fact for fact, files in writers.items() if files <= CONTEXT_STEPS}


def implicit_reads(root=ROOT):
    """{step: the internal facts it reads that neither it nor a step it includes sets}: what it
    takes from whichever file included it without the include saying so, the run's context
    and another host's facts (`hostvars[...]`, set by that host's own run) aside. A step whose
    include hands it what it needs reads its own inputs (`sglang_unlock_lock`), named in its
    header."""
    steps = included_steps(root)
    includes = {}
    for step, sites in steps.items():
        for site in sites:
            includes.setdefault(site, set()).add(step)
    for path in root.glob("roles/*/tasks/**/*.yml"):
        includes.setdefault(path, set()).update(roles_entered(path, root))

    def made(path, seen=()):
        facts = set(facts_of(path)[1])
        for step in includes.get(path, ()):
            if step not in seen:
                facts |= made(step, seen + (path,))
        return facts

    found, (facts, context) = {}, facts_and_context()
    for step in steps:
        text = step.read_text(encoding="utf-8")
        another_host = {name for pair in ANOTHER_HOST.findall(text) for name in pair if name}
        reads = (set(facts_of(step)[0]) & facts) - made(step) - context - another_host
        if reads:
            found[step.relative_to(root / "roles").as_posix()] = sorted(reads)
    return found


def test_a_step_reads_what_its_include_hands_it():
    """A step another file includes reads the run's context and what the include hands it (its
    inputs, named in its header), never another fact unnamed (issue 56, part 1: 31 facts in 20
    steps, 80 counting the context, when its work began at 6c69eb8)."""
    found = implicit_reads()
    print(f"implicit reads: {sum(map(len, found.values()))} facts in {len(found)} steps")
    assert not found, found


def test_a_fact_a_step_takes_unnamed_is_caught(tmp_path):
    """Undo the handing over of __sglang_lock to host/unlock.yml and the step reads it unnamed."""
    shutil.copytree(ROOT / "roles", tmp_path / "roles")
    unlock = tmp_path / "roles/sglang/tasks/host/unlock.yml"
    unlock.write_text(unlock.read_text(encoding="utf-8").replace("sglang_unlock_lock", "__sglang_lock"),
                      encoding="utf-8")
    assert implicit_reads(tmp_path)["sglang/tasks/host/unlock.yml"] == ["__sglang_lock"]


def test_each_step_names_its_inputs_in_its_header():
    """A step's inputs are said where a reader starts: every one it reads (and does not define in
    a `vars:` of its own) is named in the comment the file opens with (`# Inputs (vars of its include or the one around it): ...`)."""
    inputs, unnamed = step_inputs(), {}
    for path in ROLE_TASK_FILES:
        lines = path.read_text(encoding="utf-8").splitlines()
        header = " ".join(line for line in lines[1:next(i for i, line in enumerate(lines[1:], 1)
                                                      if not line.startswith("#"))])
        # What the file reads: its lines but comments, a name it hands on (`sglang_x:`) aside.
        body = "\n".join(re.sub(r"^\s*(- )?sglang_\w+:", "", line) for line in lines
                         if not line.lstrip().startswith("#"))
        own = {name for task, _tags in walk(yaml.safe_load("\n".join(lines)))
               for name in task.get("vars") or {}}
        missing = sorted(name for name in inputs - own
                         if re.search(rf"\b{name}\b", body) and not re.search(rf"\b{name}\b", header))
        if missing:
            unnamed[path.relative_to(ROOT).as_posix()] = missing
    assert not unnamed, unnamed


def vars_reading_facts(root=ROOT):
    """{task file: the `vars:` of its blocks and tasks that read a fact}. A block's are evaluated
    again at each task of the block, against the facts as they are then, and hide when a value is
    worked out; only the run's context (set once, before any step) may reach its includes through
    them. A task's own are local names of its arguments, and read no fact at all: what a task
    works out from facts is an argument (or a fact set once, where its inputs are known). The
    vars of an include are the step's inputs, handed over by name (test_a_step_reads_what_its_include_hands_it)."""
    facts, context = facts_and_context()
    found = {}
    for path in sorted(root.glob("roles/*/tasks/**/*.yml")):
        for task, _tags in walk(yaml.safe_load(path.read_text(encoding="utf-8"))):
            if any(key in task for key in INCLUDES + ROLE_INCLUDES):
                continue
            forbidden = facts - context if "block" in task else facts
            for name, value in (task.get("vars") or {}).items():
                if {fact for text in strings(value) for fact in FACT.findall(text)} & forbidden:
                    found.setdefault(path.relative_to(root / "roles").as_posix(), []).append(name)
    return found


def test_no_task_or_block_var_reads_a_fact():
    """Issue 56 began with 14 block vars reading facts in 9 files (rollback target, fleet report,
    speed and workload gates, upgrade envs, doctor, monitoring pack, the tuner's views of its
    state) and 4 task vars (the host check, the fetch plan, the monitoring pack's address and
    pack)."""
    found = vars_reading_facts()
    print(f"task and block vars reading facts: {sum(map(len, found.values()))} in {len(found)} files")
    assert not found, found


def test_a_task_var_reading_a_fact_is_caught(tmp_path):
    shutil.copytree(ROOT / "roles", tmp_path / "roles")
    check = tmp_path / "roles/sglang/tasks/host/check.yml"
    text = check.read_text(encoding="utf-8")
    assert "    quiet: true\n\n- name: Refuse a host" in text
    check.write_text(text.replace("    quiet: true\n\n- name: Refuse a host",
                                  "    quiet: true\n  vars:\n    sglang_seen: \"{{ __sglang_host_facts }}\"\n\n"
                                  "- name: Refuse a host", 1), encoding="utf-8")
    assert vars_reading_facts(tmp_path) == {"sglang/tasks/host/check.yml": ["sglang_seen"]}


# A name read from another host's vars: hostvars[h].x, hostvars[h]['x'], map('extract', hostvars, 'x').
HOSTVARS_READ = re.compile(r"hostvars\[[^\]]+\]\s*(?:\.|\[')\s*(\w+)|hostvars,\s*'(\w+)'")


def other_host_reads(root=ROOT):
    """({name: files} of what the roles and playbooks read from another host's vars, the names a
    host can hold): a host's vars are its facts (set_fact, register) and its inventory and role
    variables (defaults, argument specs, role vars), never the vars an include hands a step."""
    paths = sorted(root.glob("roles/*/tasks/**/*.yml")) + sorted(root.glob("playbooks/*.yml"))
    held = {name for path in paths for task, _tags in tasks_of(path) for name in set_names(task)}
    held |= role_variables(root)
    read = {}
    for path in paths:
        for text in strings(yaml.safe_load(path.read_text(encoding="utf-8"))):
            for name in {one for pair in HOSTVARS_READ.findall(text) for one in pair if one}:
                read.setdefault(name, set()).add(path.relative_to(root).as_posix())
    return read, held


def test_what_a_host_reads_from_another_is_what_the_other_holds():
    """A multi-node follower waits for rank 0's proof (proof/follow.yml reads
    hostvars[rank 0].__sglang_release_proven). A read of a name the other host never holds (a
    step input, a renamed fact) is always absent there, and `| default(false)` would turn it
    into a follower that never goes live: 2608b38 mended one, made by a scripted rename."""
    read, held = other_host_reads()
    print(f"names read from another host: {sorted(read)}")
    assert read and not set(read) - held, {name: read[name] for name in set(read) - held}


def test_a_follower_reading_a_name_rank_0_never_holds_is_caught(tmp_path):
    shutil.copytree(ROOT / "roles", tmp_path / "roles")
    shutil.copytree(ROOT / "playbooks", tmp_path / "playbooks")
    follow = tmp_path / "roles/sglang/tasks/proof/follow.yml"
    read = "hostvars[__sglang_rank0].__sglang_release_proven"
    assert read in follow.read_text(encoding="utf-8")
    follow.write_text(follow.read_text(encoding="utf-8").replace(read, "hostvars[__sglang_rank0].sglang_follow_proven"),
                      encoding="utf-8")
    read, held = other_host_reads(tmp_path)
    assert set(read) - held == {"sglang_follow_proven"}
