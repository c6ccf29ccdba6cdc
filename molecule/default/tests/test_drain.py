"""No request cut by a restart: a client sends long streaming requests without pause through a
deploy and a rollback on one host; SGLang (the stand-in does as SGLang does on SIGTERM) answers
/health with 503 and finishes what it holds before it exits."""

import json
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
from support.runner import ANY_SPEED, play, podman_exec  # noqa: E402

CONTAINER = "sglang-default"
CLIENT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]) / "tests" / "support" / "drain_client.py"
OUT, STOP = "/tmp/drain.json", "/tmp/drain.stop"
BASE = "/opt/sglang"
# The demo's stand-in speed, with one more variable: a new release, hence a restart.
CHANGED_ENV = {"SGLANG_STANDIN_TOK_S": "55", "SGLANG_STANDIN_TTFT_MS": "250",
               "SGLANG_STANDIN_TOKENS_PER_CHUNK": "3", "SGLANG_STANDIN_KNEE": "8", "DRAIN_TEST_MARK": "1"}
STOPPED = re.compile(r"stopped in ([0-9.]+) s after SGLang finished the ([0-9.]+) requests")


def counts():
    out = podman_exec(CONTAINER, ["cat", OUT])
    return json.loads(out.stdout) if out.returncode == 0 and out.stdout else {}


def wait_for_completed(more_than, what, bound_s=600):
    """Waits on progress: the client's completed count passing `more_than`."""
    deadline = time.monotonic() + bound_s
    while counts().get("completed", 0) <= more_than:
        assert time.monotonic() < deadline, f"no request completed {what} within {bound_s} s"
        time.sleep(0.5)
    return counts()["completed"]


def drains(out):
    """(seconds, requests waited for) of each stop the play reported."""
    said = [str(e["event_data"]["res"].get("msg")) for e in out["events"]
            if e["event"] == "runner_on_ok"
            and e["event_data"].get("task") == "Say what the stop waited for"]
    return [(float(m.group(1)), float(m.group(2))) for m in map(STOPPED.search, said) if m]


def test_no_request_is_cut_by_a_deploy_or_a_rollback(host):
    before = host.check_output(f"readlink {BASE}/current")
    podman_exec(CONTAINER, ["sh", "-c", f"cat > /tmp/drain_client.py; rm -f {OUT} {STOP}"],
                CLIENT.read_text())
    host.check_output(f"nohup python3 /tmp/drain_client.py --url http://127.0.0.1:30000 "
                      f"--key-file {BASE}/secrets.json --out {OUT} --stop {STOP} "
                      ">/tmp/drain_client.log 2>&1 < /dev/null &")
    try:
        done = wait_for_completed(2, "before the deploy")
        deploy = play("deploy.yml", extravars={"sglang_env": CHANGED_ENV, **ANY_SPEED})
        assert deploy["status"] == "successful", deploy["msg"]
        assert host.check_output(f"readlink {BASE}/current") != before
        done = wait_for_completed(done, "after the deploy")
        rollback = play("playbooks/rollback.yml")
        assert rollback["status"] == "successful", rollback["msg"]
        assert host.check_output(f"readlink {BASE}/current") == before
        wait_for_completed(done, "after the rollback")
    finally:
        podman_exec(CONTAINER, ["touch", STOP])
    final = counts()
    stops = {"deploy": drains(deploy), "rollback": drains(rollback)}
    print(f"client: {final}; drains (seconds, requests waited for): {stops}")
    assert final["cut"] == 0, final
    for name, seen in stops.items():
        assert len(seen) == 1, (name, seen)
        seconds, waited = seen[0]
        assert waited >= 1, f"the {name}'s stop waited for no request: the client was idle"
