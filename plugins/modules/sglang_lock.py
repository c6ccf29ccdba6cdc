#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""One deploy or rollback at a time per host: a lock file under the base directory."""

DOCUMENTATION = r"""
module: sglang_lock
short_description: Take or release the per-host deploy lock
description:
  - C(state=present) creates C(<base_dir>/.deploy.lock) atomically (O_EXCL) with who holds it.
    When another run holds it, fails at once saying who and since when. The same run (same
    C(run_id)) may take it again, which renews it (C(since) is now); a run longer than
    C(stale_after), such as a tune sweep, takes it again before each step.
  - A lock older than C(stale_after) seconds, or dated in the future, is reported as stale
    (its run was killed); it is cleared only when C(break_stale) is true. Taking and breaking
    happen under an flock on C(.deploy.lock.guard), so of many runs breaking one stale lock
    exactly one takes it. The lock appears whole (link(2) of a written file) and is read
    without following symlinks; any content that is not a holder counts as an unreadable
    lock dated by its mtime.
  - C(state=absent) releases the lock if this run holds it.
options:
  base_dir:
    description: Base directory of the releases.
    type: path
    required: true
  state:
    description: Take or release.
    type: str
    choices:
    - present
    - absent
    default: present
  run_id:
    description: Identifies this run (the release stamp).
    type: str
    required: true
  owner:
    description: Who runs it (user@controller, playbook).
    type: str
    default: ''
  stale_after:
    description: Seconds after which a lock is stale.
    type: int
    default: 7200
  break_stale:
    description: Clear a stale lock and take it.
    type: bool
    default: false
notes:
  - Not a builtin because there is no equivalent; no builtin takes an exclusive lock
    atomically (link(2) under an flock) and reports or breaks a stale one.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Take the deploy lock of this host
  sglang.deploy.sglang_lock:
    base_dir: /opt/sglang
    run_id: 20261130T101500Z
    owner: alice@controller deploy.yml

- name: Release it
  sglang.deploy.sglang_lock:
    base_dir: /opt/sglang
    run_id: 20261130T101500Z
    state: absent
"""

RETURN = r"""
holder:
  description: The lock's content after this task (or the other run's when refused).
  type: dict
  returned: always
  contains:
    run_id:
      description: The run that holds (or held) the lock.
      type: str
      returned: always
    owner:
      description: Who runs it.
      type: str
      returned: always
    since:
      description: When it was taken (epoch seconds).
      type: int
      returned: always
"""

import contextlib
import json
import math
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_files import flock_guard, write_atomic

LOCK = ".deploy.lock"
# Serialises the breaking of a stale lock; flock is let go when its process dies.
GUARD = ".deploy.lock.guard"
# A `since` further ahead than this (a clock set back, a tampered file) can be broken.
FUTURE_SLACK = 300


class Locked(Exception):
    pass


def _read(path):
    """The holder of the lock at `path` (None when there is none), never following a symlink.

    Whatever the file holds (a JSON list, null, a string or NaN `since`, a dangling symlink),
    the answer is a holder with a numeric `since`: the file's own mtime when it has none.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    held = None
    with contextlib.suppress(OSError, ValueError, UnicodeDecodeError):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, encoding="utf-8") as handle:
            held = json.loads(handle.read(65536))
    if not isinstance(held, dict):
        held = {"run_id": "?", "owner": "unreadable lock file"}
    since = held.get("since")
    if isinstance(since, bool) or not isinstance(since, (int, float)) or not math.isfinite(since):
        held = dict(held, since=info.st_mtime)
    held["run_id"] = str(held.get("run_id"))
    held["owner"] = str(held.get("owner") or "")
    return held


def _create(path, content):
    """Make the lock appear whole, or raise FileExistsError: link(2) never replaces."""
    tmp = f"{path}.{os.getpid()}.{time.monotonic_ns()}"
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(content, handle)
        os.link(tmp, path)
    finally:
        os.unlink(tmp)


def _describe(held):
    try:
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(held["since"]))
    except (OverflowError, OSError, ValueError):
        since = repr(held["since"])
    return f"run {held['run_id']} by {held['owner'] or 'unknown'} since {since}"


def _guard(base_dir):
    """Every taking (and breaking) of the lock happens under this flock, one at a time."""
    return flock_guard(os.path.join(base_dir, GUARD))


def acquire(base_dir, run_id, owner="", stale_after=7200, break_stale=False, now=time.time):
    os.makedirs(base_dir, mode=0o755, exist_ok=True)
    path = os.path.join(base_dir, LOCK)
    mine = {"run_id": run_id, "owner": owner, "since": now()}
    with _guard(base_dir):
        for _unused in range(2):
            try:
                _create(path, mine)
                return True, mine
            except FileExistsError:
                pass
            held = _read(path)
            if held is None:
                continue  # released meanwhile
            if held.get("run_id") == run_id:
                # The same run again (a long sweep takes it before each step): renewed, so
                # that it never looks stale to a run that may break a stale lock.
                renewed = dict(held, since=now())
                write_atomic(path, json.dumps(renewed), 0o644)
                return False, renewed
            age = now() - held["since"]
            who = _describe(held)
            if -FUTURE_SLACK <= age <= stale_after:
                raise Locked(f"another deploy or rollback holds {path}: {who}. Wait for it to "
                             "finish; nothing was changed")
            why = "its time lies in the future" if age < 0 else f"{int(age)} s old"
            if not break_stale:
                raise Locked(f"{path} is stale ({why}, {who}): its run was probably "
                             "killed. Check no deploy is running, then re-run with "
                             "-e sglang_lock_break_stale=true")
            # Under the guard nobody else creates it: what is removed is what was judged.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    raise Locked(f"{path}: could not take the lock")


def release(base_dir, run_id):
    """Remove the lock when `run_id` holds it. Under the guard, as every taking and breaking:
    else a run that broke this one's lock as stale between the read and the unlink would have
    its own lock removed, and a third run would then take it beside it."""
    path = os.path.join(base_dir, LOCK)
    if not os.path.lexists(path):
        return False, {}
    with _guard(base_dir):
        held = _read(path)
        if held is None:
            return False, {}
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
        held = _read(os.path.join(p["base_dir"], LOCK))
        module.exit_json(changed=False, holder=held or {})
    try:
        if p["state"] == "present":
            changed, holder = acquire(p["base_dir"], p["run_id"], p["owner"], p["stale_after"],
                                      p["break_stale"])
        else:
            changed, holder = release(p["base_dir"], p["run_id"])
    except Locked as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"cannot take or release the deploy lock in {p['base_dir']}: {exc}; "
                             "sglang_base_dir must be a writable directory")
    module.exit_json(changed=changed, holder=holder)


if __name__ == "__main__":
    main()
