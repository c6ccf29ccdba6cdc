# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""A release on disk: `releases/<id>/` with its files, `manifest.json` and `packages.txt`.

Made whole (prepare), its files held to what the manifest records (drift, verify, repair), its
package set recorded and read back (packages), shown against `current` (diff), listed in
creation order (listing, info), and what a cut run left under the base dir removed (recover).
The sglang_release module's store; the switch of `current` (sglang_release_switch) and the
cleanup (sglang_release_cleanup) build on it.
"""

import datetime
import hashlib
import json
import os
import re
import shutil
import tempfile

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_envs as envs
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_files import (
    empty_trash, flock_guard, fsync_dir, write_atomic)
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_packages import package_lines
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_read import read_bytes
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_releases import (
    ID_RE, MANIFEST, ReleaseError, baseline_for, previous_good, read_current, read_manifest,
    release_path)
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_redact import redact_env_text

PACKAGES = "packages.txt"
PACKAGES_HEADER = "# The package set of the env this release runs on (sha256 in manifest.json).\n"
TRASH = ".trash"
# Temp names the module's own writes use; a cut run leaves them, the next run removes them.
TEMP_RE = re.compile(r"\.(manifest|packages|repair|env)\..*")
# Written by the module only: results and meta may not set them.
OWNED = ("id", "seq", "status", "files", "args_hash", "packages_sha256", "env", "env_digest")
SCHEMA = 1
# Manifest facts shown by --diff beside the files.
META_DIFF_KEYS = ("sglang_version", "launch_module", "extra_packages", "model")
STAMP_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z")
FILE_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")
MODE_RE = re.compile(r"0?[0-7]{3,4}")


def content_hash(files, meta):
    canonical = json.dumps(
        {"files": {f["name"]: [f["content"], f.get("mode", "0644")] for f in files}, "meta": meta},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def write_text_atomic(path, text, mode=0o644, prefix=".manifest."):
    """Replace `path` whole; on any failure (ENOSPC...) no temp file is left behind."""
    write_atomic(path, text, mode, prefix)


def write_json_atomic(path, data):
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def serialised(base_dir):
    """Activations and status changes of one base dir happen one at a time (flock)."""
    os.makedirs(base_dir, mode=0o755, exist_ok=True)
    return flock_guard(os.path.join(base_dir, ".release.lock"))


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def require(base_dir, release):
    """The manifest of `release` (an id under releases/); refused when it cannot be read."""
    release_path(base_dir, release)
    manifest = read_manifest(base_dir, release)
    if manifest is None:
        raise ReleaseError(f"release {release} has no readable manifest under {base_dir}/releases")
    return manifest


def sha256_of(path):
    try:
        return hashlib.sha256(read_bytes(path)).hexdigest()
    except OSError:
        return None


def listing(base_dir):
    """Manifests of all releases in creation order: by `seq`, which a wrong clock cannot
    poison (ids carry the controller's time), then by id for releases made before `seq`."""
    releases_dir = os.path.join(base_dir, "releases")
    names = [n for n in os.listdir(releases_dir) if ID_RE.fullmatch(n)] \
        if os.path.isdir(releases_dir) else []
    releases = [read_manifest(base_dir, n) or {"id": n, "status": "unreadable", "seq": 0}
                for n in names]
    return sorted(releases, key=lambda m: (m.get("seq", 0), m["id"]))


def release_files(base_dir, release, names):
    out = {}
    for name in names:
        try:
            with open(os.path.join(release_path(base_dir, release), name), encoding="utf-8") as fh:
                out[name] = fh.read()
        except (OSError, UnicodeDecodeError):
            out[name] = ""
    return out


def file_mode(path):
    try:
        return oct(os.stat(path).st_mode & 0o777)
    except OSError:
        return "0644"


def _meta_text(manifest, keys):
    return "".join(f"{k}: {json.dumps(manifest.get(k), sort_keys=True)}\n" for k in sorted(keys))


def diff(base_dir, current, files, meta_keys=None, manifest=None, after_label="new release"):
    """--diff output: each file, and the manifest facts (sglang version...), against current."""
    before = release_files(base_dir, current, [f["name"] for f in files]) if current else {}
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


def _check_request(stamp, files):
    if not isinstance(stamp, str) or not STAMP_RE.fullmatch(stamp):
        raise ReleaseError(f"stamp {stamp!r} must look like 20260101T000000Z (UTC)")
    for f in files:
        if not FILE_RE.fullmatch(f["name"]) or f["name"] in (".", "..", MANIFEST):
            raise ReleaseError(f"invalid release file name {f['name']!r}: letters, digits, ._-")
        if not MODE_RE.fullmatch(str(f.get("mode", "0644"))):
            raise ReleaseError(f"{f['name']}: mode {f.get('mode')!r} is not an octal mode (0644)")
        try:
            f["content"].encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ReleaseError(f"{f['name']}: content is not valid text ({exc.reason})") from None


def _new_manifest(base_dir, release, digest, files, meta):
    return {
        "schema": SCHEMA,
        "id": release,
        # Creation order on this host, whatever the controller's clock said.
        "seq": max([m.get("seq", 0) for m in listing(base_dir)] + [0]) + 1,
        "status": "pending",
        "created": now(),
        "args_hash": digest,
        "files": {f["name"]: hashlib.sha256(f["content"].encode()).hexdigest() for f in files},
        **{k: v for k, v in meta.items() if k not in OWNED},
    }


def _write_release(base_dir, release, files, manifest):
    """The release directory, written under a temp name and renamed whole into releases/."""
    releases = os.path.join(base_dir, "releases")
    os.makedirs(releases, mode=0o755, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=releases, prefix=f".{release}.")
    try:
        for f in files:
            path = os.path.join(tmp, f["name"])
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(f["content"])
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(path, int(str(f.get("mode", "0644")), 8))
        write_json_atomic(os.path.join(tmp, MANIFEST), manifest)
        os.chmod(tmp, 0o755)
        os.rename(tmp, release_path(base_dir, release))
        fsync_dir(releases)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def prepare(base_dir, stamp, files, meta, check_mode=False):
    """Create a release unless `current` already holds the same content. Returns a result dict."""
    _check_request(stamp, files)
    digest = content_hash(files, meta)
    current = read_current(base_dir)
    cur_manifest = read_manifest(base_dir, current) if current else None
    result = {"current": current, "created": False, "changed": False}
    if cur_manifest and cur_manifest.get("args_hash") == digest:
        result.update(release=current, path=release_path(base_dir, current), manifest=cur_manifest)
        return _repair(base_dir, current, cur_manifest, files, result, check_mode)

    release = f"{stamp}-{digest[:8]}"
    manifest = _new_manifest(base_dir, release, digest, files, meta)
    result.update(release=release, path=release_path(base_dir, release), manifest=manifest,
                  created=True, changed=True,
                  diff=diff(base_dir, current, files, meta, manifest))
    if check_mode:
        return result
    with serialised(base_dir):
        recover(base_dir)
        return _create(base_dir, release, digest, files, manifest, result)


def _create(base_dir, release, digest, files, manifest, result):
    final = release_path(base_dir, release)
    if os.path.isdir(final):
        existing = read_manifest(base_dir, release)
        if existing and existing.get("args_hash") == digest:
            # The same content prepared earlier in this run (or a retried run): reuse it.
            result.update(manifest=existing, created=False)
            return result
        raise ReleaseError(f"{final} exists with other content")
    _write_release(base_dir, release, files, manifest)
    return result


def _repair(base_dir, release, manifest, files, result, check_mode):
    """Put back files of the serving release that were changed in place, from the rendering.

    The rendering has the content hash the manifest records, so each rendered file is what the
    release held when it was made; a file the rendering does not hold is refused with the list.
    """
    found = drift(base_dir, release, manifest)
    if not found:
        return result
    rendered = {f["name"]: f for f in files}
    lost = [d for d in found if d["file"] not in rendered or hashlib.sha256(
        rendered[d["file"]]["content"].encode()).hexdigest() != manifest["files"][d["file"]]]
    if lost:
        raise ReleaseError(
            f"release {release} was changed in place and cannot be re-rendered: "
            + ", ".join(f"{d['file']} ({d['change']})" for d in found)
            + ": deploy again after restoring them, or roll back")
    on_disk = release_files(base_dir, release, [d["file"] for d in found])
    result.update(changed=True, drift=found, repaired=[d["file"] for d in found], diff=[
        {"before_header": f"current/{d['file']} ({d['change']})",
         "after_header": f"current/{d['file']} (re-rendered)",
         "before": on_disk[d["file"]], "after": rendered[d["file"]]["content"]}
        for d in found if not str(rendered[d["file"]].get("mode", "")).endswith("600")])
    if check_mode:
        return result
    for d in found:
        f = rendered[d["file"]]
        write_text_atomic(os.path.join(release_path(base_dir, release), f["name"]), f["content"],
                          int(str(f.get("mode", "0644")), 8), ".repair.")
    return result


def drift(base_dir, release, manifest):
    """What changed in a release's files since it was made: [{file, change}] (hashes)."""
    found = []
    for name, expected in sorted((manifest.get("files") or {}).items()):
        path = os.path.join(release_path(base_dir, release), str(name))
        try:
            with open(path, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
        except FileNotFoundError:
            found.append({"file": name, "change": "missing"})
            continue
        except OSError as exc:
            found.append({"file": name, "change": f"unreadable ({exc.strerror})"})
            continue
        if digest != expected:
            found.append({"file": name, "change": "content changed"})
    return found


def verify(base_dir, release, manifest):
    """Refuse a release whose files differ from what its manifest records (a `launch` or config
    rewritten after it was made would run as the service's user, root by default), naming each
    file and what changed."""
    found = drift(base_dir, release, manifest)
    expected = manifest.get("packages_sha256")
    if expected and sha256_of(os.path.join(release_path(base_dir, release), PACKAGES)) != expected:
        found.append({"file": PACKAGES, "change": "content changed"})
    if found:
        raise ReleaseError(
            f"release {release} was changed after it was made: "
            + ", ".join(f"{release_path(base_dir, release)}/{d['file']} ({d['change']})"
                        for d in found)
            + "; refused, nothing was switched or restarted. Deploy again (a new release) "
            "or roll back to another release")


def recover(base_dir):
    """What a cut run left under the base dir (call it under the release lock): the temp names
    of the module's own writes, a release directory not yet renamed into place, a removal cut
    short. Removed; returns their names."""
    done = []
    for name in os.listdir(base_dir) if os.path.isdir(base_dir) else []:
        if name.startswith(".current."):
            os.unlink(os.path.join(base_dir, name))
            done.append(name)
    done += empty_trash(os.path.join(base_dir, TRASH))
    return done + _recover_releases(os.path.join(base_dir, "releases"))


def _recover_releases(releases):
    """Under releases/: a release directory not yet renamed into place, the temp names left in
    a release. Removed; returns their names."""
    done = []
    for name in os.listdir(releases) if os.path.isdir(releases) else []:
        path = os.path.join(releases, name)
        if name.startswith(".") and os.path.isdir(path) \
                and not os.path.islink(path):
            shutil.rmtree(path)
            done.append(name)
        elif ID_RE.fullmatch(name) and os.path.isdir(path) and not os.path.islink(path):
            for temp in (t for t in os.listdir(path) if TEMP_RE.fullmatch(t)):
                os.unlink(os.path.join(path, temp))
                done.append(f"{name}/{temp}")
    return done


def packages(base_dir, release, lines=None, check_mode=False, env=None):
    """Record `lines` as the release's package set (packages.txt, its sha256 in the manifest)
    with `env` ({id, digest}: the env it runs on), or with `lines` None read the recorded set
    back, checked against that sha256 and by the package line validator."""
    manifest = require(base_dir, release)
    result = {"current": read_current(base_dir), "release": release, "created": False,
              "path": release_path(base_dir, release), "changed": False, "manifest": manifest}
    if lines is not None:
        return _record_packages(base_dir, release, lines, check_mode, env, result)
    return _read_packages(base_dir, release, result)


def _record_packages(base_dir, release, lines, check_mode, env, result):
    manifest = result["manifest"]
    path = os.path.join(release_path(base_dir, release), PACKAGES)
    checked = package_lines(lines, path)
    text = PACKAGES_HEADER + "".join(f"{line}\n" for line in checked)
    digest = hashlib.sha256(text.encode()).hexdigest()
    owned = {"packages_sha256": digest, **(env or {})}
    result.update(packages=checked, recorded=True, verified=True,
                  changed=any(manifest.get(k) != v for k, v in owned.items())
                  or sha256_of(path) != digest)
    if result["changed"] and not check_mode:
        with serialised(base_dir):
            manifest = require(base_dir, release)
            write_text_atomic(path, text, 0o644, ".packages.")
            manifest = dict(manifest, **owned)
            write_json_atomic(os.path.join(release_path(base_dir, release), MANIFEST), manifest)
        result["manifest"] = manifest
    return result


def _read_packages(base_dir, release, result):
    path = os.path.join(release_path(base_dir, release), PACKAGES)
    expected = result["manifest"].get("packages_sha256")
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        if expected:
            raise ReleaseError(f"{path} is missing, though the manifest records its sha256: "
                               "the release's package set cannot be restored") from None
        return dict(result, packages=[], recorded=False, verified=False)
    except OSError as exc:
        raise ReleaseError(f"cannot read the package set of release {release}: {exc}") from None
    if expected and hashlib.sha256(data).hexdigest() != expected:
        raise ReleaseError(f"{path} no longer has the sha256 its manifest records ({expected}): "
                           "it was changed after the release recorded it; refused")
    lines = data.decode("utf-8", "replace").splitlines()
    return dict(result, packages=package_lines(lines, path), recorded=True,
                verified=bool(expected))


def info(base_dir, release=None, proving=None):
    """All releases, oldest first, the one serving (current's manifest, or {}), the newest good
    one that is not current, current's drift; each release says whether the env it names is
    built (`env_ready`); with `release`, its manifest as `proven` when it is good; with
    `proving`, the baseline of a proof of that release as `proven` (sglang_releases.baseline_for:
    the newest good release but it)."""
    current = read_current(base_dir)
    releases = [dict(m, env_ready=_env_ready(base_dir, m.get("env"))) for m in listing(base_dir)]
    cur = next((m for m in releases if m["id"] == current), None)
    found = {"changed": False, "current": current, "releases": releases, "serving": cur or {},
             "previous_good": previous_good(releases, current),
             "drift": drift(base_dir, current, cur) if cur else []}
    if release is not None:
        found["proven"] = next((m for m in releases if m["id"] == release
                                and m.get("status") == "good"), {})
    elif proving is not None:
        found["proven"] = baseline_for(releases, proving)
    return found


def _env_ready(base_dir, env):
    try:
        return bool(env) and os.path.isfile(os.path.join(envs.env_path(base_dir, env), envs.MARKER))
    except envs.EnvError:
        return False
