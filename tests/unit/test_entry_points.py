"""Every playbook validates its variables through the role's argument spec for its entry point.

`include_role: tasks_from: smoke.yml` looks up an entry point named `smoke.yml`, finds none
and validates nothing; `tasks_from: smoke` applies the spec. Each playbook runs here with a
wrongly typed variable against a host that cannot be reached: the argument spec must refuse it
on the controller, before any task needs the host. The same run with a well typed value passes
the validation and only then fails at the first task that needs the host (the control).
"""

import json
import os
import re
import subprocess

import pytest
import yaml

from support import ROOT

INVENTORY = """
all:
  children:
    sglang:
      hosts:
        unreachable-host:
          # Nothing listens on port 1: any task that needs the host fails at once.
          ansible_connection: ssh
          ansible_host: 127.0.0.1
          ansible_port: 1
          ansible_ssh_common_args: -o ConnectTimeout=2 -o BatchMode=yes
"""

ENTRY_POINTS = [
    ("deploy.yml", "main"),
    ("playbooks/smoke.yml", "smoke"),
    ("playbooks/rollback.yml", "rollback"),
    ("playbooks/doctor.yml", "doctor"),
    ("playbooks/preflight.yml", "preflight"),
]


def run_playbook(tmp_path, playbook, extravars):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(INVENTORY, encoding="utf-8")
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_RETRY_FILES_ENABLED="False",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    proc = subprocess.run(
        ["ansible-playbook", "-i", str(inventory), playbook, "-e", json.dumps(extravars)],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode != 0, proc.stdout[-2000:]
    report = json.loads(proc.stdout[proc.stdout.index("{"):])
    tasks = [(task["task"]["name"], task["hosts"].get("unreachable-host", {}))
             for play in report["plays"] for task in play["tasks"]]
    return tasks


def first_failure(tasks):
    for name, result in tasks:
        if result.get("failed") or result.get("unreachable"):
            return name, result
    raise AssertionError(f"no task failed: {[name for name, _ in tasks]}")


@pytest.mark.parametrize("playbook,entry_point", ENTRY_POINTS)
def test_playbook_refuses_a_wrongly_typed_variable(tmp_path, playbook, entry_point):
    tasks = run_playbook(tmp_path, playbook, {"sglang_port": "thirty thousand"})
    name, result = first_failure(tasks)
    assert f"Validating arguments against arg spec '{entry_point}'" in name, name
    assert "sglang_port" in result["msg"] and "int" in result["msg"], result["msg"]


@pytest.mark.parametrize("playbook,entry_point", ENTRY_POINTS)
def test_a_well_typed_variable_passes_the_same_spec(tmp_path, playbook, entry_point):
    tasks = run_playbook(tmp_path, playbook, {"sglang_port": 30001, "sglang_model_path": "/srv/m"})
    validated = [result for name, result in tasks
                 if f"Validating arguments against arg spec '{entry_point}'" in name]
    assert validated and not validated[0].get("failed"), validated
    name, result = first_failure(tasks)
    assert "Validating arguments" not in name, name
    # Every input check on the controller passed: the first task that fails needs the host.
    assert result.get("unreachable"), (name, result.get("msg"))


def test_three_bad_inputs_are_refused_in_one_run_each_on_its_own_line(tmp_path):
    """Issue 46: one assert checks every input on the controller, before the host is reached,
    and prints each violation (the variable, its value, what to change); a key never shows."""
    key = "not-a-key-Zq9"  # too short: refused, its value never printed
    tasks = run_playbook(tmp_path, "deploy.yml", {
        "sglang_port": 70000, "sglang_api_key": key, "sglang_expect": {"decode_cuda_graph": "maybe"}})
    name, result = first_failure(tasks)
    assert name.endswith("Refuse inputs the role cannot use, all of them at once"), name
    lines = result["msg"].splitlines()
    assert lines[0] == "Refused before any change on unreachable-host: 3 input(s) to change:", lines
    assert lines[1] == "- sglang_port = 70000: sglang_port: 70000 is not a TCP port (1-65535)"
    assert lines[2].startswith('- sglang_expect = {"decode_cuda_graph": "maybe"}: '
                               "sglang_expect.decode_cuda_graph: 'maybe' is not one of "
                               "required, auto, off"), lines[2]
    assert lines[3].startswith('- sglang_api_key = "<redacted>": sglang_api_key: must be a token '
                               "of 16-512 characters"), lines[3]
    assert len(lines) == 4, lines
    assert key not in json.dumps(tasks)


PLAYBOOKS = [playbook for playbook, _ in ENTRY_POINTS] + ["playbooks/upgrade.yml",
                                                          "playbooks/tune.yml"]


def dict_options():
    """Every mapping-typed option of every entry point of the three roles."""
    names = set()
    for spec in ROOT.glob("roles/*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(spec.read_text(encoding="utf-8"))["argument_specs"].values():
            names |= {name for name, option in (entry.get("options") or {}).items()
                      if option.get("type") == "dict"}
    return sorted(names)


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_each_optional_input_absent_reaches_the_host(tmp_path, playbook):
    """The README's inline profile with only its required key, and every mapping input given
    with none of its optional keys: each playbook's checks pass on the controller (a key read
    without a default would stop it there) and the first task to fail is the first on the host."""
    extravars = {name: {} for name in dict_options()}
    extravars["sglang_profile"] = {"model": {"path": "/srv/models/m"}}
    # An empty search space is refused on purpose (nothing to tune): one knob, nothing else.
    extravars["sglang_tune_space"] = {"args": {"speculative-num-steps": [1, 2]}}
    name, result = first_failure(run_playbook(tmp_path, playbook, extravars))
    assert result.get("unreachable"), (name, result.get("msg"))



def test_the_tuner_refuses_a_wrongly_typed_setting_before_the_host(tmp_path):
    """playbooks/tune.yml runs the sglang_tune role: its spec checks the sglang_tune_* settings
    first, on the controller; well typed, they pass and the first task on the host fails."""
    spec = "Validating arguments against arg spec 'main' - Search for the fastest configuration"
    name, result = first_failure(run_playbook(tmp_path, "playbooks/tune.yml",
                                              {"sglang_tune_max_restarts": "thirty"}))
    assert spec in name, name
    assert "sglang_tune_max_restarts" in result["msg"] and "int" in result["msg"], result["msg"]
    tasks = run_playbook(tmp_path, "playbooks/tune.yml",
                         {"sglang_tune_max_restarts": 5, "sglang_model_path": "/srv/m"})
    name, result = first_failure(tasks)
    assert result.get("unreachable"), (name, result)
    assert [n for n, r in tasks if spec in n and not r.get("failed")], tasks


@pytest.mark.parametrize("inventory, host, variable, wheelhouse", [
    ("fleet", "sglang-replica-a", "sglang_pip_wheelhouse_src", "wheelhouse"),
    ("fleet", "sglang-router", "sglang_router_pip_wheelhouse_src", "wheelhouse-router"),
])
def test_the_example_inventories_find_the_clones_wheelhouse_from_anywhere(
        tmp_path, inventory, host, variable, wheelhouse):
    # make demo builds .cache/wheelhouse in the clone; run by hand (playbooks/rollback.yml, or
    # from another directory) the inventory still finds it: not through playbook_dir.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_DEPLOY_")}
    env.update(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    proc = subprocess.run(
        ["ansible", host, "-i", str(ROOT / "inventory" / inventory), "-c", "local",
         "-m", "ansible.builtin.debug", "-a", f"var={variable}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True, timeout=300)
    answer = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][host]
    assert answer[variable] == str(ROOT / ".cache" / wheelhouse)


def test_the_demo_host_installs_from_the_wheelhouse_make_demo_mounts():
    """The demo host's ml-env is the full install: its wheelhouse is the directory make demo
    mounts (nothing copied), the one the Makefile names; molecule's hosts copy group_vars' own."""
    host_vars = yaml.safe_load((ROOT / "inventory/demo/host_vars/sglang-demo.yml").read_text())
    group = yaml.safe_load((ROOT / "inventory/demo/group_vars/sglang/sglang.yml").read_text())
    mounts = re.findall(r"-v \$\(CURDIR\)/(\S+):(\S+):ro", (ROOT / "Makefile").read_text())
    assert mounts == [(".cache/wheelhouse-demo", host_vars["sglang_pip_wheelhouse"])]
    assert host_vars["sglang_pip_wheelhouse_src"] == "" and host_vars["sglang_pip_no_deps"] is False
    assert group["sglang_pip_no_deps"] is True and "wheelhouse" in group["sglang_pip_wheelhouse_src"]
