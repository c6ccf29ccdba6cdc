"""The docs say what the source does (issue 46). Read from README.md, docs/*.md and the roles'
READMEs: every `make <target>` they name is a target of the Makefile, and every "`make X` (part
of `make Y`)" holds in the Makefile's graph (prerequisites and `$(MAKE)` calls in recipes);
every entry point they name is in a role's meta/argument_specs.yml, and an entry-point count is
the spec's; "N scenarios" is the number of molecule scenarios, "N filters" the number of the
collection's filters; a default a role README gives is
its spec's default, of its spec's type, and every default of a role is named in its README and
its spec; design.md's opening picture names only files that exist; the crash harness's operations in design.md are the
harness's; the workloads measuring.md states (the demo's, SGLang's defaults, the reference
profile's) are the inventory's, sglang_workload's and the profile's; every relative link leads
to a file (and heading); the README stays a front door.
Each check is a small function of a text, and each is shown failing on a wrong text."""

import ast
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("roles/*/README.md")])
README_MAX_LINES = 220
WORDS = {w: n for n, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}


def _docs():
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in DOCS}


# --- the Makefile ------------------------------------------------------------------------------

def makefile_graph(text):
    """{target: the targets it runs}: its prerequisites and the targets of `$(MAKE)` calls in
    its recipe (make's own way of running other targets)."""
    graph, current = {}, None
    for line in re.sub(r"\\\n", " ", text).splitlines():
        if line.startswith("\t"):
            for call in re.finditer(r"\$\(MAKE\)((?:[ \t]+[^\s;|&]+)*)", line):
                graph[current] |= {t for t in call.group(1).split()
                                   if not t.startswith("-") and "=" not in t}
            continue
        rule = re.match(r"^([^\s:=#][^:=]*?)\s*:(?!=)(.*)$", line)
        if rule:
            current = rule.group(1).strip()
            graph.setdefault(current, set()).update(rule.group(2).split("#")[0].split())
    return {target: deps for target, deps in graph.items() if not target.startswith(".")}


def runs(graph, outer, inner):
    """Whether `make outer` runs `make inner`."""
    seen, todo = set(), [outer]
    while todo:
        target = todo.pop()
        if target == inner:
            return True
        if target not in seen:
            seen.add(target)
            todo.extend(graph.get(target, ()))
    return False


def make_targets_named(text):
    """The targets of `make X` in backticks, and of `make X` lines in code blocks."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        pattern = r"^\s*(?:sudo\s+)?make ([a-z][\w-]*)" if fenced else r"`make ([a-z][\w-]*)"
        found += re.findall(pattern, line)
    return found


def part_of_claims(text):
    """(inner, outer, holds) for each "`make X` (part of `make Y`)", "`make X`, part of `make Y`",
    "`make X` (not part of `make Y`)", "`make X`, which `make Y` ... runs", and a table row of
    `make X` that says "(`make Y` runs this)"."""
    claims = [(m.group(1), m.group(3), not m.group(2)) for m in re.finditer(
        r"`make ([\w-]+)`,?\s+\(?(not\s+)?part\s+of\s+`make ([\w-]+)`", text)]
    claims += [(m.group(1), m.group(2), True) for m in re.finditer(
        r"`make ([\w-]+)`,\s+which\s+`make ([\w-]+)`", text)]
    claims += [(m.group(1), m.group(2), True) for m in re.finditer(
        r"^\| `make ([\w-]+)` \|[^\n]*\(`make ([\w-]+)` runs this\)", text, re.M)]
    return claims


def all_below_claims(text):
    """For a table row "| `make X` | all below but `a` and `b` ...": (X, the targets of the rows
    below it, the ones it leaves out)."""
    rows = re.findall(r"^\| `make ([\w-]+)` \|([^|\n]*)\|", text, re.M)
    claims = []
    for i, (target, what) in enumerate(rows):
        but = re.match(r"\s*all below but (.*)", what)
        if but:
            left_out = set(re.findall(r"`(?:make )?([\w-]+)`", but.group(1).split("(")[0]))
            claims.append((target, [t for t, _ in rows[i + 1:]], left_out))
    return claims


def make_problems(text, graph):
    """What a doc's text says of the Makefile that the Makefile contradicts."""
    problems = [f"make {t}: no such target" for t in make_targets_named(text) if t not in graph]
    for inner, outer, holds in part_of_claims(text):
        if runs(graph, outer, inner) != holds:
            problems.append(f"make {inner} is {'' if holds else 'not '}part of make {outer}: false")
    for outer, below, left_out in all_below_claims(text):
        problems += [f"make {outer} runs all below but {sorted(left_out)}: {t} is "
                     f"{'run' if t in left_out else 'not run'}"
                     for t in below if runs(graph, outer, t) == (t in left_out)]
    return problems


MAKEFILE = makefile_graph((ROOT / "Makefile").read_text())


def test_the_makefile_graph_is_read():
    assert {"check", "lint", "sanity", "test", "unit-all", "crash", "ee"} <= set(MAKEFILE)
    assert runs(MAKEFILE, "check", "crash") and runs(MAKEFILE, "test", "sanity")
    assert runs(MAKEFILE, "test", "ee") and not runs(MAKEFILE, "lint", "sanity")
    assert "make test" in (ROOT / ".ci/run").read_text()  # the README: what .ci/run runs


@pytest.mark.parametrize("doc", sorted(_docs()))
def test_what_the_docs_say_of_the_makefile_holds(doc):
    assert make_problems(_docs()[doc], MAKEFILE) == []


def test_a_wrong_target_or_claim_is_caught():
    graph = makefile_graph("lint: setup\n\tyamllint .\nsanity: collection\n"
                           "test:\n\t$(MAKE) -j1 lint sanity\nsetup:\ncollection: setup\n")
    assert make_problems("`make sanity` (part of `make test`), `make lint`", graph) == []
    assert make_problems("run `make lint-all` first", graph) == ["make lint-all: no such target"]
    assert make_problems("```sh\nmake santy\n```", graph) == ["make santy: no such target"]
    assert make_problems("`make sanity` (part of\n`make lint`)", graph) == [
        "make sanity is part of make lint: false"]
    assert make_problems("`make sanity` (not part of `make test`)", graph) == [
        "make sanity is not part of make test: false"]
    table = "| `make test` | all below but `setup` |\n| `make lint` | x |\n| `make setup` | x |\n"
    assert make_problems(table, graph) == [
        "make test runs all below but ['setup']: setup is run"]


# --- entry points, counts, defaults ------------------------------------------------------------

SPECS = {p.parent.parent.name: yaml.safe_load(p.read_text())["argument_specs"]
         for p in ROOT.glob("roles/*/meta/argument_specs.yml")}


def entry_points_named(text):
    names = re.findall(r"tasks_from: ([a-z_]+)\b", text)
    names += re.findall(r"entry point `([a-z_]+)`", text)
    names += re.findall(r"`([a-z_]+)` entry point", text)
    return names


def entry_point_problems(text, specs):
    known = {name for spec in specs.values() for name in spec}
    problems = [f"entry point {n}: in no role's argument_specs" for n in entry_points_named(text)
                if n not in known]
    # "every public entry point of the three roles (`sglang`: 8, `sglang_router`: 3, ...)"
    for sentence in re.split(r"(?<=[.;])\s", text):
        if "entry point" in sentence:
            problems += [f"{role}: {n} entry points, its spec has {len(specs[role])}"
                         for role, n in re.findall(r"`(\w+)`: (\d+)", sentence)
                         if role in specs and int(n) != len(specs[role])]
    return problems


def scenario_count_problems(text, count):
    problems = []
    for said in re.findall(r"\b(\w+) (?:molecule )?scenarios\b", text, re.I):
        n = WORDS.get(said.lower(), int(said) if said.isdigit() else None)
        if n is not None and n != count:
            problems.append(f"{said} scenarios: there are {count}")
    return problems


def filter_count_problems(text, count):
    return [f"{said} filters: there are {count}"
            for said in re.findall(r"\b(\d+) filters\b", text) if int(said) != count]


SPEC_TYPES = {"int": int, "bool": bool, "str": str, "path": str, "list": list, "dict": dict,
              "float": (int, float)}


def default_problems(text, spec):
    """A role README's "`option` (`value`)" and table rows "| `option` | `value` |": the option
    is the role's, the value its spec default, of its type."""
    options = {k: v for entry in spec.values() for k, v in entry.get("options", {}).items()}
    said = re.findall(r"`(sglang\w*)` \(`([^`]*)`\)", text)
    said += re.findall(r"^\|\s*`(sglang\w*)`\s*\|\s*`([^`]*)`", text, re.M)
    problems = []
    for name, value in said:
        if name not in options:
            problems.append(f"{name}: no such option")
            continue
        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError:
            pass  # a template such as "{{ sglang_base_dir }}/tune.json" is a string
        default = options[name].get("default")
        wanted = SPEC_TYPES.get(options[name].get("type", "str"), object)
        if value != default:
            problems.append(f"{name}: documented {value!r}, its default is {default!r}")
        elif value is not None and (not isinstance(value, wanted) or
                                    (wanted is int and isinstance(value, bool))):
            problems.append(f"{name}: {value!r} is not of its type {options[name].get('type')}")
    return problems


SCENARIOS = len(list(ROOT.glob("molecule/*/molecule.yml")))
# One documentation file per filter (scripts/filter_docs.py, held to the filters by its test).
FILTER_COUNT = len(list(ROOT.glob("plugins/filter/*.yml")))


@pytest.mark.parametrize("doc", sorted(_docs()))
def test_entry_points_and_scenario_counts_the_docs_name_exist(doc):
    text = _docs()[doc]
    assert entry_point_problems(text, SPECS) + scenario_count_problems(text, SCENARIOS) \
        + filter_count_problems(text, FILTER_COUNT) == []


@pytest.mark.parametrize("role", sorted(SPECS))
def test_the_defaults_a_role_readme_gives_are_its_spec(role):
    text = (ROOT / "roles" / role / "README.md").read_text()
    assert default_problems(text, SPECS[role]) == []


def test_the_docs_name_entry_points_counts_and_defaults():
    text = "\n".join(_docs().values())
    assert {"main", "step", "worker", "smoke"} <= set(entry_points_named(text))
    assert re.search(r"\w+ scenarios", text) and re.search(r"\d+ filters", text)
    assert len(default_problems((ROOT / "roles/sglang/README.md").read_text(), {})) > 5


def test_a_wrong_entry_point_count_or_default_is_caught():
    specs = {"r": {"main": {"options": {"sglang_t": {"type": "int", "default": 7}}}, "step": {}}}
    assert entry_point_problems("`include_role: tasks_from: step` and entry point `main`",
                                specs) == []
    assert entry_point_problems("the `stepp` entry point", specs) == [
        "entry point stepp: in no role's argument_specs"]
    assert entry_point_problems("every entry point of the roles (`r`: 3)", specs) == [
        "r: 3 entry points, its spec has 2"]
    assert scenario_count_problems("six scenarios; 6 molecule scenarios", 6) == []
    assert scenario_count_problems("| seven scenarios in containers |", 6) == [
        "seven scenarios: there are 6"]
    assert filter_count_problems("(39 filters, every one called)", 39) == []
    assert filter_count_problems("52 filters, 33 called from one place", 39) == [
        "52 filters: there are 39"]
    assert default_problems("- `sglang_t` (`7`): seconds", specs["r"]) == []
    assert default_problems("- `sglang_t` (`null`): none", specs["r"]) == [
        "sglang_t: documented None, its default is 7"]
    assert default_problems("| `sglang_x` | `1` |", specs["r"]) == ["sglang_x: no such option"]


# --- the crash harness's operations in design.md -----------------------------------------------

def harness_operations():
    """The keys of tests/support/crash_points.py's SCENARIOS, read without running it."""
    tree = ast.parse((ROOT / "tests/support/crash_points.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SCENARIOS":
            return [key.value for key in node.value.keys]
    raise AssertionError("no SCENARIOS in crash_points.py")


def summary_problems(text, operations):
    """design.md's copy of `make crash`'s summary: one row per operation of the harness, and the
    runs adding up to the total."""
    block = re.search(r"^operation +points x faults = runs  violations\n(.*?)^(\d+) cut runs",
                      text, re.M | re.S)
    if not block:
        return ["no summary of make crash"]
    rows = re.findall(r"^(.+?)\s+\d+ x [\d-]+\s+=\s+(\d+)\s+\d+$", block.group(1), re.M)
    problems = [f"not an operation of the harness: {name}" for name, _ in rows
                if name not in operations]
    problems += [f"missing: {name}" for name in operations if name not in [r[0] for r in rows]]
    if sum(int(r) for _, r in rows) != int(block.group(2)):
        problems.append(f"the runs add up to {sum(int(r) for _, r in rows)}, not {block.group(2)}")
    return problems


def test_design_md_lists_the_operations_of_the_crash_harness():
    operations = harness_operations()
    assert len(operations) >= 7
    assert summary_problems((ROOT / "docs/design.md").read_text(), operations) == []


def test_a_summary_with_an_operation_left_out_is_caught():
    summary = ("operation      points x faults = runs  violations\n"
               "a: one               2 x 3      =    6  0\n"
               "b: two               1 x 3-4    =    4  0\n"
               "10 cut runs; fault kinds\n")
    assert summary_problems(summary, ["a: one", "b: two"]) == []
    assert summary_problems(summary, ["a: one", "b: two", "c: three"]) == ["missing: c: three"]
    assert summary_problems(summary.replace("10 cut", "11 cut"), ["a: one", "b: two"]) == [
        "the runs add up to 10, not 11"]


# --- links and the front door ------------------------------------------------------------------

def slug(heading):
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def link_problems(path, text):
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            problems.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", dest.read_text(encoding="utf-8"), re.M)
            if anchor not in {slug(h) for h in headings}:
                problems.append(f"{target}: no such heading")
    return problems


@pytest.mark.parametrize("doc", sorted(_docs()))
def test_every_relative_link_leads_somewhere(doc):
    assert link_problems(ROOT / doc, _docs()[doc]) == []


def test_a_broken_link_is_caught():
    readme = ROOT / "README.md"
    assert link_problems(readme, "[d](docs/design.md#the-switch) [x](https://x.y/z)") == []
    assert link_problems(readme, "[d](docs/design.md#the-swich)") == [
        "docs/design.md#the-swich: no such heading"]
    assert link_problems(readme, "[d](docs/nope.md)") == ["docs/nope.md: no such file"]


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move detail into docs/"


# --- measuring.md: the workloads it states -----------------------------------------------------

DEMO_VARS = ROOT / "inventory" / "demo" / "group_vars" / "sglang" / "sglang.yml"


def workload_claims(text):
    """measuring.md's figures of the demo's proof, of SGLang's defaults and of the reference
    profile, as {name: figure} (a name missing when its sentence is gone)."""
    found = {}
    demo = re.search(r"On the demo \(stand-in at (\d+) tok/s per user up to a knee of (\d+) "
                     r"running requests.*?SLOs TTFT p99 (\d+) ms and (\d+) tok/s per user; input "
                     r"(\d+)-(\d+) tokens, output (\d+)-(\d+); levels\s+([\d,\s]+?);", text, re.S)
    if demo:
        keys = ("tok_s", "knee", "ttft_p99_ms", "min_tok_s_per_user", "input_low", "input_len",
                "output_low", "output_len")
        found.update(zip(keys, map(int, demo.groups()[:8])))
        found["levels"] = [int(n) for n in re.findall(r"\d+", demo.group(9))]
    default = re.search(r"random-dataset defaults \(`random-ids`, (\d+) tokens in, (\d+) out, "
                        r"range ratio ([\d.]+), seed (\d+)\)", text)
    if default:
        found["default"] = (int(default[1]), int(default[2]), float(default[3]), int(default[4]))
    reference = re.search(r"`random-ids`, (\d+)-(\d+) tokens in\s+\(\d+ on average\), (\d+)-(\d+) "
                          r"out \(\d+\), seed (\d+)", text)
    if reference:
        found["reference"] = tuple(int(n) for n in reference.groups())
    return found


def workload_truth():
    """The same figures, read from the demo's inventory, sglang_workload's defaults and the
    reference profile."""
    from ansible_collections.sglang.deploy.plugins.module_utils import sglang_workload as workloads

    demo = yaml.safe_load(DEMO_VARS.read_text())
    w = workloads.check(demo["sglang_workload"])
    env = demo["sglang_env"]
    truth = {"tok_s": int(env["SGLANG_STANDIN_TOK_S"]), "knee": int(env["SGLANG_STANDIN_KNEE"]),
             "ttft_p99_ms": demo["sglang_workload_slo"]["ttft_p99_ms"],
             "min_tok_s_per_user": demo["sglang_workload_slo"]["min_tok_s_per_user"],
             "input_low": int(w["input_len"] * w["range_ratio"]), "input_len": w["input_len"],
             "output_low": int(w["output_len"] * w["range_ratio"]), "output_len": w["output_len"],
             "levels": demo["sglang_workload_levels"]}
    d = workloads.check({})
    truth["default"] = (d["input_len"], d["output_len"], d["range_ratio"], d["seed"])
    ref = workloads.check(yaml.safe_load(
        (ROOT / "roles/sglang/profiles/qwen3.6-27b-tp2-mtp.yml").read_text())["workload"])
    truth["reference"] = (int(ref["input_len"] * ref["range_ratio"]), ref["input_len"],
                          int(ref["output_len"] * ref["range_ratio"]), ref["output_len"], ref["seed"])
    return truth


def test_the_workloads_measuring_md_states_are_the_codes():
    claims = workload_claims((ROOT / "docs" / "measuring.md").read_text(encoding="utf-8"))
    assert set(claims) == {"tok_s", "knee", "ttft_p99_ms", "min_tok_s_per_user", "input_low",
                           "input_len", "output_low", "output_len", "levels", "default",
                           "reference"}, sorted(claims)
    truth = workload_truth()
    assert {k: v for k, v in claims.items() if truth[k] != v} == {}, truth


def test_a_workload_figure_the_code_does_not_have_is_caught():
    text = (ROOT / "docs" / "measuring.md").read_text(encoding="utf-8")
    wrong = text.replace("SLOs TTFT p99 3000 ms and 30 tok/s", "SLOs TTFT p99 3000 ms and 35 tok/s")
    claims, truth = workload_claims(wrong), workload_truth()
    assert claims["min_tok_s_per_user"] == 35 != truth["min_tok_s_per_user"]
    assert "levels" not in workload_claims(text.replace("levels\n1, 4, 8, 16;", "levels: all"))


# --- the role READMEs name every default -------------------------------------------------------

def unnamed_defaults(defaults, readme, spec):
    """(the defaults a README does not name in backticks, those no entry point's spec has)."""
    options = {name for entry in (spec.get("argument_specs") or {}).values()
               for name in (entry.get("options") or {})}
    return ([name for name in defaults if f"`{name}`" not in readme],
            [name for name in defaults if name not in options])


@pytest.mark.parametrize("role", sorted(p.name for p in (ROOT / "roles").iterdir()
                                        if (p / "defaults" / "main.yml").exists()))
def test_every_default_of_a_role_is_in_its_readme_and_its_spec(role):
    """Issue 56, part 4: the router's README left out 8 of its 30 defaults; the check said what
    the README gives is right, not that it gives everything."""
    base = ROOT / "roles" / role
    missing = unnamed_defaults(yaml.safe_load((base / "defaults" / "main.yml").read_text()) or {},
                               (base / "README.md").read_text(encoding="utf-8"),
                               yaml.safe_load((base / "meta" / "argument_specs.yml").read_text()))
    assert missing == ([], []), f"{role}: not in README.md {missing[0]}, not in the spec {missing[1]}"


def test_a_default_left_out_is_caught():
    spec = {"argument_specs": {"main": {"options": {"a_x": {}}}}}
    assert unnamed_defaults({"a_x": 1, "a_y": 2}, "`a_x` (1)", spec) == (["a_y"], ["a_y"])


# --- design.md's picture of the house ----------------------------------------------------------

PICTURE_PATH = re.compile(r"(?<![\w./<-])((?:roles|plugins|playbooks|tests)/[\w./-]+\.(?:py|yml|j2)"
                          r"|(?:inputs|host|env|release|service|proof|rollback)/[\w_]+\.yml"
                          r"|deploy\.yml)")


def picture_files(text):
    """The files design.md's first picture names, as paths from the clone's root (a task file
    named by its phase folder is the deploy role's)."""
    block = text.split("```text", 1)[1].split("```", 1)[0]
    found = []
    for path in PICTURE_PATH.findall(block):
        found.append(path if "/" not in path or path.split("/")[0] in
                     ("roles", "plugins", "playbooks", "tests") else f"roles/sglang/tasks/{path}")
    return found


def test_design_md_opens_with_the_house_and_each_file_it_names_exists():
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    assert text.index("```text") < text.index("## The steps")
    files = picture_files(text)
    assert len(files) >= 20, files
    assert [f for f in files if not (ROOT / f).is_file()] == []


def test_a_file_the_picture_names_wrongly_is_caught():
    text = "```text\n  host/lokc.yml  plugins/modules/sglang_gone.py\n```\n"
    assert [f for f in picture_files(text) if not (ROOT / f).is_file()] == [
        "roles/sglang/tasks/host/lokc.yml", "plugins/modules/sglang_gone.py"]
