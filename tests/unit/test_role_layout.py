"""How the roles are wired: what is internal, and which tags reach which tasks.

Variables a role sets itself (set_fact, register) are internal and carry a `__<role>_`
prefix; the inputs (`sglang_*`, `sglang_router_*`) are the ones documented in defaults and
the argument specs.
"""

import re

import yaml

from support import ROOT
from support.role_yaml import fact_writers, facts_of, set_names, strings, tasks_of, walk

TASK_FILES = sorted(ROOT.glob("roles/*/tasks/**/*.yml"))
PLAYBOOKS = [ROOT / "deploy.yml", *sorted(ROOT.glob("playbooks/*.yml"))]


def test_facts_the_roles_set_are_marked_internal():
    offenders = sorted(f"{path}: {name}" for name, paths in writers_of_facts().items()
                       for path in paths if not name.startswith("__sglang_"))
    assert not offenders, offenders


def test_an_escape_in_a_template_is_one_yaml_made():
    """`join('\\n')` in a block or plain scalar reaches Jinja as a backslash and an n, and the
    operator reads one line with \\n in it: such a template is double-quoted, where YAML makes
    the newline."""
    offenders = [f"{path.relative_to(ROOT)}: {text.strip()[:70]}"
                 for path in TASK_FILES + PLAYBOOKS
                 for text in strings(yaml.safe_load(path.read_text(encoding="utf-8")))
                 if "{{" in text and re.search(r"""['"]\\n['"]""", text)]
    assert not offenders, offenders


def written(tasks):
    """The names the tasks write, those of the blocks in them too; a key the tuner records
    through `_record.yml` counts as `__sglang_tune.<key>`."""
    for task, _ in walk(tasks):
        yield from set_names(task)
        if str(task.get("ansible.builtin.import_tasks", "")).endswith("_record.yml"):
            yield from (f"__sglang_tune.{key}"
                        for key in (task.get("vars") or {}).get("sglang_tune_record") or {})


def test_a_rescue_leaves_alone_what_its_blocks_condition_reads():
    """A block's `when` holds for its rescue as well, evaluated again at each task: a rescue
    task that changes what the condition reads skips the rest of the rescue without a word.
    (The tuner recorded a crashed candidate's result, which its block's condition read, and so
    never checked that the rollback had put a good release back.)"""
    def base(name):
        return name.split(".")[0]
    offenders = []
    for path in TASK_FILES + PLAYBOOKS:
        for task, _ in tasks_of(path):
            if not task.get("rescue") or "when" not in task:
                continue
            when = task["when"] if isinstance(task["when"], list) else [task["when"]]
            read = set(re.findall(r"__sglang_\w+(?:\.\w+)?", " ".join(map(str, when))))
            offenders += [f"{path.relative_to(ROOT)}: {task.get('name')}: the rescue writes {name}"
                          for name in set(written(task["rescue"]))
                          if any(name in (r, base(r)) or base(name) == r for r in read)]
    assert not offenders, offenders


def test_no_input_is_named_like_an_internal_fact():
    for defaults in ROOT.glob("roles/*/defaults/main.yml"):
        names = yaml.safe_load(defaults.read_text(encoding="utf-8"))
        assert not [name for name in names if name.startswith("_")], defaults


# What --tags preflight may run: reads, checks and reports. The two writes of release/judge.yml
# run only after a release was rendered in this run, which --tags preflight does not do.
READ_ONLY = {"ansible.builtin.assert", "ansible.builtin.set_fact", "ansible.builtin.debug",
             "ansible.builtin.fail", "ansible.builtin.meta", "ansible.builtin.include_tasks",
             "ansible.builtin.import_tasks", "ansible.builtin.include_role",
             "ansible.builtin.import_role",
             *(f"sglang.deploy.{name}" for name in (
                 "sglang_facts", "sglang_host_prereqs", "sglang_pip_check", "sglang_service_state",
                 "sglang_resolve", "sglang_args_check", "sglang_server_info", "sglang_ready",
                 "sglang_journal"))}
ONLY_AFTER_A_RENDER = {"Save preflight.json in the release",
                       "Mark the release failed when preflight refuses it"}
# Rescue steps tagged always: reached only when a selected task failed, and each is gated on
# what an earlier phase did (the package set read before an install).
ONLY_AFTER_A_FAILURE = {"Put the ml-env's package set from before this deploy back"}


def list_tasks(tmp_path, *args):
    import os
    import subprocess
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    sglang:\n      hosts:\n        h1:\n",
                         encoding="utf-8")
    out = subprocess.run(["ansible-playbook", "-i", str(inventory), "deploy.yml", "--list-tasks",
                          *args], cwd=ROOT, capture_output=True, text=True, check=True,
                         env=dict(os.environ, ANSIBLE_FORCE_COLOR="0"))
    return [line.strip().split("\t")[0].split(" : ", 1)[-1] for line in out.stdout.splitlines()
            if "\tTAGS: " in line]


def modules_by_name():
    found = {}
    for path in TASK_FILES:
        for task, _ in tasks_of(path):
            module = next((k for k in task if k not in {
                "name", "when", "register", "vars", "tags", "block", "rescue", "always",
                "changed_when", "failed_when", "check_mode", "no_log", "diff", "run_once",
                "delegate_to", "delegate_facts", "loop", "loop_control", "until", "retries",
                "delay", "ignore_errors", "become", "args", "environment"}), None)
            if module:
                found.setdefault(task["name"], set()).add(module)
    return found


FACTS_READ = ("Read facts from the host (installed sglang sources, model, GPUs, NCCL), "
              "{{ sglang_facts_venv }}")


def test_list_tasks_shows_the_flow(tmp_path):
    names = list_tasks(tmp_path)
    for step in (FACTS_READ,
                 "Read whether the release or the service would change (content, drift, unit, key "
                 "file, account, systemd state)",
                 "Take the host's deploy lock (one deploy or rollback at a time)",
                 "Build the env of the pinned set, or check the one built before, {{ __sglang_prereqs.env.id }}",
                 "Point current at the release and the ml-env link at its env, {{ sglang_venv }}",
                 "Render the release (a new one only when its content differs from current)",
                 "Resolve the release with the installed SGLang, as the unit will run it",
                 "Install the systemd unit",
                 "End this service's leftovers and wait until their port and GPU memory are released",
                 "Start SGLang on the release current points at",
                 "Smoke-test throughput (TTFT, TPOT, tok/s, accept length)",
                 "Mark the release good, with its results"):
        assert step in names, step


def test_tags_preflight_runs_only_read_only_checks(tmp_path):
    names = list_tasks(tmp_path, "--tags", "preflight")
    modules = modules_by_name()
    assert FACTS_READ in names
    assert "Resolve the release with the installed SGLang, as the unit will run it" in names
    for step in ("Take the host's deploy lock (one deploy or rollback at a time)",
                 "Install the systemd unit", "Start SGLang on the release current points at",
                 "End this service's leftovers and wait until their port and GPU memory are released",
                 "Render the release (a new one only when its content differs from current)"):
        assert step not in names, step
    writes = {name: modules.get(name) for name in names
              if name not in ONLY_AFTER_A_RENDER | ONLY_AFTER_A_FAILURE
              and not name.startswith("Validating arguments")
              and not (modules.get(name, set()) <= READ_ONLY)}
    # sglang_release in check mode or state=info, and sglang_free state=checked, only read.
    writes = {name: mods for name, mods in writes.items() if name not in {
        "Read whether the release or the service would change (content, drift, unit, key file, "
        "account, systemd state)",
        "Read every host's releases",
        "Refuse a port or GPU another process holds (this service's leftovers are ended at the start)"}}
    assert not writes, writes


# Task files: an entry point (a spec in meta/argument_specs.yml, `tasks_from: <name>`) has a
# plain name at the top of tasks/; an internal step, imported or included by the role itself,
# lives in the folder of its phase (the deploy role) or starts with `_` (the tuner's few).
HEADED_ROLES = ("sglang", "sglang_tune")
PHASES = ["inputs", "host", "env", "release", "service", "proof", "rollback", "step"]


def entry_points(role):
    specs = yaml.safe_load((ROOT / f"roles/{role}/meta/argument_specs.yml").read_text(encoding="utf-8"))
    return set(specs["argument_specs"])


def test_task_files_are_entry_points_or_marked_internal():
    for role in HEADED_ROLES:
        files = {path.stem for path in (ROOT / f"roles/{role}/tasks").glob("*.yml")}
        public = {name for name in files if not name.startswith("_")}
        assert public == entry_points(role), role


def test_the_deploy_roles_steps_are_in_the_folders_of_their_phases():
    """tasks/ shows the order: the entry points, then one folder per phase, as the role's
    README lists them; no step is left at the top, none nested deeper."""
    tasks = ROOT / "roles/sglang/tasks"
    assert sorted(p.name for p in tasks.iterdir() if p.is_dir()) == sorted(PHASES)
    assert not list(tasks.glob("_*.yml")) and not list(tasks.glob("*/*/*.yml"))
    readme = (ROOT / "roles/sglang/README.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| `(\w+)/` \|", readme, re.M)
    assert listed == PHASES, listed


def test_each_task_file_starts_with_what_it_does_and_the_facts_it_reads_and_sets():
    for role in HEADED_ROLES:
        for path in sorted((ROOT / f"roles/{role}/tasks").glob("**/*.yml")):
            lines = path.read_text(encoding="utf-8").splitlines()
            assert lines[0] == "---" and lines[1].startswith("# "), path
            assert lines[2].startswith("# Reads: "), path
            header = lines[2][2:]
            for line in lines[3:]:
                if not line.startswith("#   "):
                    break
                header += " " + line[4:]
            reads, sets = facts_of(path)
            said = re.fullmatch(r"Reads: (.*?)\. Sets: (.*?)(?: \(.*\))?\.", header)
            assert said, (path, header)
            listed = [[] if part == "no internal fact" else part.split(", ") for part in said.groups()]
            assert listed == [reads, sets], (path.name, header, reads, sets)


def test_an_option_another_entry_point_shares_is_the_main_entry_points_own():
    """An option documented in the main entry point and taken as it is by another entry point is
    a YAML alias of it (`sglang_port: *sglang_port`), not a copy that says "As in the main entry
    point": ansible-doc then shows the whole description wherever the option is."""
    for role in sorted((ROOT / "roles").iterdir()):
        spec = role / "meta" / "argument_specs.yml"
        if not spec.exists():
            continue
        entries = yaml.safe_load(spec.read_text(encoding="utf-8"))["argument_specs"]
        main = (entries.get("main") or {}).get("options") or {}
        for entry, body in entries.items():
            for name, option in (body.get("options") or {}).items():
                text = option.get("description")
                text = " ".join(text) if isinstance(text, list) else str(text)
                assert text.rstrip(".") != "As in the main entry point", \
                    f"{role.name} {entry}: {name}: write `{name}: *{name}` (an alias of main's)"
                if entry != "main" and name in main and option is not main[name]:
                    assert option["description"] != main[name]["description"], \
                        f"{role.name} {entry}: {name} copies main's: write `{name}: *{name}`"


def test_every_spec_default_is_the_roles_default():
    """An option's default is said once, in defaults/main.yml: the argument spec (what
    ansible-doc shows and the validation applies) must say the same value, not a sketch of it."""
    for role in sorted((ROOT / "roles").iterdir()):
        spec = role / "meta" / "argument_specs.yml"
        if not spec.exists():
            continue
        defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text(encoding="utf-8"))
        for entry, body in yaml.safe_load(spec.read_text(encoding="utf-8"))["argument_specs"].items():
            for name, option in (body.get("options") or {}).items():
                if "default" not in option:
                    continue
                where = f"{role.name} {entry}: {name}"
                assert name in defaults, f"{where} has a spec default but none in defaults/main.yml"
                assert option["default"] == defaults[name], \
                    f"{where}: spec default {option['default']!r}, defaults/main.yml {defaults[name]!r}"


def roles_included(role):
    """The roles a role's tasks include or import (include_role, import_role), by short name."""
    names = set()
    for path in (ROOT / "roles" / role / "tasks").glob("**/*.yml"):
        for task, _ in tasks_of(path):
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                if isinstance(task.get(key), dict):
                    names.add(task[key]["name"].rsplit(".", 1)[-1])
    return names - {role}


def test_no_role_includes_a_role_that_includes_it_back():
    """Role inclusion goes one way (sglang_tune -> sglang -> sglang_router): a role that
    included one that includes it back would tie their entry points and variables together."""
    graph = {path.name: roles_included(path.name) for path in (ROOT / "roles").iterdir()}
    assert graph["sglang_tune"] == {"sglang"} and graph["sglang"] == {"sglang_router"}, graph

    def reaches(start, goal, seen=()):
        return any(nxt == goal or (nxt not in seen and reaches(nxt, goal, seen + (nxt,)))
                   for nxt in graph.get(start, ()))

    assert not [role for role in graph if reaches(role, role)], graph


def writers_of_facts():
    """{fact: the task files and playbooks that set it (set_fact, register)}."""
    return fact_writers(TASK_FILES + PLAYBOOKS)


def test_internal_facts_and_entry_points_do_not_grow():
    """A ratchet, lowered as the roles shrink: internal names, names written from more than one
    file (each another file can clobber), and the deploy role's public entry points. Issue 31
    asked for at most 60 names, 5 multi-writer names and 10 entry points; a change that adds one
    must take one away or say why here. Issue 44 added one multi-writer name,
    __sglang_service_state (the read of which release the unit's process runs), and issue 45
    took it away: the deploy reads the service in its release read (__sglang_release_planned
    .service), the rollback entry point alone registers it. Issue 45 added
    three names: __sglang_proof, the proof at the workload (proof/bench.yml), a kind of evidence
    the roles did not have; __sglang_monitoring_promtool_found, where promtool is on the
    Prometheus host (it checks the rules by default where one is installed); and
    __sglang_router_pack_files, whether the router's rules changed (Prometheus is reloaded
    then). Issue 46 made two lazy role vars that read facts facts set once where what they
    derive from is known (__sglang_release_content, release/describe.yml; the unit's
    sandbox and environment, __sglang_unit, inputs/render_args.yml), and took a writer away from
    __sglang_preflight (playbooks/smoke.yml hands the recorded verdict to the check by name),
    and added __sglang_step_result, the step entry point's one output: the tuner read ten of
    the deploy's facts after each step, and now reads none (test_data_flow.py)). Issue 45's
    no-change re-run added __sglang_monitoring_files (the pack and the drift check rendered once
    for the read that compares them and the step that writes them) and took away
    __sglang_monitoring_rules (Prometheus is reloaded by the pack's own write). Issue 54 added
    __sglang_undo_restored: whether the undo of a by-hand rollback found the release that serves
    again good or unproven (sglang_release state=restored), which its failure message says.
    Issue 56 made six block vars that read facts (evaluated again at each task of their block)
    facts worked out once, where what they derive from is known: __sglang_rollback (the by-hand
    rollback's target, chosen under the lock), __sglang_fleet (what the run did to each host),
    __sglang_upgrade_envs (the two sides of a plan), __sglang_doctor (the doctor's prediction,
    verification and gate), __sglang_smoke_gate_result and __sglang_proof_gate (judged after each
    measurement, proof/speed_gate.yml and proof/bench.yml), and two task vars that read facts
    facts too: __sglang_host_check (what the host says of the inputs, host/check.yml) and
    __sglang_tune_measured (a measurement's score, worked out where the tuner measures,
    _measure.yml, for the start, a candidate and a finalist alike)."""
    writers = writers_of_facts()
    multi = sorted(name for name, files in writers.items() if len(files) > 1)
    print(f"internal facts: {len(writers)}, written from more than one file: {len(multi)}: {multi}")
    assert len(writers) <= 73, sorted(writers)
    assert len(multi) <= 1, multi
    assert len(entry_points("sglang")) <= 10, sorted(entry_points("sglang"))


def test_every_reading_of_the_hosts_prerequisites_checks_the_disk():
    """The upgrade plan read the candidate's prerequisites again without the disk a change needs
    (its report then said nothing of a full disk): every call names __sglang_disk_needs."""
    calls = [(path.name, task) for path in TASK_FILES for task, _tags in tasks_of(path)
             if "sglang.deploy.sglang_host_prereqs" in task]
    assert len(calls) >= 2, calls
    for name, task in calls:
        assert task["sglang.deploy.sglang_host_prereqs"].get("disk") == \
            "{{ __sglang_disk_needs }}", (name, task["name"])


def test_a_directory_root_makes_on_a_host_is_never_made_through_a_symlink():
    """The textfile directory task followed a symlink and chmodded its target (the cache
    directory task would have given it to the service user): every directory the roles make
    on a host says follow: false (the controller's own are left alone). The pack's directories
    and the textfile directory are now made by sglang_prometheus_files and sglang_drift, which
    refuse a symlink (test_sglang_prometheus_files.py, test_sglang_drift.py)."""
    made = [(path.name, task) for path in TASK_FILES for task, _tags in tasks_of(path)
            if (task.get("ansible.builtin.file") or {}).get("state") == "directory"
            and task.get("delegate_to") != "localhost"]
    assert len(made) >= 2, made
    assert [(name, task["name"]) for name, task in made
            if task["ansible.builtin.file"].get("follow") is not False] == []
