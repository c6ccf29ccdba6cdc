# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Who holds a release's port and GPUs, and which of them are this service's own.

Read from /proc (listening sockets, each process's cgroup, owner, command line and start time)
and from `nvidia-smi --query-compute-apps`. A process is this service's when it runs in the
unit's cgroup, or as the service user running a program under the deployment's base directory
(a release env's python: a server started by hand from a release, a worker that escaped the
unit). Anything else that
holds the port or one of the release's GPUs is foreign; a holder this host cannot see (a PID
from another namespace) is unknown, which refuses too: a start is allowed only on evidence.
Standard library only.
"""

import os
import pwd

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_read import number, text_of

COMMAND_CHARS = 200


def listening_inodes(port, proc="/proc"):
    """{socket inode: owner uid} of the sockets listening on TCP `port` (IPv4 and IPv6)."""
    inodes = {}
    for table in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc, "net", table), encoding="ascii") as handle:
                next(handle, None)
                for line in handle:
                    fields = line.split()
                    if len(fields) > 9 and fields[3] == "0A" and \
                            int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes[fields[9]] = int(fields[7])
        except (OSError, ValueError):
            continue
    return inodes


def _read(proc, pid, name, mode="r"):
    with open(os.path.join(proc, str(pid), name), mode) as handle:  # pylint: disable=unspecified-encoding
        return handle.read()


def _systemd_path(proc, pid):
    """The cgroup path systemd's own hierarchy gives a process: `name=systemd` where the host
    has it (legacy and hybrid: the unified `0::` line there holds no unit), else the unified
    one; None when unreadable."""
    try:
        lines = _read(proc, pid, "cgroup").splitlines()
    except OSError:
        return None
    paths = {line.split(":", 2)[1]: line.split(":", 2)[2] for line in lines if line.count(":") >= 2}
    return paths.get("name=systemd", paths.get(""))


def _manager_root(proc):
    """The cgroup this host's systemd manages: PID 1's, less its `init.scope`. `/` on a host; in
    a container whose cgroup paths show the host's prefix, the container's own root."""
    path = _systemd_path(proc, 1) or "/"
    return path.rsplit("/", 1)[0] or "/" if path.endswith("/init.scope") else path


def unit_of(pid, proc="/proc"):
    """The system service a process runs in, from its cgroup path below this host's systemd
    (None outside one): the first `.service` of the path, with only slices above it
    (`/system.slice/sglang.service`, or a sub-cgroup of it). A service of the same name under
    anything else is someone else's: a user's manager (`/user.slice/user-1000.slice/
    user@1000.service/app.slice/sglang.service`), a container's own systemd (`/machine.slice/
    libpod-ID.scope/.../system.slice/sglang.service`, `systemd-nspawn@x.service/payload/...`)."""
    path = _systemd_path(proc, pid)
    if path is None:
        return None
    root = _manager_root(proc).rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root):]
    for part in path.split("/"):
        if part.endswith(".service"):
            return part
        if part and not part.endswith(".slice"):
            return None
    return None


def started_release(pid, base_dir, proc="/proc"):
    """(release id, None) that process `pid` started from, or (None, why): the release's
    `launch` runs `<base_dir>/releases/<id>/launch.py` with `--config <that release>/config.yaml`
    (its own path resolved), and launch.py keeps its own path in its command line or, with no
    key to hand over, execs SGLang with that --config: either is readable without ptrace."""
    if not str(pid or "").isdigit() or int(pid) == 0:
        return None, "no main process"
    try:
        argv = [a.decode(errors="replace")
                for a in _read(proc, pid, "cmdline", "rb").split(b"\0")]
    except OSError as exc:
        return None, f"pid {pid}'s command line is unreadable: {exc.strerror or exc}"
    releases = os.path.join(os.path.realpath(base_dir), "releases")
    configs = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--config"]
    for path in argv[:4] + configs:
        head, name = os.path.split(path)
        if name in ("launch.py", "config.yaml") and os.path.dirname(head) == releases:
            return os.path.basename(head), None
    return None, f"pid {pid} runs no release's launch.py or config.yaml under {releases}"


def user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, TypeError, OverflowError):
        return str(uid)


def process(pid, proc="/proc"):
    """{pid, start, uid, user, command, argv, unit, zombie} of a process, None when it is gone.

    `start` (clock ticks after boot) tells a process from a later one that reused its PID."""
    try:
        stat = _read(proc, pid, "stat")
        status = _read(proc, pid, "status")
        argv = _read(proc, pid, "cmdline", "rb").split(b"\0")
    except OSError:
        return None
    # Fields after the command (which may hold spaces and parentheses): state is the first.
    after = stat.rsplit(")", 1)[-1].split()
    uid = next((int(line.split()[1]) for line in status.splitlines()
                if line.startswith("Uid:")), None)
    argv = [a.decode(errors="replace") for a in argv if a]
    return {"pid": int(pid), "start": after[19] if len(after) > 19 else None, "uid": uid,
            "user": user_name(uid), "command": " ".join(argv)[:COMMAND_CHARS], "argv": argv,
            "unit": unit_of(pid, proc), "zombie": bool(after) and after[0] in ("Z", "X")}


def owner(info, service, uid, base_dir):
    """Why a process is this service's ("the unit's cgroup", "the service user's command
    under base_dir"), or None when it is not."""
    if info.get("unit") == f"{service}.service":
        return f"in {service}.service's cgroup"
    # The program itself (argv[0]: a release env's python, current/launch), not any argument:
    # an editor or a `tail` on a release's file is not the service.
    argv = info.get("argv") or [""]
    if uid is not None and info.get("uid") == uid and \
            argv[0].startswith(base_dir.rstrip("/") + "/"):
        return f"{info.get('user')}'s command under {base_dir}"
    return None


def ours(service, uid, base_dir, proc="/proc", skip=()):
    """{pid: process} of every process this service owns, holding anything or not."""
    found = {}
    for pid in filter(str.isdigit, os.listdir(proc)):
        if int(pid) in skip:
            continue
        info = process(pid, proc)
        if info and not info["zombie"]:
            why = owner(info, service, uid, base_dir)
            if why:
                found[info["pid"]] = dict(info, why=why)
    return found


def port_holders(port, proc="/proc"):
    """Who listens on `port`: {port, listening, uids, holders: [process]}.

    Holders are found through /proc/PID/fd, which root can read only for its own processes
    where it lacks CAP_SYS_PTRACE (containers): `uids` are the sockets' owners, always known.
    """
    if not port:
        return {"port": None, "listening": False, "uids": [], "holders": []}
    inodes = listening_inodes(port, proc)
    holders = []
    if inodes:
        targets = {f"socket:[{inode}]" for inode in inodes}
        for pid in filter(str.isdigit, os.listdir(proc)):
            fd_dir = os.path.join(proc, pid, "fd")
            try:
                if not any(os.readlink(os.path.join(fd_dir, fd)) in targets
                           for fd in os.listdir(fd_dir)):
                    continue
            except OSError:
                continue
            info = process(pid, proc)
            if info:
                holders.append(info)
    return {"port": port, "listening": bool(inodes), "uids": sorted(set(inodes.values())),
            "holders": holders}


def compute_apps(output):
    """[{pid, name, memory_mib, bus_id}] of `nvidia-smi APPS_QUERY CSV` rows (sglang_gpus); memory None when
    nvidia-smi cannot say ([N/A], [Insufficient Permissions])."""
    apps = []
    for line in text_of(output).replace("\0", " ").splitlines()[:4096]:
        parts = [part.strip() for part in line.split(",")]
        pid = number(parts[0], 1, 2 ** 31) if len(parts) >= 4 and parts[0].isdigit() else None
        if pid is not None:
            apps.append({"pid": pid, "name": parts[1][:COMMAND_CHARS],
                         "memory_mib": number(parts[2], 0, 10 ** 7),
                         "bus_id": parts[3][:64].upper()})
    return apps


def release_gpus(gpu_rows, visible):
    """({bus id: index} of the GPUs the release sees, None) from `nvidia-smi GPUS_QUERY CSV` (sglang_gpus)
    rows and CUDA_VISIBLE_DEVICES, or (None, why) when that cannot be told."""
    by_index = {int(row[0]): row[3].upper() for row in gpu_rows}
    if visible is None or not str(visible).strip():
        return {bus: index for index, bus in by_index.items()}, None
    chosen = {}
    for item in str(visible).split(","):
        item = item.strip()
        if not item.isdigit():
            return None, (f"CUDA_VISIBLE_DEVICES entry {item!r} is not a GPU index; which "
                          "processes hold the release's GPUs is unknown")
        if int(item) not in by_index:
            return None, f"CUDA_VISIBLE_DEVICES names GPU {item}, which nvidia-smi does not list"
        chosen[by_index[int(item)]] = int(item)
    return chosen, None


def gpu_holders(apps, gpus, proc="/proc"):
    """{pid: process with `gpus` [{index, memory_mib}]} of the apps on the release's GPUs;
    a PID this host's /proc does not show is a holder with `visible` false."""
    holders = {}
    for app in apps:
        if app["bus_id"] not in gpus:
            continue
        if app["pid"] not in holders:
            info = process(app["pid"], proc)
            holders[app["pid"]] = dict(info, visible=True) if info else {
                "pid": app["pid"], "uid": None, "user": "?", "command": app["name"],
                "argv": [], "unit": None, "visible": False}
            holders[app["pid"]]["gpus"] = []
        holders[app["pid"]]["gpus"].append({"index": gpus[app["bus_id"]],
                                            "memory_mib": app["memory_mib"]})
    return holders


def describe(holder):
    """pid 123 (user nobody, `python3 -m http.server 30000`): port 30000, 1200 MiB on GPU 1."""
    held = ([f"port {holder['port']}"] if holder.get("port") else []) + [
        f"{g['memory_mib'] if g['memory_mib'] is not None else '?'} MiB on GPU {g['index']}"
        for g in holder.get("gpus") or []]
    unit = f", {holder['unit']}" if holder.get("unit") else ""
    seen = "" if holder.get("visible", True) else \
        " (not in this host's /proc: nvidia-smi sees another PID namespace)"
    return (f"pid {holder['pid']} (user {holder.get('user') or '?'}, "
            f"`{holder.get('command') or '?'}`{unit}){seen}: {', '.join(held) or 'nothing'}")
