#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Versioned SGLang releases: releases/<id>/ with a manifest, and a `current` symlink."""

DOCUMENTATION = r"""
module: sglang_release
short_description: Prepare, activate and mark SGLang releases under a base directory
description:
  - A release is a directory C(releases/<id>/) holding the rendered files (config.yaml,
    sglang.env, launch) and C(manifest.json). Its id is a UTC timestamp plus the first
    8 hex digits of the hash of its content, so ids sort by name in creation order.
  - C(state=present) creates a release unless C(current) already has the same content hash,
    in which case nothing changes (a re-run with nothing changed restarts nothing) - unless
    the serving release's files no longer match the sha256 its manifest records (edited or
    removed in place) - then they are re-rendered and C(repaired) names them, or, when the
    rendering does not hold a changed file, the task fails naming each change.
  - Every release records C(seq), its creation order on the host; releases are ordered by
    it (then by id), never by the id's timestamp, which a controller's wrong clock sets.
  - A release is only ever named by its directory, through one resolver that refuses
    anything but an id directly under C(releases/); C(current) must point at C(releases/<id>).
  - C(state=active) is the switch every change of the serving release goes through (a
    deploy's activation, the automatic and the by-hand rollback, the move after an upgrade
    plan). It verifies the target first, its files (and C(packages.txt)) against the sha256 its
    manifest records and its env (C(envs/<id>), M(sglang.deploy.sglang_env)) complete, its
    RECORDs and its tree as they were built; a changed file or env is refused by name and
    nothing changes. Then, under the release and envs locks and after what a cut run left is
    recovered, it links C(releases/<id>/env) to the env, points the ml-env path
    (C(env_link)) at C(<base_dir>/current/env) once and for all, and swaps C(current) in one
    rename. Cut anywhere, C(current) names the old or the new release and the ml-env path
    leads to that release's env. A real directory at C(env_link) is never deleted nor taken
    over. C(state=good) marks a release as proven to serve, C(state=failed) as refused, with a
    C(reason).
  - C(state=restored) is for a release that serves again because the one that replaced it
    failed (the undo of a by-hand rollback); it is marked good only when its last verdict was
    good (proven, and not failed since); one that went live unproven stays C(active).
  - C(state=info) lists the releases (in creation order) and names the newest good release
    other than C(current), the default rollback target, and the drift of C(current). With
    C(release), it also returns that release's manifest as C(proven) when it is good (a
    baseline is a release that was proven), else an empty dict.
  - C(state=cleanup) keeps the newest C(keep_good) good releases and the newest C(keep_other)
    of the rest (failed, never proven), in creation order; C(current), the newest good
    release that is not current and releases whose manifest cannot be read are never deleted.
    The envs no release left names are removed with them (never the one C(env_link) points
    at), and the entries of uv's cache only they used. Every tree is renamed into a trash
    directory before it is removed, so a cut cleanup never leaves half a release or half an
    env; the next run empties the trash. The disk C(envs/) takes (envs and cache) and what the
    cleanup freed are measured, a hardlinked file counted once.
  - C(state=packages) with C(packages) records the env's package set in the release
    (C(packages.txt)) and its sha256 in the manifest, with C(env) and C(env_digest) the env
    the release runs on; without C(packages) it reads the set back,
    refused when the file no longer has that sha256 or holds a line that is not
    C(name==version) (one validator, sglang_packages). A release made before sets were hashed
    is read through the validator alone (C(verified=false)); one without the file has none
    (C(recorded=false)).
  - C(current) is always read with readlink, never guessed from mtimes.
options:
  base_dir:
    description: Directory that holds C(releases/) and C(current).
    type: path
    required: true
  state:
    description: What to do.
    type: str
    choices: [present, active, good, failed, rolled-back, restored, info, cleanup, packages]
    default: present
  stamp:
    description: UTC timestamp prefix of a new release id (one per run for all hosts).
    type: str
  files:
    description: Files of the release, for C(state=present).
    type: list
    elements: dict
    suboptions:
      name:
        description: File name inside the release.
        type: str
        required: true
      content:
        description: File content.
        type: str
        required: true
      mode:
        description: Octal mode.
        type: str
        default: '0644'
  meta:
    description: Facts recorded in the manifest and included in the content hash
      (sglang version, profile, model, launch module).
    type: dict
    default: {}
  release:
    description: Release id, for C(state=active), C(good) and C(failed); for C(state=info), the
      release whose manifest to return as C(proven) when it is good.
    type: str
  proving:
    description: For C(state=info), the release a proof is about to measure; C(proven) is then
      the manifest it compares with, the newest good release other than it (never itself, even
      when C(current) names it after a run cut between its switch and its restart).
    type: str
  reason:
    description: Why a release failed, for C(state=failed).
    type: str
  results:
    description: Results recorded in the manifest with the status (preflight, verification,
      smoke), for C(state=good) and C(state=failed).
    type: dict
  packages:
    description: The ml-env's package set (C(name==version) lines) to record, for
      C(state=packages); omitted, the recorded set is read.
    type: list
    elements: str
  env:
    description: The id of the env the release runs on, recorded by C(state=packages).
    type: str
  env_digest:
    description: The env's digest when it was built or checked, recorded with C(env).
    type: str
  env_link:
    description: The ml-env path (C(sglang_venv)) that C(state=active) points at the release's
      env and C(state=cleanup) keeps the env of.
    type: path
  rolled_back_reason:
    description: With C(state=active), a rollback - the release C(current) names is marked
      C(rolled-back) with this reason in the same switch, under its lock, just before C(current)
      moves. A run cut after the switch therefore never takes the release it left for the one
      to go back to; a switch refused (files or env changed) marks nothing.
    type: str
  keep_good:
    description: Good releases kept by C(state=cleanup).
    type: int
    default: 5
  keep_other:
    description: Other releases (failed, never proven) kept by C(state=cleanup).
    type: int
    default: 3
  service:
    description:
      - With C(state=present), the service's state read in the same call, the arguments of
        M(sglang.deploy.sglang_service_state) (without C(base_dir) and C(release)), a dict.
        The release its process must have started from is the one this call plans, so a re-run
        reads whether anything would change in one round trip. Read-only, in check mode too.
    type: dict
notes:
  - Not a builtin because there is no equivalent; community.general.deploy_helper lays out
    C(releases/) and C(current) but knows nothing of content hashes, release status, drift
    repair or the rollback target.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Render a release (unchanged when the same files are there already)
  sglang.deploy.sglang_release:
    base_dir: /opt/sglang
    stamp: 20261130T101500Z
    files:
      - {name: config.yaml, content: "{{ config_text }}"}
      - {name: sglang.env, content: "{{ env_text }}", mode: "0600"}
    meta: {sglang_version: 0.5.23}
  register: release

- name: Point current at it
  sglang.deploy.sglang_release:
    base_dir: /opt/sglang
    state: active
    release: "{{ release.release }}"

- name: List the releases
  sglang.deploy.sglang_release:
    base_dir: /opt/sglang
    state: info
  register: releases
"""

RETURN = r"""
service:
  description: What M(sglang.deploy.sglang_service_state) returns for O(service) (C(unchanged),
    C(differences), C(systemd), C(serving_release), C(pack_differences), C(drift_differences)).
  type: dict
  returned: when service is given
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
  contains:
    schema:
      description: Manifest format.
      type: int
      returned: always
    id:
      description: Release id.
      type: str
      returned: always
    seq:
      description: Creation order on this host.
      type: int
      returned: always
    status:
      description: C(pending), C(active), C(good), C(failed) or C(rolled-back).
      type: str
      returned: always
    created:
      description: When it was created (UTC).
      type: str
      returned: always
    args_hash:
      description: Hash of the rendered arguments.
      type: str
      returned: always
    files:
      description: SHA-256 per file of the release.
      type: dict
      returned: always
releases:
  description: Manifests of all releases, oldest first.
  type: list
  returned: state is info
previous_good:
  description: Newest release with status good that is not current, or null.
  type: str
  returned: state is info
proven:
  description: The manifest of C(release) when its status is good (its recorded smoke and
    workload proof are the next release's baseline), else an empty dict; with C(proving), the
    newest good release other than that one, else an empty dict.
  type: dict
  returned: state is info and release or proving is given
drift:
  description: "Files of the serving release that differ from its manifest: [{file, change}]."
  type: list
  returned: state is info, or present when the serving release was changed in place
repaired:
  description: Files of the serving release re-rendered because they were changed in place.
  type: list
  returned: when state is present and the serving release was changed in place
packages:
  description: The release's recorded package set (C(name==version) lines), checked.
  type: list
  returned: state is packages
recorded:
  description: Whether the release has a recorded package set (packages.txt).
  type: bool
  returned: state is packages
env_linked:
  description: The env C(env_link) pointed at before this task (state=active), or null.
  type: str
  returned: state is active and env_link is given
removed_envs:
  description: Envs removed with the releases that named them.
  type: list
  returned: state is cleanup
envs_disk_bytes:
  description: Bytes C(envs/) takes on disk after the cleanup (the envs and uv's cache), a
    hardlinked file counted once.
  type: int
  returned: state is cleanup
freed_bytes:
  description: Bytes the cleanup freed under C(envs/), measured before and after.
  type: int
  returned: state is cleanup
removed_cache:
  description: Entries of uv's cache removed with the envs that alone used them.
  type: list
  returned: state is cleanup
verified:
  description: Whether the set matched the sha256 its manifest records (false for a release
    made before sets were hashed).
  type: bool
  returned: state is packages
"""

import datetime
import hashlib
import json
import os
import re
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_envs as envs
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_service_read as service_read
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_files import (
    discard, empty_trash, flock_guard, fsync_dir, symlink_atomic, write_atomic)
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_packages import PackageSetError, package_lines
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_read import read_bytes
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_releases import (
    ID_RE, MANIFEST, ReleaseError, baseline_for, last_verdict_good, previous_good, read_current,
    read_manifest, release_path)
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_redact import redact_env_text

PACKAGES = "packages.txt"
# In each release that names an env: a relative link to it (../../envs/<id>). The ml-env link
# (env_link) points at <base_dir>/current/env once and for all, so that moving `current` (one
# rename) moves both: they always name the same release's env.
ENV_LINK = "env"
TRASH = ".trash"
# Temp names the module's own writes use; a cut run leaves them, the next run removes them.
TEMP_RE = re.compile(r"\.(manifest|packages|repair|env)\..*")
PACKAGES_HEADER = "# The package set of the env this release runs on (sha256 in manifest.json).\n"
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


def _write_atomic(path, text, mode=0o644, prefix=".manifest."):
    """Replace `path` whole; on any failure (ENOSPC...) no temp file is left behind."""
    write_atomic(path, text, mode, prefix)


def _write_json_atomic(path, data):
    _write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _serialised(base_dir):
    """Activations and status changes of one base dir happen one at a time (flock)."""
    os.makedirs(base_dir, mode=0o755, exist_ok=True)
    return flock_guard(os.path.join(base_dir, ".release.lock"))


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _release_files(base_dir, release, names):
    out = {}
    for name in names:
        try:
            with open(os.path.join(release_path(base_dir, release), name), encoding="utf-8") as fh:
                out[name] = fh.read()
        except (OSError, UnicodeDecodeError):
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
        "seq": max([m.get("seq", 0) for m in _listing(base_dir)] + [0]) + 1,
        "status": "pending",
        "created": _now(),
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
        _write_json_atomic(os.path.join(tmp, MANIFEST), manifest)
        os.chmod(tmp, 0o755)
        os.rename(tmp, _path(base_dir, release))
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
        result.update(release=current, path=_path(base_dir, current), manifest=cur_manifest)
        return _repair(base_dir, current, cur_manifest, files, result, check_mode)

    release = f"{stamp}-{digest[:8]}"
    manifest = _new_manifest(base_dir, release, digest, files, meta)
    result.update(release=release, path=_path(base_dir, release), manifest=manifest,
                  created=True, changed=True,
                  diff=diff(base_dir, current, files, meta, manifest))
    if check_mode:
        return result
    with _serialised(base_dir):
        recover(base_dir)
        return _create(base_dir, release, digest, files, manifest, result)


def _create(base_dir, release, digest, files, manifest, result):
    final = _path(base_dir, release)
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
    on_disk = _release_files(base_dir, release, [d["file"] for d in found])
    result.update(changed=True, drift=found, repaired=[d["file"] for d in found], diff=[
        {"before_header": f"current/{d['file']} ({d['change']})",
         "after_header": f"current/{d['file']} (re-rendered)",
         "before": on_disk[d["file"]], "after": rendered[d["file"]]["content"]}
        for d in found if not str(rendered[d["file"]].get("mode", "")).endswith("600")])
    if check_mode:
        return result
    for d in found:
        f = rendered[d["file"]]
        _write_atomic(os.path.join(release_path(base_dir, release), f["name"]), f["content"],
                      int(str(f.get("mode", "0644")), 8), ".repair.")
    return result


def verify(base_dir, release, manifest):
    """Refuse a release whose files differ from what its manifest records (a `launch` or config
    rewritten after it was made would run as the service's user, root by default), naming each
    file and what changed."""
    found = drift(base_dir, release, manifest)
    expected = manifest.get("packages_sha256")
    if expected and _sha256(os.path.join(_path(base_dir, release), PACKAGES)) != expected:
        found.append({"file": PACKAGES, "change": "content changed"})
    if found:
        raise ReleaseError(
            f"release {release} was changed after it was made: "
            + ", ".join(f"{release_path(base_dir, release)}/{d['file']} ({d['change']})"
                        for d in found)
            + "; refused, nothing was switched or restarted. Deploy again (a new release) "
            "or roll back to another release")


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
    link = os.path.join(_path(base_dir, release), ENV_LINK)
    return os.path.islink(link) and os.readlink(link) == _release_env_wanted(env)


def _link_release_env(base_dir, release, env):
    """releases/<id>/env -> ../../envs/<env> (relative: a moved base dir keeps it)."""
    if env and not _release_env_ok(base_dir, release, env):
        symlink_atomic(_release_env_wanted(env), os.path.join(_path(base_dir, release), ENV_LINK))


def _env_link_ok(env_link, base_dir):
    return os.path.islink(env_link) and os.readlink(env_link) == env_link_target(base_dir)


def activate(base_dir, release, check_mode=False, env_link=None, rolled_back_reason=None):
    """The switch: every change of the release a host serves goes through it.

    The target is verified first (its files against its manifest, its env complete and as
    built); then, under the release and envs locks, after what a cut run left is recovered:
    the release's env link is made, the ml-env link (`env_link`) made to lead through
    `current`, and `current` swapped in one rename. Cut anywhere, `current` names the old or the
    new release, and the ml-env link leads to that release's env. With `rolled_back_reason`
    (a rollback) the release left is marked rolled-back just before `current` moves."""
    manifest = _require(base_dir, release)
    current = read_current(base_dir)
    env = manifest.get("env")
    linked = envs.link_target(env_link) if env_link else None
    relink = bool(env and env_link and not _env_link_ok(env_link, base_dir))
    result = {"current": current, "release": release, "path": _path(base_dir, release),
              "created": False, "manifest": manifest,
              "changed": current != release or relink
              or bool(env and not _release_env_ok(base_dir, release, env))}
    if env_link and env:
        result["env_linked"] = linked
    if current != release and current:
        names = sorted(manifest.get("files", {}))
        target = [{"name": n, "content": c, "mode": _mode(os.path.join(_path(base_dir, release), n))}
                  for n, c in _release_files(base_dir, release, names).items()]
        result["diff"] = diff(base_dir, current, target, META_DIFF_KEYS, manifest, release)
    if check_mode or not result["changed"]:
        # What the switch would refuse, refused here too (read-only); a real switch checks
        # once, under the locks.
        verify(base_dir, release, manifest)
        _checked_env(base_dir, manifest, check_mode)
        return result
    with _serialised(base_dir), envs.lock(base_dir):
        recover(base_dir)
        result["manifest"] = _switch(base_dir, release, env_link, rolled_back_reason)
    return result


def _switch(base_dir, release, env_link, rolled_back_reason=None):
    """The file operations of a switch, in the one order that keeps every cut consistent."""
    manifest = _require(base_dir, release)
    verify(base_dir, release, manifest)
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


def recover(base_dir):
    """What a cut run left under the base dir (call it under the release lock): the temp names
    of the module's own writes, a release directory not yet renamed into place, a removal cut
    short. Removed; returns their names."""
    done = []
    for name in os.listdir(base_dir) if os.path.isdir(base_dir) else []:
        if name.startswith(".current."):
            os.unlink(os.path.join(base_dir, name))
            done.append(name)
    releases = os.path.join(base_dir, "releases")
    done += empty_trash(os.path.join(base_dir, TRASH))
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


def _point_current(base_dir, release, current, rolled_back_reason=None):
    """The manifest changes of an activation, then `current` swapped (under the lock)."""
    manifest = _require(base_dir, release)
    left = read_manifest(base_dir, current) if current and rolled_back_reason else None
    if isinstance(left, dict):
        # A rollback: the release left is marked first. Cut between the two writes, current
        # still names it, and the next run goes on to the newest good release, the target.
        _write_json_atomic(os.path.join(release_path(base_dir, current), MANIFEST),
                           dict(left, status="rolled-back", reason=rolled_back_reason,
                                **{"rolled-back": _now()}))
    # One release is `active` (live, not yet proven) at a time: an earlier one that never
    # proved itself is superseded, even when two activations raced without the lock.
    for other in _listing(base_dir):
        if other.get("status") == "active" and other["id"] != release:
            _write_json_atomic(os.path.join(release_path(base_dir, other["id"]), MANIFEST),
                               dict(other, status="superseded", superseded_by=release))
    # A release proven good before (a rollback target) stays good; a new one becomes active.
    status = "good" if manifest.get("status") == "good" else "active"
    manifest = dict(manifest, status=status, activated=_now(), previous=current)
    _write_json_atomic(os.path.join(_path(base_dir, release), MANIFEST), manifest)
    symlink_atomic(os.path.join("releases", release), os.path.join(base_dir, "current"))
    return manifest


def mark(base_dir, release, status, reason=None, check_mode=False, results=None):
    """Set a release's status: good (proven to serve), failed or rolled-back (with the reason)."""
    manifest = _require(base_dir, release)
    results = results or {}
    owned = sorted(set(results) & {*OWNED, "reason", "proven", status})
    if owned:
        raise ReleaseError(f"results may not set {owned}: the module writes them")
    changed = manifest.get("status") != status or (reason and manifest.get("reason") != reason) \
        or any(manifest.get(k) != v for k, v in results.items())
    result = {"current": read_current(base_dir), "release": release, "created": False,
              "path": _path(base_dir, release), "changed": bool(changed), "manifest": manifest}
    if changed and not check_mode:
        with _serialised(base_dir):
            manifest = _require(base_dir, release)
            extra = {"proven": _now()} if status == "good" else {status: _now(), "reason": reason}
            manifest = dict(manifest, **results, status=status, **extra)
            _write_json_atomic(os.path.join(_path(base_dir, release), MANIFEST), manifest)
        result["manifest"] = manifest
    return result


def restore(base_dir, release, check_mode=False):
    """A release that serves again after the one that replaced it failed (a by-hand rollback's
    undo): good again when its last verdict was good (sglang_releases.last_verdict_good), else
    left as the switch back made it, active (live, unproven), never called good unproven."""
    manifest = _require(base_dir, release)
    if last_verdict_good(manifest):
        return mark(base_dir, release, "good", check_mode=check_mode)
    return {"current": read_current(base_dir), "release": release, "created": False,
            "path": _path(base_dir, release), "changed": False, "manifest": manifest}


def packages(base_dir, release, lines=None, check_mode=False, env=None):
    """Record `lines` as the release's package set (packages.txt, its sha256 in the manifest)
    with `env` ({id, digest}: the env it runs on), or with `lines` None read the recorded set
    back, checked against that sha256 and by the package line validator."""
    manifest = _require(base_dir, release)
    path = os.path.join(_path(base_dir, release), PACKAGES)
    source = path
    result = {"current": read_current(base_dir), "release": release, "created": False,
              "path": _path(base_dir, release), "changed": False, "manifest": manifest}
    if lines is not None:
        checked = package_lines(lines, source)
        text = PACKAGES_HEADER + "".join(f"{line}\n" for line in checked)
        digest = hashlib.sha256(text.encode()).hexdigest()
        owned = {"packages_sha256": digest, **(env or {})}
        result.update(packages=checked, recorded=True, verified=True,
                      changed=any(manifest.get(k) != v for k, v in owned.items())
                      or _sha256(path) != digest)
        if result["changed"] and not check_mode:
            with _serialised(base_dir):
                manifest = _require(base_dir, release)
                _write_atomic(path, text, 0o644, ".packages.")
                manifest = dict(manifest, **owned)
                _write_json_atomic(os.path.join(_path(base_dir, release), MANIFEST), manifest)
            result["manifest"] = manifest
        return result
    expected = manifest.get("packages_sha256")
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
    return dict(result, packages=package_lines(lines, source), recorded=True,
                verified=bool(expected))


def _sha256(path):
    try:
        return hashlib.sha256(read_bytes(path)).hexdigest()
    except OSError:
        return None


def _listing(base_dir):
    """Manifests of all releases in creation order: by `seq`, which a wrong clock cannot
    poison (ids carry the controller's time), then by id for releases made before `seq`."""
    releases_dir = os.path.join(base_dir, "releases")
    names = [n for n in os.listdir(releases_dir) if ID_RE.fullmatch(n)] \
        if os.path.isdir(releases_dir) else []
    releases = [read_manifest(base_dir, n) or {"id": n, "status": "unreadable", "seq": 0}
                for n in names]
    return sorted(releases, key=lambda m: (m.get("seq", 0), m["id"]))


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


def info(base_dir, release=None, proving=None):
    """All releases, oldest first, the newest good one that is not current, current's drift;
    each release says whether the env it names is built (`env_ready`); with `release`, its
    manifest as `proven` when it is good; with `proving`, the baseline of a proof of that
    release as `proven` (sglang_releases.baseline_for: the newest good release but it)."""
    current = read_current(base_dir)
    releases = [dict(m, env_ready=_env_ready(base_dir, m.get("env"))) for m in _listing(base_dir)]
    cur = next((m for m in releases if m["id"] == current), None)
    found = {"changed": False, "current": current, "releases": releases,
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
    with _serialised(base_dir), envs.lock(base_dir):
        recover(base_dir)
        envs.recover(base_dir)
        return _cleanup(base_dir, keep_good, keep_other, False, env_link)


def _cleanup(base_dir, keep_good, keep_other, check_mode, env_link):
    state = info(base_dir)
    doomed = _doomed(state, keep_good, keep_other)
    kept = [m for m in state["releases"] if m["id"] not in doomed]
    doomed_envs = _unnamed_envs(base_dir, kept, env_link)
    left = [e for e in envs.listing(base_dir) if e not in doomed_envs]
    before = envs.disk_usage([envs.envs_dir(base_dir)])
    if not check_mode:
        for release in doomed:
            discard(release_path(base_dir, release), os.path.join(base_dir, TRASH))
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


def _path(base_dir, release):
    return release_path(base_dir, release)


def _require(base_dir, release):
    release_path(base_dir, release)
    manifest = read_manifest(base_dir, release)
    if manifest is None:
        raise ReleaseError(f"release {release} has no readable manifest under {base_dir}/releases")
    return manifest


def service_state(service, base_dir, release):
    """sglang_service_read.read of `service` (sglang_service_state's arguments), the release its
    process must have started from being `release`."""
    checked = ArgumentSpecValidator(service_read.SPEC).validate(
        dict(service, base_dir=base_dir, release=release))
    if checked.error_messages:
        raise ReleaseError("service: " + "; ".join(checked.error_messages))
    try:
        return service_read.read(checked.validated_parameters)
    except (OSError, ValueError) as exc:
        raise ReleaseError(f"service: cannot read what the deploy would write: {exc}") from None


def main():
    module = AnsibleModule(
        argument_spec={
            "base_dir": {"type": "path", "required": True},
            "state": {"type": "str",
                      "choices": ["present", "active", "good", "failed", "rolled-back", "restored",
                                  "info", "cleanup", "packages"],
                      "default": "present"},
            "stamp": {"type": "str"},
            "files": {"type": "list", "elements": "dict", "options": {
                "name": {"type": "str", "required": True},
                "content": {"type": "str", "required": True},
                "mode": {"type": "str", "default": "0644"},
            }},
            "meta": {"type": "dict", "default": {}},
            "release": {"type": "str"},
            "proving": {"type": "str"},
            "reason": {"type": "str"},
            "rolled_back_reason": {"type": "str"},
            "results": {"type": "dict"},
            "packages": {"type": "list", "elements": "str"},
            "env": {"type": "str"},
            "env_digest": {"type": "str"},
            "env_link": {"type": "path"},
            "keep_good": {"type": "int", "default": 5},
            "keep_other": {"type": "int", "default": 3},
            # Checked below (sglang_service_read.SPEC): a dict with suboptions cannot refuse a
            # value that is not a dict with a message.
            "service": {"type": "dict"},
        },
        mutually_exclusive=[("release", "proving")],
        required_if=[("state", "present", ["stamp", "files"]),
                     ("state", "active", ["release"]),
                     ("state", "good", ["release"]),
                     ("state", "restored", ["release"]),
                     ("state", "failed", ["release", "reason"]),
                     ("state", "rolled-back", ["release", "reason"]),
                     ("state", "packages", ["release"])],
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p["state"] == "present":
            result = prepare(p["base_dir"], p["stamp"], p["files"], p["meta"], module.check_mode)
            if p["service"] is not None:
                result["service"] = service_state(p["service"], p["base_dir"], result["release"])
        elif p["state"] == "info":
            result = info(p["base_dir"], p["release"], p["proving"])
        elif p["state"] == "cleanup":
            result = cleanup(p["base_dir"], p["keep_good"], p["keep_other"], module.check_mode,
                             p["env_link"])
        elif p["state"] == "active":
            result = activate(p["base_dir"], p["release"], module.check_mode, p["env_link"],
                              p["rolled_back_reason"])
        elif p["state"] == "restored":
            result = restore(p["base_dir"], p["release"], module.check_mode)
        elif p["state"] == "packages":
            env = {k: p[k] for k in ("env", "env_digest") if p[k]}
            result = packages(p["base_dir"], p["release"], p["packages"], module.check_mode, env)
        else:
            result = mark(p["base_dir"], p["release"], p["state"], p["reason"], module.check_mode,
                          p["results"])
    except (ReleaseError, PackageSetError, envs.EnvError) as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"{exc}: sglang_base_dir ({p['base_dir']}) must be a writable "
                             "directory with free space; nothing else was changed")
    if not module._diff:
        result.pop("diff", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
