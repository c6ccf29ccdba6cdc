# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""The cleanup of a base dir: the oldest releases beyond the limits removed, with the envs no
release left names and the entries of uv's cache only they used.

Never `current`, the rollback target (the newest good release that is not current) nor a
release whose manifest cannot be read. Every tree is renamed into a trash directory before it is
removed (sglang_files.discard), so a cut cleanup leaves whole trees or none; the next run
empties the trash. What it frees is measured (du before and after, a hardlinked file once).
"""

import os

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_envs as envs
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_release_store as store
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_files import discard
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_releases import (
    ReleaseError, release_path)


def _doomed(state, keep_good, keep_other):
    """The releases beyond the limits, oldest first; never current nor the rollback target."""
    protected = {state["current"], state["previous_good"]} - {None}
    # A release rolled back from by hand had been proven good: it is kept like one.
    proven = ("good", "rolled-back")
    readable = [m for m in state["releases"] if m.get("status") != "unreadable"]
    good = [m["id"] for m in readable if m.get("status") in proven]
    other = [m["id"] for m in readable if m.get("status") not in proven]
    oldest = good[:max(0, len(good) - keep_good)] + other[:max(0, len(other) - keep_other)]
    return sorted(r for r in oldest if r not in protected)


def _unnamed_envs(base_dir, kept, env_link):
    """The envs no kept release names and `env_link` does not point at."""
    named = {m.get("env") for m in kept}
    if env_link:
        named.add(envs.link_target(env_link))
    return [e for e in envs.listing(base_dir) if e not in named]


def cleanup(base_dir, keep_good=5, keep_other=3, check_mode=False, env_link=None):
    """Delete the oldest releases beyond the limits; never current or the rollback target,
    never a release whose manifest cannot be read (it may have been good). The envs no kept
    release names go with them, never the one `env_link` points at, and so does the share of
    uv's cache that only they used. Each tree is renamed into a trash directory before it is
    removed, so a cut cleanup leaves whole trees or none; the next run empties the trash.
    `freed_bytes` is measured (du before and after, a hardlinked file once), not estimated."""
    if keep_good < 0 or keep_other < 0:
        raise ReleaseError("keep_good and keep_other must be 0 or more")
    if check_mode:
        return _cleanup(base_dir, keep_good, keep_other, True, env_link)
    with store.serialised(base_dir), envs.lock(base_dir):
        store.recover(base_dir)
        envs.recover(base_dir)
        return _cleanup(base_dir, keep_good, keep_other, False, env_link)


def _cleanup(base_dir, keep_good, keep_other, check_mode, env_link):
    state = store.info(base_dir)
    doomed = _doomed(state, keep_good, keep_other)
    kept = [m for m in state["releases"] if m["id"] not in doomed]
    doomed_envs = _unnamed_envs(base_dir, kept, env_link)
    left = [e for e in envs.listing(base_dir) if e not in doomed_envs]
    before = envs.disk_usage([envs.envs_dir(base_dir)])
    if not check_mode:
        for release in doomed:
            discard(release_path(base_dir, release), os.path.join(base_dir, store.TRASH))
        for env in doomed_envs:
            discard(envs.env_path(base_dir, env), envs.trash_dir(base_dir))
    cache = envs.reclaim_cache(base_dir, _packages_of(base_dir, left), check_mode)
    after = envs.disk_usage([envs.envs_dir(base_dir)])
    return {"changed": bool(doomed or doomed_envs or cache), "removed": doomed,
            "current": state["current"], "kept": [m["id"] for m in kept],
            "removed_envs": doomed_envs, "removed_cache": cache,
            "envs_disk_bytes": after, "freed_bytes": before - after,
            "unreadable": [m["id"] for m in state["releases"] if m.get("status") == "unreadable"]}


def _packages_of(base_dir, kept_envs):
    """The package lines of the kept envs (their markers)."""
    return [line for env in kept_envs
            for line in (envs.read_marker(envs.env_path(base_dir, env)) or {}).get("packages", [])]
