#!/usr/bin/python
"""One deploy or rollback at a time per host: a lock file under the base directory."""

DOCUMENTATION = r"""
module: sglang_lock
short_description: Take or release the per-host deploy lock
description:
  - C(state=present) creates C(<base_dir>/.deploy.lock) atomically (O_EXCL) with who holds it.
    When another run holds it, fails at once saying who and since when. The same run (same
    C(run_id)) may take it again.
  - A lock older than C(stale_after) seconds is reported as stale (its run was killed); it is
    cleared only when C(break_stale) is true.
  - C(state=absent) releases the lock if this run holds it.
options:
  base_dir: {description: Base directory of the releases., type: path, required: true}
  state: {description: Take or release., type: str, choices: [present, absent], default: present}
  run_id: {description: Identifies this run (the release stamp)., type: str, required: true}
  owner: {description: Who runs it (user@controller, playbook)., type: str, default: ""}
  stale_after: {description: Seconds after which a lock is stale., type: int, default: 7200}
  break_stale: {description: Clear a stale lock and take it., type: bool, default: false}
"""

RETURN = r"""
holder: {description: The lock's content after this task (or the other run's when refused)., type: dict, returned: always}
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

LOCK = ".deploy.lock"


class Locked(Exception):
    pass


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {"run_id": "?", "owner": "unreadable lock file", "since": os.path.getmtime(path)
                if os.path.exists(path) else time.time()}


def acquire(base_dir, run_id, owner="", stale_after=7200, break_stale=False, now=time.time):
    os.makedirs(base_dir, mode=0o755, exist_ok=True)
    path = os.path.join(base_dir, LOCK)
    mine = {"run_id": run_id, "owner": owner, "since": now()}
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            held = _read(path)
            if held.get("run_id") == run_id:
                return False, held
            age = now() - float(held.get("since", 0))
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(held.get("since", 0))))
            who = f"run {held.get('run_id')} by {held.get('owner') or 'unknown'} since {since}"
            if age <= stale_after:
                raise Locked(f"another deploy or rollback holds {path}: {who}. Wait for it to "
                             "finish; nothing was changed")
            if not break_stale:
                raise Locked(f"{path} is stale ({int(age)} s old, {who}): its run was probably "
                             "killed. Check no deploy is running, then re-run with "
                             "-e sglang_lock_break_stale=true")
            os.unlink(path)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(mine, handle)
        return True, mine
    raise Locked(f"{path}: could not take the lock")


def release(base_dir, run_id):
    path = os.path.join(base_dir, LOCK)
    if not os.path.exists(path):
        return False, {}
    held = _read(path)
    if held.get("run_id") != run_id:
        return False, held
    os.unlink(path)
    return True, held


def main():
    module = AnsibleModule(
        argument_spec={
            "base_dir": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "run_id": {"type": "str", "required": True},
            "owner": {"type": "str", "default": ""},
            "stale_after": {"type": "int", "default": 7200},
            "break_stale": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        # A check run changes nothing, so it neither takes nor needs the lock; it still says
        # whether a real run would be refused.
        path = os.path.join(p["base_dir"], LOCK)
        held = _read(path) if os.path.exists(path) else {}
        module.exit_json(changed=False, holder=held)
    try:
        if p["state"] == "present":
            changed, holder = acquire(p["base_dir"], p["run_id"], p["owner"], p["stale_after"],
                                      p["break_stale"])
        else:
            changed, holder = release(p["base_dir"], p["run_id"])
    except Locked as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=changed, holder=holder)


if __name__ == "__main__":
    main()
