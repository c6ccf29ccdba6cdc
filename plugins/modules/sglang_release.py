#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Versioned SGLang releases: releases/<id>/ with a manifest, and a `current` symlink.

The module's documentation, its arguments and which state does what; the work is done by the
release store (sglang_release_store), the switch of `current` and the statuses
(sglang_release_switch) and the cleanup (sglang_release_cleanup).
"""

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
serving:
  description: The manifest of the current release (as in C(releases)), or an empty dict when
    none serves.
  type: dict
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

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_envs as envs
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_release_cleanup as cleanup
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_release_store as store
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_release_switch as switch
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_service_read as service_read
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_packages import PackageSetError
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_releases import ReleaseError

ARGUMENT_SPEC = {
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
}
REQUIRED_IF = [("state", "present", ["stamp", "files"]),
               ("state", "active", ["release"]),
               ("state", "good", ["release"]),
               ("state", "restored", ["release"]),
               ("state", "failed", ["release", "reason"]),
               ("state", "rolled-back", ["release", "reason"]),
               ("state", "packages", ["release"])]


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


def _present(p, check_mode):
    result = store.prepare(p["base_dir"], p["stamp"], p["files"], p["meta"], check_mode)
    if p["service"] is not None:
        result["service"] = service_state(p["service"], p["base_dir"], result["release"])
    return result


def _packages(p, check_mode):
    env = {k: p[k] for k in ("env", "env_digest") if p[k]}
    return store.packages(p["base_dir"], p["release"], p["packages"], check_mode, env)


def _mark(p, check_mode):
    return switch.mark(p["base_dir"], p["release"], p["state"], p["reason"], check_mode,
                       p["results"])


STATES = {
    "present": _present,
    "info": lambda p, _check: store.info(p["base_dir"], p["release"], p["proving"]),
    "cleanup": lambda p, check: cleanup.cleanup(p["base_dir"], p["keep_good"], p["keep_other"],
                                                check, p["env_link"]),
    "active": lambda p, check: switch.activate(p["base_dir"], p["release"], check,
                                               p["env_link"], p["rolled_back_reason"]),
    "restored": lambda p, check: switch.restore(p["base_dir"], p["release"], check),
    "packages": _packages,
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, mutually_exclusive=[("release", "proving")],
                           required_if=REQUIRED_IF, supports_check_mode=True)
    p = module.params
    try:
        # good, failed and rolled-back set the release's status.
        result = STATES.get(p["state"], _mark)(p, module.check_mode)
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
