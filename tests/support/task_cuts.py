"""Crash points between tasks: a run cut (the playbook process SIGKILLed) at each task boundary
of an operation, then the operation run again, with the invariants checked after each.

The module-level harness (crash_points.py) cuts inside one module's file operations; this one
cuts between two Ansible tasks, where a controller that dies leaves the host: the task before
finished, the task after never started, no rescue or always section ran. The boundaries are
enumerated from a run of the operation that is not cut: a cut right after a task that changed
nothing leaves the host as the cut after the last task that changed something before it (same
files, same processes), so the distinct host states are the boundaries after each changed task,
and those are the ones cut (`SGLANG_TEST_CUT_AT_CHANGED`, tests/support/callbacks/sglang_cut.py).

Invariants (docs/design.md#the-switch):
- C1 (cut): `current` names a release whose manifest reads;
- C2 (cut): the unit's process, if one runs, was started from a release on the host;
- N1 (next run): it ends as the operation means to (successful; failed naming the release's
  failure for a deploy that must roll back);
- N2: `current` names the operation's target, and that release is good;
- N3: the unit's process was started from the release `current` names, and it serves.
"""

import json
import os

BASE = "/opt/sglang"
BREAK_LOCK = {"sglang_lock_break_stale": True, "sglang_lock_stale_after": 1}


def serving(host):
    """The release the unit's main process was started from (None without one)."""
    pid = host.check_output("systemctl show -p MainPID --value sglang").strip()
    if pid in ("", "0"):
        return None
    argv = host.run(f"tr '\\0' ' ' < /proc/{pid}/cmdline").stdout.split()
    launcher = next((a for a in argv if a.endswith("/launch.py")), "")
    return launcher.rsplit("/", 2)[-2] if launcher else None


def state(host):
    """What a reboot or the next run finds: current, its status, the process's release."""
    current = host.file(f"{BASE}/current").linked_to.rsplit("/", 1)[-1]
    text = host.run(f"cat {BASE}/releases/{current}/manifest.json").stdout
    try:
        status = json.loads(text).get("status")
    except ValueError:
        status = None
    return {"current": current, "status": status, "serving": serving(host)}


def releases_on(host):
    return set(host.check_output(f"ls -1 {BASE}/releases").split())


def violations_after_cut(host, seen):
    found = []
    if seen["status"] is None:
        found.append(f"C1: current names {seen['current']}, whose manifest does not read")
    if seen["serving"] is not None and seen["serving"] not in releases_on(host):
        found.append(f"C2: the process runs {seen['serving']}, no release on the host")
    return found


def violations_after_next(out, seen, target, ends):
    found = []
    if out["status"] != ends:
        found.append(f"N1: the next run ended {out['status']} ({out['msg'][:200]}), not {ends}")
    if seen["current"] != target or seen["status"] != "good":
        found.append(f"N2: current names {seen['current']} ({seen['status']}), not {target} (good)")
    if seen["serving"] != seen["current"]:
        found.append(f"N3: the process runs {seen['serving']}, current names {seen['current']}")
    return found


def progress(line):
    """A line to SGLANG_TASK_CUTS_LOG as each cut ends (`make crash-tasks` runs for an hour or
    more, its report comes at the end): where it stands, and what a killed run had found."""
    path = os.environ.get("SGLANG_TASK_CUTS_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(line + "\n")


def enumerate_cuts(host, play, operation, every=True, name="operation", at=(), ends=True):
    """Cut `operation` at each boundary after a changed task (`every`), or after the tasks whose
    names start with one of `at` and (`ends`) its first and last, run it again after each, and
    return {boundaries, states, cut, unreached, violations, runs}.

    `operation(k)` runs the operation (cut after its k-th changed task when k is given, else
    whole) and returns (out, target, ends): the run's result, the release it means current to
    name at its end, and the status its run ends with ("successful", or "failed" for a deploy
    whose release must roll back)."""
    whole, _target, meant = operation(None)
    changed = whole["changed_tasks"]
    named = {k for k, task in enumerate(changed, 1) if task.startswith(tuple(at))}
    assert len(named) >= len(at), (at, changed)  # a renamed task must not drop its cut silently
    ks = list(range(1, len(changed) + 1)) if every \
        else sorted(({1, len(changed)} if ends else set()) | named)
    report = {"boundaries": sum(1 for e in whole["events"] if e["event"] in (
        "runner_on_ok", "runner_on_skipped", "runner_on_failed")),
        "states": len(changed), "cut": 0, "runs": 1, "unreached": [],
        # The run not cut must end as the operation means to, or its boundaries prove nothing.
        "violations": [] if whole["status"] == meant else [
            f"the run not cut ended {whole['status']} ({whole['msg'][:300]}), not {meant}"]}
    for k in ks:
        out, target, ends = operation(k)
        report["runs"] += 1
        if not out["cut"] and changed[k - 1] not in out["changed_tasks"]:
            # The task changed nothing in this run, so there was no k-th state to cut at (the
            # cleanup, which removes what the runs so far left beyond the limits, or nothing).
            # Said, not counted as cut; the run's own end is still held to the operation's.
            report["unreached"].append(f"cut {k} ({changed[k - 1]}): the task changed nothing "
                                       "in this run")
            if out["status"] != ends:
                report["violations"].append(f"cut {k} not reached, and the run ended "
                                            f"{out['status']}, not {ends}")
            progress(f"{name}: cut {k} of {len(changed)} ({changed[k - 1]}): not reached, "
                     "the task changed nothing in this run")
            continue
        if not out["cut"]:
            report["violations"].append(f"cut {k} ({changed[k - 1]}): the run was not cut")
            continue
        report["cut"] += 1
        after_cut = state(host)
        found = violations_after_cut(host, after_cut)
        again, target, ends = operation(None, again=True)
        report["runs"] += 1
        found += violations_after_next(again, state(host), target, ends)
        report["violations"] += [f"cut after changed task {k} ({changed[k - 1]}): {v}"
                                 for v in found]
        progress(f"{name}: cut {k} of {len(changed)} ({changed[k - 1]}): "
                 + ("; ".join(found) or "invariants hold"))
    return report


def every_boundary():
    """All boundaries when SGLANG_TASK_CUTS=all (make crash-tasks), else the first and last."""
    return os.environ.get("SGLANG_TASK_CUTS") == "all"
