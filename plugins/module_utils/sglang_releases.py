"""The releases on a host as their module lays them out: `releases/<id>/manifest.json`, and
`current`, the link to the one that serves. The reads the release module and the host's
prerequisites share (read-only).
"""

import json
import os
import re

MANIFEST = "manifest.json"
ID_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}")


class ReleaseError(Exception):
    pass


def release_path(base_dir, release):
    """The directory of release `release`: the one way to name one, never outside releases/.

    `release` must be a release id (no `/`, no `..`); the resolved directory must sit directly
    in the resolved releases/ directory, so a symlink cannot lead out either.
    """
    if not isinstance(release, str) or not ID_RE.fullmatch(release):
        raise ReleaseError(f"release {release!r} is not a release id (20260101T000000Z-0123abcd)")
    releases = os.path.join(base_dir, "releases")
    path = os.path.join(releases, release)
    if os.path.lexists(path) and \
            os.path.dirname(os.path.realpath(path)) != os.path.realpath(releases):
        raise ReleaseError(f"{path} leads outside {releases}: remove it")
    return path


def read_current(base_dir):
    """Id that `current` points at, or None. Refuses a link that is not releases/<id>."""
    link = os.path.join(base_dir, "current")
    if not os.path.islink(link):
        if os.path.lexists(link):
            raise ReleaseError(f"{link} exists and is not a symlink: move it away")
        return None
    target = os.readlink(link).rstrip("/")
    release = os.path.basename(target)
    inside = target in (os.path.join("releases", release),
                        os.path.join(os.path.abspath(base_dir), "releases", release))
    if not inside or not ID_RE.fullmatch(release):
        raise ReleaseError(f"{link} points at {target!r}, not at releases/<id> under {base_dir}: "
                           "point it at a release (ln -sfn releases/<id> current) or remove it")
    release_path(base_dir, release)
    return release


def read_manifest(base_dir, release):
    """The release's manifest when it is a JSON object with well-typed fields, else None."""
    try:
        with open(os.path.join(release_path(base_dir, release), MANIFEST), encoding="utf-8") as fh:
            manifest = json.load(fh)
    except (OSError, ValueError, ReleaseError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("status", ""), str) \
            or not isinstance(manifest.get("files", {}), dict) \
            or not isinstance(manifest.get("args_hash", ""), str):
        return None
    seq = manifest.get("seq", 0)
    if not isinstance(seq, int) or isinstance(seq, bool):
        manifest["seq"] = 0
    # The directory names the release, whatever the file says.
    return dict(manifest, id=release)


def serving(base_dir):
    """{release, manifest} of the release `current` names (either None), or {error} when the
    link is refused."""
    try:
        release = read_current(base_dir)
    except ReleaseError as exc:
        return {"release": None, "manifest": None, "error": str(exc)}
    return {"release": release, "manifest": read_manifest(base_dir, release) if release else None}


def baseline_for(releases, proving):
    """The manifest a proof of `proving` compares with: the newest release proven good that is
    not `proving` itself (`releases` oldest first, as the listing gives them), {} when there is
    none. Never the release being proven: after a run cut between its switch and its restart,
    `current` names that release, unproven, and the one it replaces is the last good one."""
    good = [m for m in releases if m.get("status") == "good" and m.get("id") != proving]
    return good[-1] if good else {}


def previous_good(releases, current):
    """The id of the newest release proven good that is not `current` (None when there is
    none): the default rollback target, which cleanup never deletes."""
    return baseline_for(releases, current).get("id")


def rollback_target(releases, current, serving=None, asked="", replaced=None):
    """The release a rollback returns to, for both paths: {target (its manifest, {} when there is
    none), unfinished, why}. `releases` oldest first (the listing), `current` the release the
    current link names.

    The automatic rollback after a failed deploy (`replaced`: the release that deploy replaced,
    as it was current before the switch): that one when it is good, else the newest good
    release other than current.

    The rollback by hand (`replaced` None): `asked` (sglang_rollback_to) when given; else a
    rollback cut after its switch is finished (`unfinished`: the unit's process, `serving`,
    is the release rolled back from, marked so before the switch; or none runs and `asked` is
    current), its target current; else the newest good release other than current."""
    by_id = {m.get("id"): m for m in releases}
    if replaced is not None:
        pick, why = _after_failed_deploy(by_id, releases, current, replaced)
        return {"target": by_id.get(pick) or {}, "unfinished": False, "why": why}
    unfinished = _rollback_unfinished(by_id, current, serving, asked)
    if asked:
        pick, why = asked, "asked (sglang_rollback_to)"
    elif unfinished:
        pick, why = current, "a rollback cut after its switch, finished"
    else:
        pick, why = previous_good(releases, current), "the newest good release other than current"
    return {"target": by_id.get(pick) or {}, "unfinished": unfinished, "why": why}


def _after_failed_deploy(by_id, releases, current, replaced):
    """(id, why) of the release the automatic rollback restores."""
    if (by_id.get(replaced) or {}).get("status") == "good":
        return replaced, "the release the deploy replaced"
    pick = previous_good(releases, current)
    return pick, "the newest good release" if pick else "no good release to restore"


def _rollback_unfinished(by_id, current, serving, asked):
    """Whether a rollback by hand was cut after its switch: the unit's process is the release
    it rolled back from (marked so before the switch), or none runs and `asked` is current."""
    if serving is None:
        return bool(asked) and asked == current
    return serving != current and (by_id.get(serving) or {}).get("status") == "rolled-back"


def last_verdict_good(manifest):
    """Whether a release's last verdict was good: proven (`proven`, set when it was marked good)
    and not failed since. A release a by-hand rollback left keeps both stamps (it is marked
    rolled-back, not judged): it is good again when it serves again only if this holds; one
    that went live and was never proven (a deploy cut before its proof) stays unproven."""
    proven = manifest.get("proven")
    failed = manifest.get("failed")
    return isinstance(proven, str) and bool(proven) \
        and not (isinstance(failed, str) and failed >= proven)
