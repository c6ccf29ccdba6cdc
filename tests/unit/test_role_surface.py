"""The deploy role's surface, one a maintainer can hold (issue 46): its README names every default
of defaults/main.yml once, under one of three headings (what a user sets, what a site tunes,
what only tests and the demo touch); its entry-point table lists every entry point of
meta/argument_specs.yml; an entry point that only the project's own roles and playbooks call
(`tasks_from:`), none through a playbook of its own name, is marked "Internal:" in the spec,
whose description names its callers, and "internal" in the table. Each check is a small
function of a text, and each is shown failing on a wrong text."""

import re

import yaml

from support import ROLE, ROOT

GROUPS = ("What you set", "What a site tunes", "What only tests and the demo touch")
ENTRY = re.compile(r"^- `(sglang_\w+)`", re.M)
NAME = re.compile(r"\bsglang_\w+\b")
JINJA = re.compile(r"\{\{.*?\}\}", re.S)
INCLUDES = ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role",
            "import_role")


def sections(text):
    """{heading: the text below it, to the next heading} for every `##` and `###` heading."""
    parts = re.split(r"^#{2,3} (.+)$", text, flags=re.M)
    return {heading.strip(): body for heading, body in zip(parts[1::2], parts[2::2])}


def variable_problems(readme, defaults):
    """Every default has one entry (`- `name` ...`) under the three headings and is named under
    one of them only; every entry there is a default. A name inside a default value shown as a
    template (`{{ sglang_port }}`) names nothing."""
    found = sections(readme)
    problems = [f"no heading {group!r}" for group in GROUPS if group not in found]
    bodies = {group: JINJA.sub("", found.get(group, "")) for group in GROUPS}
    entries = [name for body in bodies.values() for name in ENTRY.findall(body)]
    for name in defaults:
        named = [group for group in GROUPS if name in NAME.findall(bodies[group])]
        if not re.search(rf"\b{name}\b", readme):
            problems.append(f"{name}: not named in the README")
        elif entries.count(name) != 1:
            problems.append(f"{name}: {entries.count(name)} entries under the three headings")
        if len(named) > 1:
            problems.append(f"{name}: named under {' and '.join(named)}")
    problems += [f"{name}: an entry, but no default" for name in entries if name not in defaults]
    return problems


def table_problems(readme, specs):
    """The README's entry-point table (its `## Entry points` section) has one row per entry point
    of the spec, and says "internal" in exactly the rows of those the spec marks internal."""
    rows = dict(re.findall(r"^\| `(\w+)` \|(.*)$", sections(readme).get("Entry points", ""), re.M))
    problems = [f"{name}: no row in the entry-point table" for name in specs if name not in rows]
    problems += [f"{name}: a row, but no such entry point" for name in rows if name not in specs]
    for name, row in rows.items():
        if name in specs and is_internal(specs[name]) != ("internal" in row.lower()):
            problems.append(f"{name}: internal in the spec: {is_internal(specs[name])}, "
                            f"in the table: {'internal' in row.lower()}")
    return problems


def is_internal(spec):
    return str(spec.get("short_description", "")).startswith("Internal:")


def description(spec):
    text = spec.get("description") or ""
    return " ".join(text) if isinstance(text, list) else str(text)


def walk(tasks):
    for task in tasks or []:
        if isinstance(task, dict):
            yield task
            for key in ("block", "rescue", "always"):
                yield from walk(task.get(key))


def entry_points_called(role, files, root=ROOT):
    """{entry point: the callers}: the files whose include_role / import_role names `role` with
    `tasks_from:`, each caller as a role's name (a role's tasks) or the file's path (a playbook)."""
    called = {}
    for path in files:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        rel = path.relative_to(root)
        in_role = rel.parts[0] == "roles"
        tasks = document if in_role else [task for play in document for key in (
            "pre_tasks", "tasks", "post_tasks", "handlers") for task in play.get(key) or []]
        for task in walk(tasks):
            include = next((task[key] for key in INCLUDES if isinstance(task.get(key), dict)), {})
            if include.get("name") in (role, f"sglang.deploy.{role}") and "tasks_from" in include:
                caller = rel.parts[1] if in_role else str(rel)
                called.setdefault(str(include["tasks_from"]), set()).add(caller)
    return called


def internal_problems(specs, called):
    """An entry point the project calls, none of whose callers is the playbook of its own name
    (`playbooks/<name>.yml`), is internal: "Internal:" starts its short description, and its
    description names each caller and says users should not call it. One a playbook of its own
    runs (or `main`) is not marked internal."""
    problems = []
    for name, spec in specs.items():
        callers = called.get(name, set())
        public = name == "main" or f"playbooks/{name}.yml" in callers
        if public:
            if is_internal(spec):
                problems.append(f"{name}: marked internal, but a playbook of its own runs it")
            continue
        if not callers:
            continue
        if not is_internal(spec):
            problems.append(f"{name}: only {', '.join(sorted(callers))} call it, "
                            "its short_description does not start with 'Internal:'")
        text = description(spec)
        if "should not call it" not in text:
            problems.append(f"{name}: its description does not say users should not call it")
        problems += [f"{name}: its description does not name its caller {caller}"
                     for caller in sorted(callers) if caller not in text]
    return problems


DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
README = (ROLE / "README.md").read_text(encoding="utf-8")
SPECS = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))[
    "argument_specs"]
CALLERS = [ROOT / "deploy.yml", *sorted(ROOT.glob("playbooks/*.yml")),
           *sorted(ROOT.glob("roles/*/tasks/**/*.yml"))]


def test_the_readme_names_every_default_once_under_who_sets_it():
    assert variable_problems(README, DEFAULTS) == []
    assert len(DEFAULTS) > 90 and len(ENTRY.findall(README)) == len(DEFAULTS)


def test_the_readme_lists_every_entry_point_internal_ones_marked():
    assert table_problems(README, SPECS) == []


def test_an_entry_point_only_the_project_calls_is_marked_internal():
    called = entry_points_called("sglang", CALLERS)
    assert called["step"] == {"sglang_tune"}, called
    assert called["fleet_report"] == {"playbooks/deploy.yml"}, called
    assert "playbooks/smoke.yml" in called["smoke"], called
    assert internal_problems(SPECS, called) == []
    assert sorted(name for name, spec in SPECS.items() if is_internal(spec)) == [
        "fleet_report", "step"]


README_SAMPLE = """\
## Role variables

### What you set

- `sglang_a` (`1`): a.

### What a site tunes

- `sglang_b`: b, and `{{ sglang_a }}` in its default.

### What only tests and the demo touch

- `sglang_c` (`x`): c.

## Entry points

| entry point | run by | for | what |
|---|---|---|---|
| `main` | `deploy.yml` | you | the deploy |
| `helper` | role `other` | internal | a step |
"""


def test_a_default_left_out_twice_or_under_two_headings_is_caught():
    defaults = {"sglang_a": 1, "sglang_b": "{{ sglang_a }}/b", "sglang_c": "x"}
    assert variable_problems(README_SAMPLE, defaults) == []
    assert variable_problems(README_SAMPLE, {**defaults, "sglang_d": 0}) == [
        "sglang_d: not named in the README"]
    assert variable_problems(README_SAMPLE + "sglang_d\n", {**defaults, "sglang_d": 0}) == [
        "sglang_d: 0 entries under the three headings"]
    twice = README_SAMPLE.replace("- `sglang_c` (`x`): c.", "- `sglang_c` (`x`): c.\n- `sglang_a`: a.")
    assert variable_problems(twice, defaults) == [
        "sglang_a: 2 entries under the three headings",
        "sglang_a: named under What you set and What only tests and the demo touch"]
    also = README_SAMPLE.replace("- `sglang_c` (`x`): c.", "- `sglang_c` (`x`): c, not sglang_b.")
    assert variable_problems(also, defaults) == [
        "sglang_b: named under What a site tunes and What only tests and the demo touch"]
    assert variable_problems(README_SAMPLE, {"sglang_a": 1, "sglang_b": ""}) == [
        "sglang_c: an entry, but no default"]
    assert variable_problems(README_SAMPLE.replace("### What a site tunes", "### Tuning"),
                             defaults)[0] == "no heading 'What a site tunes'"


def test_an_entry_point_missing_from_the_table_or_wrongly_marked_is_caught():
    specs = {"main": {"short_description": "Deploy"},
             "helper": {"short_description": "Internal: a step"}}
    assert table_problems(README_SAMPLE, specs) == []
    assert table_problems(README_SAMPLE, {**specs, "smoke": {}}) == [
        "smoke: no row in the entry-point table"]
    assert table_problems(README_SAMPLE, {"main": {}, "helper": {"short_description": "A step"}}) == [
        "helper: internal in the spec: False, in the table: True"]
    assert table_problems(README_SAMPLE.replace("| `helper` | role `other` | internal |",
                                                "| `helper` | role `other` | you |"), specs) == [
        "helper: internal in the spec: True, in the table: False"]


def test_an_internal_entry_point_not_marked_is_caught():
    marked = {"short_description": "Internal: a step",
              "description": ["Internal: called only by the other role; users should not call it."]}
    specs = {"main": {"short_description": "Deploy"}, "smoke": {"short_description": "Smoke"},
             "helper": marked}
    called = {"smoke": {"playbooks/smoke.yml", "playbooks/deploy.yml"}, "helper": {"other"}}
    assert internal_problems(specs, called) == []
    assert internal_problems({**specs, "helper": {"short_description": "A step"}}, called) == [
        "helper: only other call it, its short_description does not start with 'Internal:'",
        "helper: its description does not say users should not call it",
        "helper: its description does not name its caller other"]
    assert internal_problems(specs, {**called, "helper": {"other", "playbooks/deploy.yml"}}) == [
        "helper: its description does not name its caller playbooks/deploy.yml"]
    assert internal_problems({**specs, "smoke": marked}, called) == [
        "smoke: marked internal, but a playbook of its own runs it"]


def test_the_callers_are_read_from_include_role_and_import_role(tmp_path):
    tasks = tmp_path / "roles" / "other" / "tasks" / "main.yml"
    playbook = tmp_path / "playbooks" / "x.yml"
    tasks.parent.mkdir(parents=True)
    playbook.parent.mkdir()
    tasks.write_text("- block:\n    - ansible.builtin.import_role: {name: sglang, tasks_from: step}\n"
                     "  rescue:\n    - include_role: {name: sglang.deploy.sglang, tasks_from: a}\n"
                     "- ansible.builtin.include_role: {name: elsewhere, tasks_from: b}\n")
    playbook.write_text("- hosts: all\n  tasks:\n"
                        "    - ansible.builtin.include_role: {name: sglang, tasks_from: a}\n"
                        "    - ansible.builtin.include_role: {name: sglang}\n")
    assert entry_points_called("sglang", [tasks, playbook], root=tmp_path) == {
        "step": {"other"}, "a": {"other", "playbooks/x.yml"}}
