"""Is the service as the inventory renders it? What the service part of a deploy would write or
start, compared with what the host has (read-only): for sglang_service_state, and for the one read
of a re-run (sglang_release's `service` option), which compares the release the unit's process
started from with the one the same call plans.
"""

import grp
import hashlib
import os
import pwd
import stat

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_monitoring_files as monitoring
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_holders import started_release
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_systemd import show

# The arguments (AnsibleModule's form): sglang_service_state's, and the checked form of
# sglang_release's `service` (ArgumentSpecValidator).
SPEC = {
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
}


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
    would change; None without it. A file that cannot be read, or a symlink the writer refuses,
    is a change: the writer then says why."""
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
    return monitoring.drift_changes(drift, monitoring.timer_state(timer) if timer else {})


def read(p):
    """{unchanged, differences, systemd, pack_differences, drift_differences} (and with
    `release`: serving_release, serving_reason) of the checked arguments `p` (SPEC). OSError or
    ValueError: a file that cannot be read."""
    differences = []
    for want in p["files"]:
        differences += file_differences(want)
    for want in p["directories"]:
        differences += directory_differences(want)
    differences += user_differences(p["user"])
    state = systemd_state(p["service"])
    differences += systemd_differences(state, p["service"])
    serving = {}
    if p.get("release") is not None and "error" not in state:
        serving, found = serving_differences(state, p["service"], p["base_dir"], p["release"])
        differences += found
    return dict(unchanged=not differences, differences=differences, systemd=state,
                pack_differences=pack_differences(p.get("pack")),
                drift_differences=drift_differences(p.get("drift")), **serving)
