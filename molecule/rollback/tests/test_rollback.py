"""Every failure after activation puts the previous good release back; rollback on demand.

The tests run in order on one host: converge made release A (good).
"""

import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
from support.runner import api, play  # noqa: E402

BASE = "/opt/sglang"
# The demo's stand-in knobs (inventory/demo/group_vars): sglang_env replaces them all.
KNOBS = {"SGLANG_STANDIN_TOK_S": "55", "SGLANG_STANDIN_TTFT_MS": "250",
         "SGLANG_STANDIN_TOKENS_PER_CHUNK": "3"}
STATE = {}


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


def test_release_a_is_good(host):
    STATE["a"] = current(host)
    a = manifest(host, STATE["a"])
    assert a["status"] == "good"
    assert a["preflight"]["ok"] and a["verification"]["ok"]
    assert a["smoke"]["levels"][0]["decode_tok_s_per_user"] > 45
    assert serves(host)


@pytest.mark.parametrize(
    "case, env, step, why",
    [
        ("refuses-to-start", {"SGLANG_STANDIN_REFUSE_FLAG": "enable-metrics"},
         "Wait until SGLang generates tokens", "crashes during start"),
        ("slower-than-the-floor", {"SGLANG_STANDIN_TOK_S": "30"},
         "Refuse a release slower than the floor or than the one it replaces",
         "is below the floor of 45"),
        ("decode-graph-resolved-off",
         {"SGLANG_STANDIN_RESOLVED": json.dumps(
             {"cuda_graph_config": {"decode": {"backend": "disabled", "max_bs": 0},
                                    "prefill": {"backend": "disabled", "max_bs": 0}}})},
         "Refuse a server that did not resolve what is required",
         "decode_cuda_graph: required by sglang_expect, but the server resolved off"),
    ],
)
def test_a_failure_after_activation_restores_a(host, case, env, step, why):
    out = play("deploy.yml", {"sglang_env": {**KNOBS, **env}})
    assert out["status"] == "failed", case
    assert out["failed_task"] == "Fail with what happened"
    match = re.search(r"Rolled back: (\S+) \(sglang 0\.5\.23\) serves again, ([0-9.]+) s after",
                      out["msg"])
    assert match and match.group(1) == STATE["a"], out["msg"]
    print(f"\n{case}: previous release serving again {match.group(2)} s after the failure")
    assert step in out["msg"] and why in out["msg"]
    assert current(host) == STATE["a"]
    assert serves(host)
    failed = manifest(host, newest(host))
    assert failed["status"] == "failed" and step in failed["reason"]
    assert failed["preflight"]["ok"]  # it passed preflight: the failure came after going live
    if case == "slower-than-the-floor":  # the evidence is kept for the post-mortem
        assert failed["smoke"]["levels"][0]["decode_tok_s_per_user"] < 45


def test_a_good_release_e_then_rollback_by_hand_to_a(host):
    out = play("deploy.yml", {"sglang_env": {**KNOBS, "SGLANG_STANDIN_TTFT_MS": "240"}})
    assert out["status"] == "successful", out["msg"]
    STATE["e"] = current(host)
    assert STATE["e"] != STATE["a"] and manifest(host, STATE["e"])["status"] == "good"
    assert manifest(host, STATE["e"])["smoke"]["levels"][0]["ttft_ms_p50"] < 250

    check = play("playbooks/rollback.yml", {"sglang_rollback_to": STATE["a"]},
                 check=True, diff=True)
    assert check["status"] == "successful"
    diffs = [e["event_data"]["res"]["diff"] for e in check["events"]
             if e["event"] == "runner_on_ok" and (e["event_data"].get("res") or {}).get("diff")]
    assert any('SGLANG_STANDIN_TTFT_MS="240"' in d.get("before", "") for ds in diffs
               for d in (ds if isinstance(ds, list) else [ds]))
    assert current(host) == STATE["e"]  # check mode changed nothing

    # The ml-env drifts while E serves (a package removed by hand): the rollback puts back
    # A's whole recorded set (packages.txt), not only its sglang version.
    recorded = host.check_output(f"cat {BASE}/releases/{STATE['a']}/packages.txt").splitlines()[1:]
    assert any(line.lower().startswith("pyyaml==") for line in recorded)
    host.run_expect([0], f"{VENV}/bin/python -m pip uninstall -y -q pyyaml")
    before = freeze(host)
    out = play("playbooks/rollback.yml", {"sglang_rollback_to": STATE["a"]})
    assert out["status"] == "successful", out["msg"]
    after = freeze(host)
    print(f"\npip freeze before the rollback: {before}\npip freeze after: {after}")
    assert not any(p.lower().startswith("pyyaml==") for p in before)
    assert installed(host) == sorted(recorded)
    assert current(host) == STATE["a"] and serves(host)
    assert manifest(host, STATE["a"])["status"] == "good"
    assert manifest(host, STATE["e"])["status"] == "rolled-back"


def test_a_no_change_rerun_changes_nothing(host):
    before = releases(host)
    out = play("deploy.yml")
    assert out["status"] == "successful"
    assert out["changed"] == 0
    assert releases(host) == before and current(host) == STATE["a"]


def test_rollback_refuses_a_failed_release(host):
    failed = [r for r in releases(host) if manifest(host, r)["status"] == "failed"]
    out = play("playbooks/rollback.yml", {"sglang_rollback_to": failed[0]})
    assert out["status"] == "failed" and "its status is failed" in out["msg"]
    assert current(host) == STATE["a"]


def test_a_second_run_is_refused_while_another_holds_the_lock(host):
    lock = f"{BASE}/.deploy.lock"
    host.check_output(f"""echo '{{"run_id": "other", "owner": "bob@ctl (Deploy SGLang)", \
"since": '$(date +%s)'}}' > {lock}""")
    try:
        out = play("deploy.yml", {"sglang_env": {**KNOBS, "SGLANG_STANDIN_TTFT_MS": "230"}})
        assert out["status"] == "failed"
        assert "another deploy or rollback holds" in out["msg"] and "bob@ctl" in out["msg"]
        assert current(host) == STATE["a"]
        assert host.file(lock).contains('"run_id": "other"')  # the other run's lock stays

        host.check_output(f"""echo '{{"run_id": "killed", "owner": "bob@ctl", "since": 0}}' > {lock}""")
        out = play("deploy.yml")
        assert out["status"] == "failed" and "is stale" in out["msg"]
        out = play("deploy.yml", {"sglang_lock_break_stale": True})
        assert out["status"] == "successful" and out["changed"] == 0
        assert not host.file(lock).exists  # released at the end of the run
    finally:
        host.run(f"rm -f {lock}")


def test_no_good_release_was_deleted(host):
    kept = releases(host)
    assert STATE["a"] in kept and STATE["e"] in kept
    assert len(kept) == 5  # A, three failed (the limit is 3), E


def test_a_host_with_no_good_release_is_left_stopped(host):
    """A second service on the same host, whose very first release refuses to start."""
    fresh = {"sglang_base_dir": "/opt/sglang-fresh", "sglang_service_name": "sglang-fresh",
             "sglang_port": 30001,
             "sglang_env": {**KNOBS, "SGLANG_STANDIN_REFUSE_FLAG": "enable-metrics"}}
    out = play("deploy.yml", fresh)
    assert out["status"] == "failed"
    assert "has no previous good release to restore: SGLang is stopped" in out["msg"]
    assert not host.service("sglang-fresh").is_running
    assert serves(host) and current(host) == STATE["a"]  # the other service is untouched
