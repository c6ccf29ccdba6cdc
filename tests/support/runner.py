"""Run this project's playbooks against a molecule instance with ansible-runner and read the
outcome from its structured events (not from the printed text)."""

import os
import shutil
import tempfile
from pathlib import Path

import ansible_runner

ROOT = Path(__file__).resolve().parents[2]


def play(playbook, extravars=None, check=False, diff=False):
    """Returns {status, failed_task, msg, changed, events}."""
    data = tempfile.mkdtemp(prefix="runner-")
    cmdline = " ".join(flag for flag, on in (("--check", check), ("--diff", diff)) if on)
    try:
        run = ansible_runner.run(
            private_data_dir=data,
            playbook=str(ROOT / playbook),
            inventory=os.environ["MOLECULE_INVENTORY_FILE"],
            extravars=extravars or {},
            cmdline=cmdline or None,
            envvars={k: v for k, v in os.environ.items() if k.startswith(("ANSIBLE_", "SGLANG_"))},
            quiet=True,
        )
        events = list(run.events)
        failed = [e["event_data"] for e in events if e["event"] == "runner_on_failed"
                  and not e["event_data"].get("ignore_errors")]
        last = failed[-1] if failed else {}
        stats = run.stats or {}
        return {
            "status": run.status,
            "failed_task": last.get("task"),
            "msg": (last.get("res") or {}).get("msg", ""),
            "changed": sum((stats.get("changed") or {}).values()),
            "events": events,
        }
    finally:
        shutil.rmtree(data, ignore_errors=True)
