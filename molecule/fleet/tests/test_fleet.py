"""A fleet: the real SGLang router under systemd in front of two replicas on a private podman
network. Rollouts run with ansible-runner; outcomes come from its events, the router's worker
API and the hosts. Every test runs once, from the router's point of view. Each rollout is a
module-scoped fixture that runs once, after the rollout it builds on, and returns what it saw
right after: the tests assert on that, in whatever order they run."""

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
from support.runner import ANY_SPEED, demo_api_key, play, podman_exec  # noqa: E402

ROUTER, CANARY, OTHER = "sglang-router", "sglang-replica-a", "sglang-replica-b"
REPLICAS = (CANARY, OTHER)
# A release other than the inventory's (its first token 200 ms instead of 250 ms).
GOOD_ENV = {"SGLANG_STANDIN_TOK_S": "55", "SGLANG_STANDIN_TTFT_MS": "200",
            "SGLANG_STANDIN_TOKENS_PER_CHUNK": "3"}


@pytest.fixture(autouse=True)
def once(host):
    if host.backend.get_hostname() != ROUTER:
        pytest.skip("fleet checks run once, on the router host")


def router(path, body=None, key=True):
    """(HTTP status, body) of a request to the router, from the router host; key on stdin."""
    cmd = ["curl", "-s", "-H", "@-", "-w", "\n%{http_code}", f"http://127.0.0.1:30000{path}"]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    out = podman_exec(ROUTER, cmd, f"Authorization: Bearer {demo_api_key()}\n" if key else "\n")
    text, _, status = out.stdout.rpartition("\n")
    return int(status), text


def workers():
    status, text = router("/workers")
    assert status == 200, text
    return {w["url"]: w["is_healthy"] for w in json.loads(text)["workers"]}


def serving(name):
    """(current release, MainPID) of a replica."""
    out = podman_exec(name, ["sh", "-c", "readlink /opt/sglang/current; "
                                         "systemctl show sglang -p MainPID --value"])
    release, pid = out.stdout.split()
    return release.rsplit("/", 1)[1], pid


def releases(name):
    return podman_exec(name, ["ls", "-1", "/opt/sglang/releases"]).stdout.split()


def manifest(name, release):
    return json.loads(podman_exec(
        name, ["cat", f"/opt/sglang/releases/{release}/manifest.json"]).stdout)


def reports(events):
    return "\n".join(e["event_data"]["res"]["msg"] for e in events
                     if e["event"] == "runner_on_ok"
                     and "fleet:" in str((e["event_data"].get("res") or {}).get("msg", "")))


def restarts(events):
    """Hosts in the order their SGLang restarted."""
    return [e["event_data"]["host"] for e in events if e["event"] == "runner_on_ok"
            and e["event_data"].get("task") == "Start SGLang on the release current points at"
            and e["event_data"]["res"].get("changed")]


def completions_through_router(n=4):
    for _ in range(n):
        status, text = router("/v1/completions", {"model": "qwen3.6-27b", "prompt": "Hi",
                                                  "max_tokens": 4})
        assert status == 200, text
        assert json.loads(text)["usage"]["completion_tokens"] == 4


def served_through_router():
    """True, or why completions through the router failed (recorded by a fixture)."""
    try:
        completions_through_router()
    except AssertionError as exc:
        return str(exc)
    return True


def test_router_runs_under_systemd_with_both_replicas_healthy(host):
    assert host.service("sglang-router").is_running and host.service("sglang-router").is_enabled
    assert workers() == {f"http://{name}:30000": True for name in REPLICAS}
    completions_through_router()


def test_router_requires_the_key_and_never_shows_it(host):
    assert router("/v1/models", key=False)[0] == 200  # open in the router, like /health
    assert router("/v1/completions", {"prompt": "Hi", "max_tokens": 2}, key=False)[0] == 401
    key = demo_api_key()
    argvs = host.check_output(
        r"for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f 2>/dev/null; echo; done")
    assert "router_main.py" in argvs and key not in argvs
    assert key not in host.check_output("journalctl --no-pager -o cat")
    secrets = host.file("/opt/sglang-router/secrets.json")
    assert secrets.mode == 0o600 and secrets.user == "sglang-router"


@pytest.fixture(scope="module")
def good_rollout():
    """A release other than converge's, rolled out canary first, then the batch (the order is
    what is tested, not the speed: ANY_SPEED)."""
    before = {name: serving(name) for name in REPLICAS}
    out = play("deploy.yml", {"sglang_env": GOOD_ENV, **ANY_SPEED})
    after = {name: serving(name) for name in REPLICAS}
    return {"before": before, "out": out, "after": after,
            "statuses": {name: manifest(name, after[name][0])["status"] for name in REPLICAS},
            "workers": workers()}


@pytest.fixture(scope="module")
def failing_canary(good_rollout):
    """A new release whose decode speed (20 tok/s) is below the profile's floor (45)."""
    before = {name: serving(name) for name in REPLICAS}
    other_releases = releases(OTHER)
    out = play("deploy.yml", {"sglang_env": {**GOOD_ENV, "SGLANG_STANDIN_TOK_S": "20"}})
    failed = sorted(releases(CANARY))[-1]
    return {"before": before, "other_releases_before": other_releases, "out": out,
            "canary": serving(CANARY), "failed_status": manifest(CANARY, failed)["status"],
            "other": serving(OTHER), "other_releases": releases(OTHER), "workers": workers(),
            "served": served_through_router()}


@pytest.fixture(scope="module")
def rerun(failing_canary):
    """The good release's values again."""
    return play("deploy.yml", {"sglang_env": GOOD_ENV, **ANY_SPEED})


@pytest.fixture(scope="module")
def two_nodes(rerun):
    """One model over the two replicas (check mode): without, then with a batch of 2."""
    nodes = {"sglang_nodes_group": "sglang", "sglang_env": GOOD_ENV,
             "sglang_server_args": {"tp-size": 4}, "sglang_expect": {"tp_size": 4},
             "sglang_nccl_env": {"NCCL_SOCKET_IFNAME": "eth0"}}
    split = play("deploy.yml", nodes, check=True)
    out = play("deploy.yml", {**nodes, "sglang_rollout_serial": [2]}, check=True, diff=True)
    return {"split": split, "out": out, "workers": workers()}


def test_a_rollout_goes_canary_first_then_the_batch(good_rollout):
    out, before, after = good_rollout["out"], good_rollout["before"], good_rollout["after"]
    assert out["status"] == "successful", out["msg"]
    assert restarts(out["events"]) == [CANARY, OTHER]
    for name in REPLICAS:
        release, pid = after[name]
        assert release != before[name][0] and pid != before[name][1]
        assert good_rollout["statuses"][name] == "good"
    # Each replica left the router before its restart and came back after its smoke test.
    membership = [(e["event_data"]["host"], e["event_data"]["task"].rsplit(" ", 1)[1])
                  for e in out["events"] if e["event"] == "runner_on_ok"
                  and e["event_data"].get("task", "").startswith("Router membership")]
    assert membership == [(CANARY, "absent"), (CANARY, "present"),
                          (OTHER, "absent"), (OTHER, "present")]
    report = reports(out["events"])
    assert "fleet: 2 hosts serving 1 release content(s)" in report
    assert report.count("deployed in this run") == 2
    assert good_rollout["workers"] == {f"http://{name}:30000": True for name in REPLICAS}


def test_a_failing_canary_stops_the_rollout_and_the_router_keeps_serving(failing_canary):
    seen, before = failing_canary, failing_canary["before"]
    out = seen["out"]
    assert out["status"] == "failed"
    assert "Rolled back" in out["msg"] and "below the floor" in out["msg"]
    # The canary serves its previous release again (rolled back), the other was not touched.
    assert seen["canary"][0] == before[CANARY][0]
    assert seen["failed_status"] == "failed"
    assert seen["other"] == before[OTHER]
    assert seen["other_releases"] == seen["other_releases_before"]
    assert restarts(out["events"]) == [CANARY, CANARY]  # the failed start, then the rollback
    report = reports(out["events"])
    assert f"{CANARY}" in report and "failed in this run" in report
    assert "not reached: unchanged" in report
    # The router serves both again: the restored canary went back in after its readiness.
    assert seen["workers"] == {f"http://{name}:30000": True for name in REPLICAS}
    assert seen["served"] is True, seen["served"]


def test_a_rerun_changes_nothing(rerun):
    assert rerun["status"] == "successful", rerun["msg"]
    assert rerun["changed"] == 0


def test_one_model_over_two_nodes_renders_ranks_and_restarts_rank_0_first(two_nodes):
    """What CI can prove of multi-node without GPUs: the rendering, the batch rule and the
    restart order (check mode; the stand-in does not join ranks)."""
    split = two_nodes["split"]
    assert split["status"] == "failed"
    assert "must restart together" in split["msg"]
    assert "sglang_rollout_serial" in split["msg"]

    out = two_nodes["out"]
    assert out["status"] == "successful", out["msg"]
    diffs = {e["event_data"]["host"]: repr(e["event_data"]["res"].get("diff"))
             for e in out["events"] if e["event"] == "runner_on_ok"
             and e["event_data"].get("task", "").startswith("Render the release")}
    for rank, name in enumerate(REPLICAS):
        assert "nnodes: 2" in diffs[name] and f"node-rank: {rank}" in diffs[name]
        assert "dist-init-addr: sglang-replica-a:50000" in diffs[name]
        assert "NCCL_SOCKET_IFNAME" in diffs[name]  # the host's NCCL variables, in sglang.env
    # Check mode: both ranks would stop (and drain); then rank 0 starts first, then the other.
    stops = {e["event_data"]["host"] for e in out["events"] if e["event"] == "runner_on_ok"
             and e["event_data"].get("task", "").startswith("Stop the release that served")
             and e["event_data"]["res"].get("changed")}
    assert stops == set(REPLICAS)
    order = [(e["event_data"]["host"], e["event_data"]["task"]) for e in out["events"]
             if e["event"] == "runner_on_ok" and e["event_data"].get("task", "").startswith("Start")]
    assert order == [(CANARY, "Start SGLang on the release current points at"),
                     (OTHER, "Start the other ranks once rank 0 started")]
    # Check mode changed nothing: both replicas still serve what they served.
    assert two_nodes["workers"] == {f"http://{name}:30000": True for name in REPLICAS}


# A client of the router for the length of a rollout: completions one after another until told
# to stop, bounded in count and in time; each answer's HTTP status on a line. The key is read
# from a 0600 file written through stdin, never an argv.
CLIENT = """
umask 077; cat > /tmp/client.hdr
end=$(( $(date +%s) + 1200 )); n=0; rm -f /tmp/client.codes /tmp/client.stop
while [ ! -e /tmp/client.stop ] && [ $n -lt 4000 ] && [ $(date +%s) -lt $end ]; do
  curl -s -o /dev/null -m 60 -w '%{http_code}\\n' -H @/tmp/client.hdr \
    -H 'Content-Type: application/json' -d '{"model": "qwen3.6-27b", "prompt": "Hi",
    "max_tokens": 16}' http://127.0.0.1:30000/v1/completions >> /tmp/client.codes
  n=$((n + 1))
done
"""


@pytest.fixture(scope="module")
def rollback_under_load(two_nodes):
    """Both replicas rolled back by hand (to converge's release) while a client sends
    completions through the router the whole time."""
    before = {name: serving(name) for name in REPLICAS}
    client = subprocess.Popen(["podman", "exec", "-i", ROUTER, "sh", "-c", CLIENT],
                              stdin=subprocess.PIPE, text=True)
    client.stdin.write(f"Authorization: Bearer {demo_api_key()}\n")
    client.stdin.close()
    try:
        out = play("playbooks/rollback.yml")
    finally:
        podman_exec(ROUTER, ["touch", "/tmp/client.stop"])
        client.wait(timeout=120)  # the request in flight ends within its own 60 s bound
    codes = podman_exec(ROUTER, ["cat", "/tmp/client.codes"]).stdout.split()
    podman_exec(ROUTER, ["rm", "-f", "/tmp/client.hdr", "/tmp/client.codes", "/tmp/client.stop"])
    return {"before": before, "out": out, "codes": codes, "workers": workers(),
            "after": {name: serving(name) for name in REPLICAS}}


def test_a_rollback_by_hand_goes_canary_first_and_no_request_fails_at_the_router(
        good_rollout, rollback_under_load):
    seen = rollback_under_load
    out = seen["out"]
    assert out["status"] == "successful", out["msg"]
    assert restarts(out["events"]) == [CANARY, OTHER]
    membership = [(e["event_data"]["host"], e["event_data"]["task"].rsplit(" ", 1)[1])
                  for e in out["events"] if e["event"] == "runner_on_ok"
                  and e["event_data"].get("task", "").startswith("Router membership")]
    assert membership == [(CANARY, "absent"), (CANARY, "present"),
                          (OTHER, "absent"), (OTHER, "present")]
    for name in REPLICAS:
        assert seen["after"][name][0] == good_rollout["before"][name][0]  # converge's release
        assert seen["after"][name][0] != seen["before"][name][0]
    failed = [c for c in seen["codes"] if c != "200"]
    print(f"\nrequests through the router during the rollback: {len(seen['codes'])}, "
          f"failed: {len(failed)} {sorted(set(failed))}")
    assert len(seen["codes"]) > 10 and not failed
    assert seen["workers"] == {f"http://{name}:30000": True for name in REPLICAS}
