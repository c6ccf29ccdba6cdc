"""Run this project's playbooks against a molecule instance with ansible-runner and read the
outcome from its structured events (not from the printed text)."""

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path

import ansible_runner

ROOT = Path(__file__).resolve().parents[2]


ROLLOUT_STOP = "Stop the rollout here"
# For a release whose speed is not what a test is about: the smoke test's regression gate
# compares it with figures measured earlier, on a host whose load may differ (the scenario runs
# beside others, or under a background load: a CI run beside two busy loops measured a good
# release 16% "slower" than the one before); its floors still hold.
ANY_SPEED = {"sglang_smoke_regression_tolerance": 1.0}
DEMO_API_KEY = Path.home() / ".cache" / "sglang-deploy" / "demo-api-key"


def demo_api_key():
    """The key inventory/demo makes on the controller (ansible.builtin.password lookup)."""
    return DEMO_API_KEY.read_text(encoding="utf-8").split()[0]


def podman_exec(container, argv, stdin=""):
    """Run argv in a podman host with `stdin`: what must not be in an argv goes there."""
    return subprocess.run(["podman", "exec", "-i", container, *argv], input=stdin,
                          capture_output=True, text=True, check=False)


def api(container, path, body=None, stream=False, key=True, status_only=False):
    """curl on a podman host, the API key on stdin (`-H @-`): never in an argv or a log.

    testinfra's ansible backend runs commands through the command module, which logs its
    arguments to the host's journal; the key must not go that way."""
    cmd = ["curl", "-s" + ("N" if stream else ""), "-H", "@-", f"http://127.0.0.1:30000{path}"]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    if status_only:
        cmd += ["-o", "/dev/null", "-w", "%{http_code}"]
    else:
        cmd.append("-f")
    header = f"Authorization: Bearer {demo_api_key()}\n" if key else "\n"
    out = podman_exec(container, cmd, header)
    out.check_returncode()
    return out.stdout


CUT_CALLBACKS = ROOT / "tests" / "support" / "callbacks"


def play(playbook, extravars=None, check=False, diff=False, verbosity=0, cut_after=None,
         cut_at_changed=None):
    """Returns {status, failed_task, msg, changed, events, stdout, seconds (wall clock)}, and
    with `cut_after` (a prefix of a task's name) or `cut_at_changed` (n: the n-th task that
    changed the host) `cut`: whether the playbook process was killed right after that task
    ended (tests/support/callbacks/sglang_cut.py)."""
    data = tempfile.mkdtemp(prefix="runner-")
    started = time.monotonic()
    envvars = {k: v for k, v in os.environ.items() if k.startswith(("ANSIBLE_", "SGLANG_"))}
    mark = Path(data) / "cut"
    if cut_after or cut_at_changed:
        def joined(name, value, sep):
            return sep.join(filter(None, (envvars.get(name), value)))
        envvars.update(ANSIBLE_CALLBACK_PLUGINS=joined("ANSIBLE_CALLBACK_PLUGINS",
                                                       str(CUT_CALLBACKS), ":"),
                       ANSIBLE_CALLBACKS_ENABLED=joined("ANSIBLE_CALLBACKS_ENABLED",
                                                        "sglang_cut", ","),
                       SGLANG_TEST_CUT_AFTER=cut_after or "",
                       SGLANG_TEST_CUT_AT_CHANGED=str(cut_at_changed or ""),
                       SGLANG_TEST_CUT_MARK=str(mark))
    cmdline = " ".join(flag for flag, on in (("--check", check), ("--diff", diff)) if on)
    try:
        run = ansible_runner.run(
            private_data_dir=data,
            playbook=str(ROOT / playbook),
            inventory=os.environ["MOLECULE_INVENTORY_FILE"],
            extravars=extravars or {},
            cmdline=cmdline or None,
            envvars=envvars,
            quiet=True,
            verbosity=verbosity,
        )
        events = list(run.events)
        stdout = run.stdout.read()
        # The rollout's own re-raise (deploy.yml) repeats the failure of the step that failed.
        failed = [e["event_data"] for e in events if e["event"] == "runner_on_failed"
                  and not e["event_data"].get("ignore_errors")
                  and e["event_data"].get("task") != ROLLOUT_STOP]
        last = failed[-1] if failed else {}
        stats = run.stats or {}
        return {
            "status": run.status,
            "failed_task": last.get("task"),
            "msg": (last.get("res") or {}).get("msg", ""),
            "changed": sum((stats.get("changed") or {}).values()),
            "changed_tasks": [e["event_data"].get("task") for e in events
                              if e["event"] == "runner_on_ok"
                              and (e["event_data"].get("res") or {}).get("changed")],
            "events": events,
            "stdout": stdout,
            "seconds": time.monotonic() - started,
            "cut": mark.exists(),
        }
    finally:
        shutil.rmtree(data, ignore_errors=True)


# The restart begins with the stop (service/restart.yml: stop, free the port and GPUs, start).
RESTART = "Stop the release that served"
READY = "Wait until SGLang generates tokens"


def restart_phases(out):
    """Where a play that restarts SGLang spent its wall-clock seconds, from its events' times:
    `engine` from the restart's start to readiness proven (the engine's own restart), `before`
    everything up to it (ansible-playbook's start included: the switch), `after` the rest
    (verification, smoke test, records)."""
    def at(event):
        return datetime.fromisoformat(event["created"]).timestamp()

    events = out["events"]
    restart = next(at(e) for e in events if e["event"] == "playbook_on_task_start"
                   and e["event_data"].get("task", "").startswith(RESTART))
    ready = next(at(e) for e in events if e["event"] == "runner_on_ok"
                 and e["event_data"].get("task", "").startswith(READY))
    end = at(next(e for e in events if e["event"] == "playbook_on_stats"))
    engine, after = ready - restart, end - ready
    return {"total": out["seconds"], "engine": engine, "after": after,
            "before": out["seconds"] - engine - after,
            "beyond_engine": out["seconds"] - engine}


def describe_phases(runs):
    """One line per phase: the median over the runs, then each run's figure."""
    return "\n".join(
        f"  {key:<13} median {statistics.median(r[key] for r in runs):6.2f} s   "
        + " ".join(f"{r[key]:6.2f}" for r in runs)
        for key in ("total", "before", "engine", "after", "beyond_engine"))
