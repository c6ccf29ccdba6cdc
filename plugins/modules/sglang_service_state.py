#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Is the service as the inventory renders it? One read-only round trip for a no-change run."""

DOCUMENTATION = r"""
module: sglang_service_state
short_description: Compare the SGLang service's files, account and systemd state with what a deploy would make
description:
  - Read-only. Compares, in one call, what the service part of a deploy would write or start
    with what the host has, and says what differs. A deploy that finds nothing different (and
    the same installed versions and release) can skip straight to proving that the server serves.
  - Compared are the content, owner, group and mode of each file in O(files) (the systemd unit,
    the API keys' file), the owner, group and mode of each directory in O(directories), the
    service account and its groups (O(user)), and the unit's systemd state (active, enabled,
    no pending daemon-reload).
  - With C(release), the release the unit's process started from is compared too, read from the
    main process's command line (the release's C(launch) runs C(releases/<id>/launch.py), the
    path resolved), never from C(current), which a run cut after its switch and before the
    restart leaves on a release that never started. Unreadable is a difference (fail closed).
  - File contents are compared by sha256. The controller sends the digest of what it would
    write (C(files[].sha256)), never the content, so a key file's content never reaches the
    host's logs.
version_added: "0.1.0"
notes:
  - Not a builtin because of fewer round trips and secrets; files, directories, the account
    and the unit's systemd state are compared in one call instead of a stat, getent or
    systemd task each; the controller sends digests, never the keys file's content.
author:
  - sglang-deploy maintainers (@sglang-deploy)
options:
  service:
    description: Name of the systemd unit, without C(.service).
    type: str
    required: true
  files:
    description: Files the deploy writes (C(state=present)) or removes (C(state=absent)).
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: Path on the host., type: path, required: true}
      sha256: {description: sha256 hex digest of the expected content., type: str, default: ""}
      state: {description: Whether the file must exist., type: str, choices: [present, absent], default: present}
      owner: {description: Expected owner name., type: str, default: root}
      group: {description: Expected group name., type: str, default: root}
      mode: {description: Expected mode as an octal string., type: str, default: "0644"}
  directories:
    description: Directories the deploy creates.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: Path on the host., type: path, required: true}
      owner: {description: Expected owner name., type: str, required: true}
      group: {description: Expected group name., type: str, required: true}
      mode: {description: Expected mode as an octal string., type: str, required: true}
  base_dir:
    description: Base directory of the releases (C(sglang_base_dir)); needed with C(release).
    type: path
  release:
    description: The release id the deploy would serve; the unit's process must have started
      from it.
    type: str
  user:
    description:
      - The service account (C(name), C(group), and C(groups) it must belong to when the host
        has them). Empty when the service runs as root.
    type: dict
    default: {}
  pack:
    description:
      - The observability pack as the monitoring step would write it on this host, a dict of
        C(dir) and C(host) (those of M(sglang.deploy.sglang_prometheus_files)) and C(target),
        C(rules) and C(dashboard) (the sha256 hex digest of each file's content). Compared apart
        from the service (C(pack_differences)), by the function that module writes with; a pack
        that differs is written again, nothing restarts.
    type: dict
  drift:
    description:
      - The drift check as the monitoring step would install it, a dict of the C(dir), C(out),
        C(units) (a list of C(name) and C(content)), C(units_dir) and C(timer) of
        M(sglang.deploy.sglang_drift). Compared apart from the service (C(drift_differences)),
        by the functions that module installs with.
    type: dict
"""

EXAMPLES = r"""
- name: Read whether the service part of a deploy would change anything
  sglang.deploy.sglang_service_state:
    service: sglang
    files:
      - path: /etc/systemd/system/sglang.service
        sha256: "{{ lookup('ansible.builtin.template', 'sglang.service.j2') | hash('sha256') }}"
    directories:
      - {path: /opt/sglang/cache, owner: sglang, group: sglang, mode: "0750"}
    user: {name: sglang, group: sglang, groups: [video, render]}
  register: state
"""

RETURN = r"""
unchanged:
  description: True when nothing compared differs.
  type: bool
  returned: always
differences:
  description: What differs, one line each (paths and names, never contents).
  type: list
  elements: str
  returned: always
systemd:
  description: The unit's C(ActiveState), C(UnitFileState), C(NeedDaemonReload) and C(MainPID).
  type: dict
  returned: always
serving_release:
  description: The release id the unit's main process started from; null when it is not
    running or its command line does not say (C(serving_reason) tells why).
  type: str
  returned: when release is given
serving_reason:
  description: Why C(serving_release) is null.
  type: str
  returned: when release is given
pack_differences:
  description: What writing O(pack) would change, one line each (empty when nothing); null
    without O(pack).
  type: list
  elements: str
  returned: always
drift_differences:
  description: What installing O(drift) would change, one line each (empty when it would only
    run the check); null without O(drift).
  type: list
  elements: str
  returned: always
"""

import grp
import hashlib
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_holders import started_release
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_monitoring_files as monitoring
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_systemd import show


def _owner_group_mode(st):
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return owner, group, "%04o" % stat.S_IMODE(st.st_mode)


def _attributes(path, st, want):
    found = _owner_group_mode(st)
    expected = (want["owner"], want["group"], "%04o" % int(want["mode"], 8))
    names = ("owner", "group", "mode")
    return [f"{path}: {name} {have} (want {need})"
            for name, have, need in zip(names, found, expected) if have != need]


def file_differences(want):
    """What differs between a file on the host and the file a deploy writes."""
    path = want["path"]
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return [] if want["state"] == "absent" else [f"{path}: missing"]
    if want["state"] == "absent":
        return [f"{path}: present (a deploy removes it)"]
    if not stat.S_ISREG(st.st_mode):
        return [f"{path}: not a regular file"]
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    found = [] if digest == want["sha256"] else [f"{path}: content differs"]
    return found + _attributes(path, st, want)


def directory_differences(want):
    path = want["path"]
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return [f"{path}: missing"]
    if not stat.S_ISDIR(st.st_mode):
        return [f"{path}: not a directory"]
    return _attributes(path, st, want)


def user_differences(user):
    if not user:
        return []
    name, group = user.get("name", ""), user.get("group", "")
    found = []
    try:
        grp.getgrnam(group)
    except KeyError:
        found.append(f"group {group}: missing")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return found + [f"user {name}: missing"]
    try:
        if grp.getgrgid(entry.pw_gid).gr_name != group:
            found.append(f"user {name}: primary group is not {group}")
    except KeyError:
        found.append(f"user {name}: primary group {entry.pw_gid} does not exist")
    for extra in user.get("groups") or []:
        try:
            members = grp.getgrnam(extra).gr_mem
        except KeyError:
            continue  # a device group this host does not have: the deploy skips it too
        if name not in members:
            found.append(f"user {name}: not in group {extra}")
    return found


def systemd_state(service):
    """{ActiveState, UnitFileState, NeedDaemonReload, MainPID} of the unit, in one systemctl
    call."""
    state, error = show(service + ".service", ["ActiveState", "UnitFileState", "NeedDaemonReload",
                                               "MainPID"])
    if error:
        return {"error": error.strip()[:500]}
    return state


def systemd_differences(state, service):
    if "error" in state:
        return [f"{service}: systemctl show failed: {state['error']}"]
    found = []
    if state.get("ActiveState") != "active":
        found.append(f"{service}: {state.get('ActiveState', 'unknown')}, not active")
    if state.get("UnitFileState") != "enabled":
        found.append(f"{service}: {state.get('UnitFileState', 'unknown')}, not enabled")
    if state.get("NeedDaemonReload") == "yes":
        found.append(f"{service}: the unit changed on disk since systemd read it")
    return found


def serving_differences(state, service, base_dir, release, proc="/proc"):
    """({serving_release, serving_reason}, differences) of the release the unit's process runs
    (no difference of its own for a unit that is not active: systemd_differences says so)."""
    if state.get("ActiveState") != "active":
        return {"serving_release": None, "serving_reason": "the unit is not active"}, []
    found, why = started_release(state.get("MainPID"), base_dir, proc)
    result = {"serving_release": found, "serving_reason": why}
    if found == release:
        return result, []
    if found is None:
        return result, [f"{service}: which release its process started from is unknown ({why})"]
    return result, [f"{service}: its process started from release {found}, not {release}"]


def pack_differences(pack):
    """What writing the pack (`pack`: dir, host, the sha256 of target, rules and dashboard)
    would change; None without it.
    A file that cannot be read, or a symlink the writer refuses, is a change: the writer then
    says why."""
    if pack is None:
        return None
    try:
        names = monitoring.pack_names(str(pack["host"]))
        todo = monitoring.pack_changes(str(pack["dir"]), dict(zip(names, (
            str(pack["target"]), str(pack["rules"]), str(pack["dashboard"])))))
    except KeyError as exc:
        return [f"pack: no {exc}"]
    except (monitoring.MonitoringFileError, OSError, TypeError, ValueError) as exc:
        return [str(exc)]
    return [f"{path}: differs" for _name, path, _old in todo]


def drift_differences(drift):
    """What installing the drift check (`drift`: the sglang_drift module's dir, out, units,
    units_dir, timer) would change; None without it."""
    if drift is None:
        return None
    timer = str(drift.get("timer") or "")
    state = show(timer, ["ActiveState", "UnitFileState"])[0] if timer else {}
    return monitoring.drift_changes(drift, state)


def main():
    module = AnsibleModule(
        argument_spec={
            "service": {"type": "str", "required": True},
            "files": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True},
                "sha256": {"type": "str", "default": ""},
                "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
                "owner": {"type": "str", "default": "root"},
                "group": {"type": "str", "default": "root"},
                "mode": {"type": "str", "default": "0644"},
            }},
            "directories": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True},
                "owner": {"type": "str", "required": True},
                "group": {"type": "str", "required": True},
                "mode": {"type": "str", "required": True},
            }},
            "user": {"type": "dict", "default": {}},
            "base_dir": {"type": "path"},
            "release": {"type": "str"},
            "pack": {"type": "dict"},
            "drift": {"type": "dict"},
        },
        required_by={"release": "base_dir"},
        supports_check_mode=True,
    )
    p = module.params
    differences = []
    try:
        for want in p["files"]:
            differences += file_differences(want)
        for want in p["directories"]:
            differences += directory_differences(want)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"cannot read what the deploy would write: {exc}")
    differences += user_differences(p["user"])
    state = systemd_state(p["service"])
    differences += systemd_differences(state, p["service"])
    serving = {}
    if p["release"] is not None and "error" not in state:
        serving, found = serving_differences(state, p["service"], p["base_dir"], p["release"])
        differences += found
    module.exit_json(changed=False, unchanged=not differences, differences=differences,
                     systemd=state, pack_differences=pack_differences(p["pack"]),
                     drift_differences=drift_differences(p["drift"]), **serving)


if __name__ == "__main__":
    main()
