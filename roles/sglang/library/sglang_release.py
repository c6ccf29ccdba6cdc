#!/usr/bin/python
"""Versioned SGLang releases: releases/<id>/ with a manifest, and a `current` symlink."""

DOCUMENTATION = r"""
module: sglang_release
short_description: Prepare, activate and mark SGLang releases under a base directory
description:
  - A release is a directory C(releases/<id>/) holding the rendered files (config.yaml,
    sglang.env, launch) and C(manifest.json). Its id is a UTC timestamp plus the first
    8 hex digits of the hash of its content, so ids sort by name in creation order.
  - C(state=present) creates a release unless C(current) already has the same content hash,
    in which case nothing changes (a re-run with nothing changed restarts nothing).
  - C(state=active) points C(current) at a release (an atomic symlink swap) and records the
    release it replaced. C(state=good) marks a release as proven to serve, C(state=failed)
    as refused, with a C(reason).
  - C(state=info) lists the releases (sorted by id, that is by creation) and names the
    newest good release other than C(current), the default rollback target.
  - C(state=cleanup) keeps the newest C(keep_good) good releases and the newest C(keep_other)
    of the rest (failed, never proven), by id; C(current) and the newest good release that is
    not current are never deleted.
  - C(current) is always read with readlink, never guessed from mtimes.
options:
  base_dir:
    description: Directory that holds C(releases/) and C(current).
    type: path
    required: true
  state:
    description: What to do.
    type: str
    choices: [present, active, good, failed, rolled-back, info, cleanup]
    default: present
  stamp:
    description: UTC timestamp prefix of a new release id (one per run for all hosts).
    type: str
  files:
    description: Files of the release, for C(state=present).
    type: list
    elements: dict
    suboptions:
      name: {description: File name inside the release., type: str, required: true}
      content: {description: File content., type: str, required: true}
      mode: {description: Octal mode., type: str, default: "0644"}
  meta:
    description: Facts recorded in the manifest and included in the content hash
      (sglang version, profile, model, launch module).
    type: dict
    default: {}
  release:
    description: Release id, for C(state=active), C(good) and C(failed).
    type: str
  reason:
    description: Why a release failed, for C(state=failed).
    type: str
  results:
    description: Results recorded in the manifest with the status (preflight, verification,
      smoke), for C(state=good) and C(state=failed).
    type: dict
  keep_good:
    description: Good releases kept by C(state=cleanup).
    type: int
    default: 5
  keep_other:
    description: Other releases (failed, never proven) kept by C(state=cleanup).
    type: int
    default: 3
"""

RETURN = r"""
release:
  description: Id of the release that was created, found unchanged, activated or marked.
  type: str
  returned: always
path:
  description: Absolute path of that release.
  type: str
  returned: always
created:
  description: Whether C(state=present) made a new release.
  type: bool
  returned: always
current:
  description: Release id C(current) pointed at before this task.
  type: str
  returned: always
manifest:
  description: The release's manifest after this task.
  type: dict
  returned: state is not info
releases:
  description: Manifests of all releases, oldest first.
  type: list
  returned: state is info
previous_good:
  description: Newest release with status good that is not current, or null.
  type: str
  returned: state is info
"""

import datetime
import hashlib
import json
import os
import re
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_redact import redact_env_text

MANIFEST = "manifest.json"
SCHEMA = 1
# Manifest facts shown by --diff beside the files.
META_DIFF_KEYS = ("sglang_version", "launch_module", "extra_packages", "model")
ID_RE = re.compile(r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}$")


class ReleaseError(Exception):
    pass


def content_hash(files, meta):
    canonical = json.dumps(
        {"files": {f["name"]: [f["content"], f.get("mode", "0644")] for f in files}, "meta": meta},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def read_current(base_dir):
    """Id that `current` points at, or None."""
    link = os.path.join(base_dir, "current")
    if not os.path.islink(link):
        if os.path.exists(link):
            raise ReleaseError(f"{link} exists and is not a symlink: move it away")
        return None
    return os.path.basename(os.readlink(link).rstrip("/"))


def read_manifest(base_dir, release):
    try:
        with open(os.path.join(base_dir, "releases", release, MANIFEST), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _write_json_atomic(path, data):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".manifest.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _release_files(base_dir, release, names):
    out = {}
    for name in names:
        try:
            with open(os.path.join(base_dir, "releases", release, name), encoding="utf-8") as fh:
                out[name] = fh.read()
        except OSError:
            out[name] = ""
    return out


def _mode(path):
    try:
        return oct(os.stat(path).st_mode & 0o777)
    except OSError:
        return "0644"


def _meta_text(manifest, keys):
    return "".join(f"{k}: {json.dumps(manifest.get(k), sort_keys=True)}\n" for k in sorted(keys))


def diff(base_dir, current, files, meta_keys=None, manifest=None, after_label="new release"):
    """--diff output: each file, and the manifest facts (sglang version...), against current."""
    before = _release_files(base_dir, current, [f["name"] for f in files]) if current else {}
    after = list(files)
    if meta_keys is not None:
        cur_manifest = (read_manifest(base_dir, current) or {}) if current else {}
        before["manifest"] = _meta_text(cur_manifest, meta_keys) if current else ""
        after.append({"name": "manifest", "content": _meta_text(manifest, meta_keys)})
    def shown(f, text):
        # A private (0600) file is shown with the values of secret-named variables hidden.
        return redact_env_text(text) if str(f.get("mode", "")).endswith("600") else text

    return [
        {
            "before_header": f"current/{f['name']}" if current else "(no release)",
            "after_header": f"{after_label}/{f['name']}",
            "before": shown(f, before.get(f["name"], "")),
            "after": shown(f, f["content"]),
        }
        for f in after
        if before.get(f["name"], "") != f["content"]
    ]


def prepare(base_dir, stamp, files, meta, check_mode=False):
    """Create a release unless `current` already holds the same content. Returns a result dict."""
    if not stamp or not re.match(r"^[0-9]{8}T[0-9]{6}Z$", stamp):
        raise ReleaseError(f"stamp {stamp!r} must look like 20260101T000000Z (UTC)")
    for f in files:
        if "/" in f["name"] or f["name"] in ("", ".", "..", MANIFEST):
            raise ReleaseError(f"invalid release file name {f['name']!r}")
    digest = content_hash(files, meta)
    current = read_current(base_dir)
    cur_manifest = read_manifest(base_dir, current) if current else None
    result = {"current": current, "created": False, "changed": False}
    if cur_manifest and cur_manifest.get("args_hash") == digest:
        result.update(release=current, path=_path(base_dir, current), manifest=cur_manifest)
        return result

    release = f"{stamp}-{digest[:8]}"
    manifest = {
        "schema": SCHEMA,
        "id": release,
        "status": "pending",
        "created": _now(),
        "args_hash": digest,
        "files": {f["name"]: hashlib.sha256(f["content"].encode()).hexdigest() for f in files},
        **{k: v for k, v in meta.items() if k not in ("id", "status", "files", "args_hash")},
    }
    result.update(release=release, path=_path(base_dir, release), manifest=manifest,
                  created=True, changed=True,
                  diff=diff(base_dir, current, files, meta, manifest))
    if check_mode:
        return result
    final = _path(base_dir, release)
    if os.path.isdir(final):
        existing = read_manifest(base_dir, release)
        if existing and existing.get("args_hash") == digest:
            # The same content prepared earlier in this run (or a retried run): reuse it.
            result.update(manifest=existing, created=False)
            return result
        raise ReleaseError(f"{final} exists with other content")
    releases = os.path.join(base_dir, "releases")
    os.makedirs(releases, mode=0o755, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=releases, prefix=f".{release}.")
    try:
        for f in files:
            path = os.path.join(tmp, f["name"])
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(f["content"])
            os.chmod(path, int(str(f.get("mode", "0644")), 8))
        _write_json_atomic(os.path.join(tmp, MANIFEST), manifest)
        os.chmod(tmp, 0o755)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return result


def activate(base_dir, release, check_mode=False):
    """Point `current` at `release` with an atomic rename."""
    manifest = _require(base_dir, release)
    current = read_current(base_dir)
    result = {"current": current, "release": release, "path": _path(base_dir, release),
              "created": False, "changed": current != release, "manifest": manifest}
    if result["changed"] and current:
        names = sorted(manifest.get("files", {}))
        target = [{"name": n, "content": c, "mode": _mode(os.path.join(_path(base_dir, release), n))}
                  for n, c in _release_files(base_dir, release, names).items()]
        result["diff"] = diff(base_dir, current, target, META_DIFF_KEYS, manifest, release)
    if not result["changed"] or check_mode:
        return result
    # A release proven good before (a rollback target) stays good; a new one becomes active.
    status = "good" if manifest.get("status") == "good" else "active"
    manifest = dict(manifest, status=status, activated=_now(), previous=current)
    _write_json_atomic(os.path.join(_path(base_dir, release), MANIFEST), manifest)
    tmp_link = os.path.join(base_dir, f".current.{os.getpid()}")
    if os.path.lexists(tmp_link):
        os.unlink(tmp_link)
    os.symlink(os.path.join("releases", release), tmp_link)
    os.replace(tmp_link, os.path.join(base_dir, "current"))
    result["manifest"] = manifest
    return result


def mark(base_dir, release, status, reason=None, check_mode=False, results=None):
    """Set a release's status: good (proven to serve), failed or rolled-back (with the reason)."""
    manifest = _require(base_dir, release)
    results = results or {}
    changed = manifest.get("status") != status or (reason and manifest.get("reason") != reason) \
        or any(manifest.get(k) != v for k, v in results.items())
    result = {"current": read_current(base_dir), "release": release, "created": False,
              "path": _path(base_dir, release), "changed": bool(changed), "manifest": manifest}
    if changed and not check_mode:
        extra = {"proven": _now()} if status == "good" else {status: _now(), "reason": reason}
        manifest = dict(manifest, **results, status=status, **extra)
        _write_json_atomic(os.path.join(_path(base_dir, release), MANIFEST), manifest)
        result["manifest"] = manifest
    return result


def info(base_dir):
    """All releases, oldest first, and the newest good one that is not current."""
    current = read_current(base_dir)
    releases_dir = os.path.join(base_dir, "releases")
    names = sorted(n for n in os.listdir(releases_dir) if ID_RE.match(n)) \
        if os.path.isdir(releases_dir) else []
    releases = []
    for name in names:
        manifest = read_manifest(base_dir, name) or {"id": name, "status": "unreadable"}
        releases.append(manifest)
    good = [m["id"] for m in releases if m.get("status") == "good" and m["id"] != current]
    return {"changed": False, "current": current, "releases": releases,
            "previous_good": good[-1] if good else None}


def cleanup(base_dir, keep_good=5, keep_other=3, check_mode=False):
    """Delete the oldest releases beyond the limits; never current or the rollback target."""
    state = info(base_dir)
    protected = {state["current"], state["previous_good"]} - {None}
    # A release rolled back from by hand had been proven good: it is kept like one.
    proven = ("good", "rolled-back")
    good = [m["id"] for m in state["releases"] if m.get("status") in proven]
    other = [m["id"] for m in state["releases"] if m.get("status") not in proven]
    oldest = good[:max(0, len(good) - keep_good)] + other[:max(0, len(other) - keep_other)]
    doomed = sorted(r for r in oldest if r not in protected)
    if not check_mode:
        for release in doomed:
            shutil.rmtree(_path(base_dir, release))
    return {"changed": bool(doomed), "removed": doomed, "current": state["current"],
            "kept": [m["id"] for m in state["releases"] if m["id"] not in doomed]}


def _path(base_dir, release):
    return os.path.join(base_dir, "releases", release)


def _require(base_dir, release):
    if not release or not ID_RE.match(release):
        raise ReleaseError(f"release {release!r} is not a release id (20260101T000000Z-0123abcd)")
    manifest = read_manifest(base_dir, release)
    if manifest is None:
        raise ReleaseError(f"release {release} has no readable manifest under {base_dir}/releases")
    return manifest


def main():
    module = AnsibleModule(
        argument_spec={
            "base_dir": {"type": "path", "required": True},
            "state": {"type": "str",
                      "choices": ["present", "active", "good", "failed", "rolled-back", "info",
                                  "cleanup"],
                      "default": "present"},
            "stamp": {"type": "str"},
            "files": {"type": "list", "elements": "dict", "options": {
                "name": {"type": "str", "required": True},
                "content": {"type": "str", "required": True},
                "mode": {"type": "str", "default": "0644"},
            }},
            "meta": {"type": "dict", "default": {}},
            "release": {"type": "str"},
            "reason": {"type": "str"},
            "results": {"type": "dict"},
            "keep_good": {"type": "int", "default": 5},
            "keep_other": {"type": "int", "default": 3},
        },
        required_if=[("state", "present", ["stamp", "files"]),
                     ("state", "active", ["release"]),
                     ("state", "good", ["release"]),
                     ("state", "failed", ["release", "reason"]),
                     ("state", "rolled-back", ["release", "reason"])],
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p["state"] == "present":
            result = prepare(p["base_dir"], p["stamp"], p["files"], p["meta"], module.check_mode)
        elif p["state"] == "info":
            result = info(p["base_dir"])
        elif p["state"] == "cleanup":
            result = cleanup(p["base_dir"], p["keep_good"], p["keep_other"], module.check_mode)
        elif p["state"] == "active":
            result = activate(p["base_dir"], p["release"], module.check_mode)
        else:
            result = mark(p["base_dir"], p["release"], p["state"], p["reason"], module.check_mode,
                          p["results"])
    except (ReleaseError, OSError) as exc:
        module.fail_json(msg=str(exc))
    if not module._diff:
        result.pop("diff", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
