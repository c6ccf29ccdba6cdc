"""What the monitoring step would change on a host: the observability pack's files and the drift
check's program, units and timer.

One answer for the modules that write them (sglang_prometheus_files, sglang_drift) and for the
read of a deploy that changes nothing (sglang_service_state): a re-run skips a write exactly when
that write would change nothing, and never on a guess.
"""

import hashlib
import inspect
import os
import stat
import sys

from ansible_collections.sglang.deploy.plugins.module_utils import (
    sglang_drift, sglang_effective, sglang_files, sglang_read)
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_read import existing_text
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_systemd import show

# The drift check's program: these modules' sources, side by side (sglang_drift.LIBRARY).
SOURCES = {"sglang_drift": sglang_drift, "sglang_effective": sglang_effective,
           "sglang_files": sglang_files, "sglang_read": sglang_read}
# What root runs or systemd loads is root's and written by root alone: these modes, owner 0.
FILE_MODE, DIR_MODE = 0o644, 0o755


class MonitoringFileError(Exception):
    """A file the monitoring step must not write (says what to change)."""


def sha256(text):
    return hashlib.sha256(str(text).encode("utf-8")).hexdigest()


# The pack (sglang_prometheus_files) ------------------------------------------------------------

def pack_names(host):
    """The pack's files of `host`, relative to the pack's directory: (target, rules, dashboard).
    `host` must be one plain file name."""
    if not host or host in (".", "..") or any(c in host for c in "/\0\n"):
        raise MonitoringFileError(
            f"host {host!r}: the pack's file names are made from it (one name, no '/')")
    return f"targets/{host}.json", f"rules/{host}.rules.yml", "dashboards/sglang.json"


def no_link(path, what):
    if os.path.islink(path):
        raise MonitoringFileError(
            f"{path} is a symlink: the {what} is refused, not followed (remove the link)")


def pack_changes(directory, digests):
    """[(name, path, old text or None)] of each pack file whose content (by sha256, `digests`:
    {name: hex}) or mode (0644) differs, sorted. A symlink on the way is refused."""
    no_link(directory, "pack directory")
    todo = []
    for name, digest in sorted(digests.items()):
        kind, base = name.split("/")
        no_link(os.path.join(directory, kind), "pack directory")
        path = os.path.join(directory, kind, base)
        no_link(path, "pack file")
        old = existing_text(path)
        if old is None or sha256(old) != digest or (os.stat(path).st_mode & 0o777) != 0o644:
            todo.append((name, path, old))
    return todo


# The drift check (sglang_drift) ---------------------------------------------------------------

def attributes_differ(path, mode=FILE_MODE):
    """Whether the file at `path` is other than a regular file of `mode` owned by root:root (a
    file root runs or systemd loads; a missing one differs too)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return True
    return not stat.S_ISREG(info.st_mode) or stat.S_IMODE(info.st_mode) != mode \
        or (info.st_uid, info.st_gid) != (0, 0)


def writable_by_another(directory):
    """The first of `directory` and its parents that an account other than root (and the one
    running this) can write to or replace entries of: a link, a directory another account owns,
    or one writable by its group or by all that is not sticky (a root-owned sticky directory
    such as /tmp lets no other account replace what root made in it). None when there is none.
    Root runs code from `directory`: such a directory is refused, never written into."""
    trusted = {0, os.geteuid()}
    path = os.path.abspath(directory)
    while True:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            info = None
        if info is not None and (
                stat.S_ISLNK(info.st_mode) or info.st_uid not in trusted
                or (info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX)):
            return path
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def program_changes(directory):
    """The names of the check's files under `directory` that differ from the sources this
    collection carries (each written whole as inspect.getsource gives it), or whose mode or
    owner differ (FILE_MODE, root:root). MonitoringFileError when `directory` or a parent is one
    another account can write: root runs this program."""
    unsafe = writable_by_another(directory)
    if unsafe:
        raise MonitoringFileError(
            f"{unsafe} can be written by an account other than root, and root runs the drift "
            f"check from {directory}: make it root's, not group- or world-writable "
            "(chown root:root, chmod go-w), or set sglang_base_dir elsewhere")
    return [name for name in sglang_drift.LIBRARY
            if attributes_differ(os.path.join(directory, f"{name}.py"))
            or existing_text(os.path.join(directory, f"{name}.py"))
            != inspect.getsource(SOURCES[name])]


def unit_texts(units, units_dir):
    """[(name, path, text)] of `units` ({name, content}), sorted by name, @PYTHON@ in each
    replaced by the Python that runs this code (the one the check is written for)."""
    out = []
    for unit in sorted(units or [], key=lambda u: u["name"]):
        name = unit["name"]
        if "/" in name or name in ("", ".", ".."):
            raise MonitoringFileError(f"units: {name!r} is not a unit file name")
        out.append((name, os.path.join(units_dir or "/etc/systemd/system", name),
                    str(unit["content"]).replace("@PYTHON@", sys.executable)))
    return out


def unit_changes(units, units_dir):
    """[(name, path, text)] of the units whose file differs, by content, mode or owner
    (FILE_MODE, root:root: systemd loads them as root)."""
    return [(name, path, text) for name, path, text in unit_texts(units, units_dir)
            if attributes_differ(path) or existing_text(path) != text]


def textfile_dir_missing(out):
    """Whether the textfile directory of `out` has to be made; a symlink there is refused."""
    directory = os.path.dirname(out)
    no_link(directory, "textfile directory")
    return not os.path.isdir(directory)


def timer_state(timer):
    """The timer's {ActiveState, UnitFileState} (empty when systemctl cannot say)."""
    return show(timer, ["ActiveState", "UnitFileState"])[0]


def timer_running(state):
    """Whether a timer's systemd state ({ActiveState, UnitFileState}) is enabled and active."""
    return state.get("ActiveState") == "active" and state.get("UnitFileState") == "enabled"


def drift_changes(params, state):
    """What installing the drift check with `params` (the sglang_drift module's dir, out, units,
    units_dir, timer) would change, one line each; empty when the install would only run the
    check. `state`: the timer's systemd state (timer_state), read by the caller. A file that
    cannot be read, or a symlink the install refuses, is a change: the install then says why."""
    try:
        found = [f"{os.path.dirname(params['out'])}: missing"] \
            if textfile_dir_missing(params["out"]) else []
        found += [f"{os.path.join(params['dir'], name)}.py: differs"
                  for name in program_changes(params["dir"])]
        found += [f"{path}: differs" for _name, path, _text in
                  unit_changes(params.get("units"), params.get("units_dir"))]
    except KeyError as exc:
        return [f"drift: no {exc}"]
    except (MonitoringFileError, OSError, AttributeError, TypeError, ValueError) as exc:
        return [f"drift: {exc}"]
    timer = str(params.get("timer") or "")
    if timer and not timer_running(state):
        found.append(f"{timer}: {state.get('ActiveState', 'unknown')}, "
                     f"{state.get('UnitFileState', 'unknown')} (want active, enabled)")
    return found
