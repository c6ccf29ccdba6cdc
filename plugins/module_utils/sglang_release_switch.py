# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Which release serves and what is known of it: the switch of `current` (activate), and the
status a proof or a failure gives a release (mark, restore).

The switch is the one path every change of the serving release takes: the target verified (its
files against its manifest, its env complete and as built), then under the release and envs
locks its env linked (`releases/<id>/env`), the ml-env link made to lead through
`<base_dir>/current/env`, and `current` swapped in one rename. Cut anywhere, `current` names
the old or the new release and the ml-env link leads to that release's env.
"""

import os

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_envs as envs
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_release_store as store
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_files import symlink_atomic
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_releases import (
    MANIFEST, ReleaseError, last_verdict_good, read_current, read_manifest, release_path)

# In each release that names an env: a relative link to it (../../envs/<id>). The ml-env link
# (env_link) points at <base_dir>/current/env once and for all, so that moving `current` (one
# rename) moves both: they always name the same release's env.
ENV_LINK = "env"


def _checked_env(base_dir, manifest, check_mode=False):
    """The id of the release's env, checked (complete, its RECORDs and its tree as built), or
    None for a release that names no env. In check mode an env not built yet is the one the
    step before would have built."""
    env = manifest.get("env")
    if not env:
        return None
    state = envs.check(base_dir, env)
    if check_mode and not state["exists"]:
        return env
    if not state["complete"]:
        raise ReleaseError(f"release {manifest['id']} runs on env {env}, which is not built under "
                           f"{envs.envs_dir(base_dir)}: build it (a rollback rebuilds it from "
                           "the release's packages.txt)")
    if not state["intact"]:
        raise ReleaseError(f"{envs.refusal(state)}; refused, nothing was switched. Run again "
                           "with sglang_env_rebuild=true to build it again from its record")
    return env


def env_link_target(base_dir):
    """Where the ml-env link points, always: the env of the release `current` names."""
    return os.path.join(os.path.abspath(base_dir), "current", ENV_LINK)


def _release_env_wanted(env):
    return os.path.join("..", "..", envs.ENVS, env)


def _release_env_ok(base_dir, release, env):
    link = os.path.join(release_path(base_dir, release), ENV_LINK)
    return os.path.islink(link) and os.readlink(link) == _release_env_wanted(env)


def _link_release_env(base_dir, release, env):
    """releases/<id>/env -> ../../envs/<env> (relative: a moved base dir keeps it)."""
    if env and not _release_env_ok(base_dir, release, env):
        symlink_atomic(_release_env_wanted(env),
                       os.path.join(release_path(base_dir, release), ENV_LINK))


def _env_link_ok(env_link, base_dir):
    return os.path.islink(env_link) and os.readlink(env_link) == env_link_target(base_dir)


def _switch_diff(base_dir, current, release, manifest):
    """--diff of a switch: the target's files and manifest facts against current's."""
    names = sorted(manifest.get("files", {}))
    path = release_path(base_dir, release)
    target = [{"name": n, "content": c, "mode": store.file_mode(os.path.join(path, n))}
              for n, c in store.release_files(base_dir, release, names).items()]
    return store.diff(base_dir, current, target, store.META_DIFF_KEYS, manifest, release)


def activate(base_dir, release, check_mode=False, env_link=None, rolled_back_reason=None):
    """The switch: every change of the release a host serves goes through it.

    The target is verified first (its files against its manifest, its env complete and as
    built); then, under the release and envs locks, after what a cut run left is recovered:
    the release's env link is made, the ml-env link (`env_link`) made to lead through
    `current`, and `current` swapped in one rename. Cut anywhere, `current` names the old or the
    new release, and the ml-env link leads to that release's env. With `rolled_back_reason`
    (a rollback) the release left is marked rolled-back just before `current` moves."""
    manifest = store.require(base_dir, release)
    current = read_current(base_dir)
    env = manifest.get("env")
    linked = envs.link_target(env_link) if env_link else None
    relink = bool(env and env_link and not _env_link_ok(env_link, base_dir))
    result = {"current": current, "release": release, "path": release_path(base_dir, release),
              "created": False, "manifest": manifest,
              "changed": current != release or relink
              or bool(env and not _release_env_ok(base_dir, release, env))}
    if env_link and env:
        result["env_linked"] = linked
    if current != release and current:
        result["diff"] = _switch_diff(base_dir, current, release, manifest)
    if check_mode or not result["changed"]:
        # What the switch would refuse, refused here too (read-only); a real switch checks
        # once, under the locks.
        store.verify(base_dir, release, manifest)
        _checked_env(base_dir, manifest, check_mode)
        return result
    with store.serialised(base_dir), envs.lock(base_dir):
        store.recover(base_dir)
        result["manifest"] = _switch(base_dir, release, env_link, rolled_back_reason)
    return result


def _switch(base_dir, release, env_link, rolled_back_reason=None):
    """The file operations of a switch, in the one order that keeps every cut consistent."""
    manifest = store.require(base_dir, release)
    store.verify(base_dir, release, manifest)
    # The env is checked whether or not the ml-env link is asked: nothing runs unverified.
    checked = _checked_env(base_dir, manifest)
    env = checked if env_link else None
    current = read_current(base_dir)
    _link_release_env(base_dir, release, manifest.get("env"))
    cur_env = (read_manifest(base_dir, current) or {}).get("env") if current else None
    if current:
        _link_release_env(base_dir, current, cur_env)
    # Through current: before the swap when the serving release has its env link (or nothing
    # serves yet), else after it (a release made before envs has none to lead to).
    early = env and (current is None or cur_env)
    if early and not _env_link_ok(env_link, base_dir):
        try:
            envs.switch_link(env_link, env_link_target(base_dir))
        except OSError as exc:
            raise ReleaseError(
                f"the ml-env link {env_link} cannot be made to lead through "
                f"{env_link_target(base_dir)} ({exc.strerror}): free space or give write access "
                f"there (it may be another filesystem than {base_dir}); nothing was switched, "
                f"current still names {current}") from None
    if current != release:
        manifest = _point_current(base_dir, release, current, rolled_back_reason)
    if env and not early and not _env_link_ok(env_link, base_dir):
        envs.switch_link(env_link, env_link_target(base_dir))
    return manifest


def _point_current(base_dir, release, current, rolled_back_reason=None):
    """The manifest changes of an activation, then `current` swapped (under the lock)."""
    manifest = store.require(base_dir, release)
    left = read_manifest(base_dir, current) if current and rolled_back_reason else None
    if isinstance(left, dict):
        # A rollback: the release left is marked first. Cut between the two writes, current
        # still names it, and the next run goes on to the newest good release, the target.
        store.write_json_atomic(os.path.join(release_path(base_dir, current), MANIFEST),
                                dict(left, status="rolled-back", reason=rolled_back_reason,
                                     **{"rolled-back": store.now()}))
    # One release is `active` (live, not yet proven) at a time: an earlier one that never
    # proved itself is superseded, even when two activations raced without the lock.
    for other in store.listing(base_dir):
        if other.get("status") == "active" and other["id"] != release:
            store.write_json_atomic(os.path.join(release_path(base_dir, other["id"]), MANIFEST),
                                    dict(other, status="superseded", superseded_by=release))
    # A release proven good before (a rollback target) stays good; a new one becomes active.
    status = "good" if manifest.get("status") == "good" else "active"
    manifest = dict(manifest, status=status, activated=store.now(), previous=current)
    store.write_json_atomic(os.path.join(release_path(base_dir, release), MANIFEST), manifest)
    symlink_atomic(os.path.join("releases", release), os.path.join(base_dir, "current"))
    return manifest


def mark(base_dir, release, status, reason=None, check_mode=False, results=None):
    """Set a release's status: good (proven to serve), failed or rolled-back (with the reason)."""
    manifest = store.require(base_dir, release)
    results = results or {}
    owned = sorted(set(results) & {*store.OWNED, "reason", "proven", status})
    if owned:
        raise ReleaseError(f"results may not set {owned}: the module writes them")
    changed = manifest.get("status") != status or (reason and manifest.get("reason") != reason) \
        or any(manifest.get(k) != v for k, v in results.items())
    result = {"current": read_current(base_dir), "release": release, "created": False,
              "path": release_path(base_dir, release), "changed": bool(changed),
              "manifest": manifest}
    if changed and not check_mode:
        with store.serialised(base_dir):
            manifest = store.require(base_dir, release)
            extra = {"proven": store.now()} if status == "good" \
                else {status: store.now(), "reason": reason}
            manifest = dict(manifest, **results, status=status, **extra)
            store.write_json_atomic(os.path.join(release_path(base_dir, release), MANIFEST),
                                    manifest)
        result["manifest"] = manifest
    return result


def restore(base_dir, release, check_mode=False):
    """A release that serves again after the one that replaced it failed (a by-hand rollback's
    undo): good again when its last verdict was good (sglang_releases.last_verdict_good), else
    left as the switch back made it, active (live, unproven), never called good unproven."""
    manifest = store.require(base_dir, release)
    if last_verdict_good(manifest):
        return mark(base_dir, release, "good", check_mode=check_mode)
    return {"current": read_current(base_dir), "release": release, "created": False,
            "path": release_path(base_dir, release), "changed": False, "manifest": manifest}
