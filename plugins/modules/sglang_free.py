#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Before SGLang starts: its port and GPUs free, this service's leftovers ended, others refused."""

DOCUMENTATION = r"""
module: sglang_free
short_description: Free a release's port and GPUs before SGLang starts, or refuse naming who holds them
description:
  - Reads who holds the port (listening sockets in /proc) and the release's GPUs
    (C(nvidia-smi --query-compute-apps)), and which processes are this service's (in the unit's
    cgroup, or run by the service user from a program under C(base_dir), such as a server started
    by hand from a release or a worker that escaped a killed unit).
  - A holder that is not this service's (another user's job, a process nvidia-smi names but this
    host's /proc does not show) refuses, naming PID, user, command and GPU memory. With
    C(state=checked) that is all it does, read-only (before the lock, and before the release that
    serves is stopped).
  - C(state=free), once the unit is stopped, ends every process of this service that is left
    (SIGTERM, then SIGKILL after C(term_grace) seconds), names each, and waits until the port and
    the release's GPUs no longer show them (the driver frees GPU memory after the process exits),
    bounded by C(timeout). While the unit runs its processes are not leftovers, and nothing is ended.
  - The GPUs are those in C(visible_devices) (the release's CUDA_VISIBLE_DEVICES), all when it is
    empty. Without nvidia-smi, or when it fails, the GPU half is C(unknown) with the reason, and
    only the port is checked.
extends_documentation_fragment:
  - sglang.deploy.sglang.nvidia_smi
options:
  service:
    description: systemd service name (without C(.service)).
    type: str
    required: true
  user:
    description: The service user (C(User=) of the unit).
    type: str
    required: true
  base_dir:
    description: Base directory of the releases and envs; the service user's commands under it are
      this service's.
    type: path
    required: true
  port:
    description: The TCP port SGLang listens on.
    type: int
    required: true
  visible_devices:
    description: The release's CUDA_VISIBLE_DEVICES (GPU indices); empty for every GPU.
    type: str
    default: ''
  state:
    description: C(checked) refuses foreign holders only; C(free) also ends this service's
      leftovers and waits until their GPU memory is released.
    type: str
    choices: [checked, free]
    default: checked
  timeout:
    description: Seconds C(state=free) waits, in all, for leftovers to exit and their GPU memory to
      be released.
    type: int
    default: 180
  term_grace:
    description: Seconds between SIGTERM and SIGKILL for a leftover.
    type: int
    default: 20
notes:
  - Not a builtin because no builtin reads who holds a port or a GPU, or tells a service's own
    leftover from another user's process.
  - Root needs CAP_SYS_PTRACE to see which process holds a socket of another user (containers
    often drop it); without it the socket's owner (uid) still tells this service's from others.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Refuse a start over a port or GPU another process holds (read-only)
  sglang.deploy.sglang_free:
    service: sglang
    user: sglang
    base_dir: /opt/sglang
    port: 30000

- name: After the stop, end what the service left and wait until its GPU memory is released
  sglang.deploy.sglang_free:
    service: sglang
    user: sglang
    base_dir: /opt/sglang
    port: 30000
    visible_devices: "0,1"
    state: free
"""

RETURN = r"""
holders:
  description: Who holds the port or the release's GPUs now, each with C(owner) (C(service),
    C(foreign), C(unknown)), C(why) and C(text) (PID, user, command, what it holds).
  type: list
  elements: dict
  returned: always
leftovers:
  description: This service's processes found while its unit is not running (ended with
    C(state=free), else only named), each with C(text).
  type: list
  elements: dict
  returned: always
ended:
  description: The leftovers ended, each with C(text) and C(signal) (C(SIGTERM) or C(SIGKILL);
    null for one that exited, or whose PID came to name another process, before a signal).
  type: list
  elements: dict
  returned: always
gpus:
  description: C(checked) (bool), C(indices) of the release's GPUs, C(reason) when unknown.
  type: dict
  returned: always
waited_s:
  description: Seconds spent ending leftovers and waiting for their port and GPU memory.
  type: float
  returned: always
summary:
  description: One line for the play's output.
  type: str
  returned: always
"""

import os
import pwd
import shutil
import signal
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_holders as holders_of
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_gpus import (
    APPS_QUERY, CSV, GPUS_QUERY, run_tool, smi_rows)
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_systemd import unit_state

RUNNING = ("active", "activating", "deactivating", "reloading")
POLL_S = 0.5


def _smi(argv, timeout=60):
    """(stdout, error) of one nvidia-smi call, bounded in time."""
    code, out, err = run_tool(argv, timeout)
    if code != 0:
        return "", f"{' '.join(argv)} exited {code}: {(err or out).strip()[:300]}"
    return out, None


def gpu_side(nvidia_smi, visible, proc="/proc", smi=_smi, bus=None):
    """({pid: holder}, {checked, indices, reason, bus}) of the release's GPUs; `bus` ({bus id:
    index}, read by an earlier call) saves the --query-gpu call of a poll."""
    path = shutil.which(nvidia_smi)
    if not path:
        return {}, {"checked": False, "indices": [],
                    "reason": f"{nvidia_smi} not found: no NVIDIA driver, no GPU to free"}
    gpus, why = bus, None
    if gpus is None:
        out, error = smi([path, GPUS_QUERY, CSV])
        gpus, why = (None, error) if error else holders_of.release_gpus(smi_rows(out, 4), visible)
    if gpus is None:
        return {}, {"checked": False, "indices": [], "reason": why}
    out, error = smi([path, APPS_QUERY, CSV])
    if error:
        return {}, {"checked": False, "indices": sorted(gpus.values()), "reason": error}
    found = holders_of.gpu_holders(holders_of.compute_apps(out), gpus, proc)
    return found, {"checked": True, "indices": sorted(gpus.values()), "reason": None, "bus": gpus}


def survey(params, uid, unit_running, proc="/proc", smi=_smi, bus=None, mine=None):
    """Who holds the port and GPUs, which processes are this service's, and what is foreign.
    A poll passes `bus` and `mine` from the first survey: no second scan of every process."""
    service, base_dir = params["service"], params["base_dir"]
    if mine is None:
        mine = holders_of.ours(service, uid, base_dir, proc, skip={os.getpid(), os.getppid()})
    port = holders_of.port_holders(params["port"], proc)
    found = {h["pid"]: dict(h, port=port["port"]) for h in port["holders"]}
    gpu_found, gpus = gpu_side(params["nvidia_smi"], params["visible_devices"], proc, smi, bus)
    bus = gpus.pop("bus", None)
    for pid, holder in gpu_found.items():
        found[pid] = dict(found.get(pid) or holder, gpus=holder["gpus"])
    listed = []
    for holder in found.values():
        why = holders_of.owner(holder, service, uid, base_dir)
        kind = "service" if why else ("foreign" if holder.get("visible", True) else "unknown")
        listed.append(dict(holder, owner=kind, why=why, text=holders_of.describe(holder)))
    if port["listening"] and not port["holders"]:
        # The sockets' PIDs are unreadable here (no CAP_SYS_PTRACE): their owners decide.
        for owner_uid in port["uids"]:
            own = owner_uid == uid and (unit_running or bool(mine))
            listed.append({"pid": None, "uid": owner_uid, "user": holders_of.user_name(owner_uid),
                           "owner": "service" if own else "foreign", "port": port["port"],
                           "why": "the service user's socket" if own else None,
                           "text": f"a process of user {holders_of.user_name(owner_uid)} (its PID "
                                   f"unreadable here): port {port['port']}"})
    return {"holders": listed, "mine": mine, "gpus": gpus, "bus": bus}


def _gone(pid, start, proc):
    info = holders_of.process(pid, proc)
    return info is None or info["zombie"] or info["start"] != start


def signal_if_same(pid, start, sig, proc="/proc"):
    """Send `sig` to `pid` only if it is still the process whose start time was read (False when
    it is gone or its PID now names another). A pidfd pins the process first, then its start is
    read again: a PID reused between the survey and the signal never gets root's signal. Where
    the kernel has no pidfd (before 5.3), the start is checked just before os.kill."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):
        handle = None  # no pidfd here: the narrower check below is all there is
    try:
        if _gone(pid, start, proc):
            return False
        if handle is None:
            os.kill(pid, sig)
        else:
            signal.pidfd_send_signal(handle, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError as exc:
        raise OSError(f"cannot end pid {pid}: {exc}") from exc
    finally:
        if handle is not None:
            os.close(handle)


def end(leftovers, term_grace, deadline, proc="/proc"):
    """SIGTERM each leftover, SIGKILL what is left after term_grace; [{text, signal}] of those
    that exited, and the ones still there at the deadline. A leftover whose PID names another
    process by the time of a signal is gone, never signalled."""
    ended, alive = [], dict(leftovers)
    for sig, until in ((signal.SIGTERM, min(deadline, time.monotonic() + term_grace)),
                       (signal.SIGKILL, deadline)):
        for pid in list(alive):
            if not signal_if_same(pid, alive[pid]["start"], sig, proc):
                ended.append({"pid": pid, "text": alive.pop(pid)["text"], "signal": None})
        while alive and time.monotonic() < until:
            for pid in [p for p in alive if _gone(p, alive[p]["start"], proc)]:
                ended.append({"pid": pid, "text": alive.pop(pid)["text"], "signal": sig.name})
            if alive:
                time.sleep(POLL_S)
    return ended, alive


def released(params, uid, pids, proc, smi, bus=None):
    """True once none of `pids` holds the port or a release GPU (their memory freed); a socket
    of the service user whose PID is unreadable still counts as theirs. One port read and one
    nvidia-smi call per poll."""
    now = survey(params, uid, True, proc, smi, bus=bus, mine={})
    return not any(h["pid"] in pids or (h["pid"] is None and h["owner"] == "service")
                   for h in now["holders"]), now


def refusal(foreign, params):
    return ("Refused before SGLang starts: " + "; ".join(h["text"] for h in foreign)
            + ". Stop it (or them), or move this release off them: another sglang_port, or "
              f"CUDA_VISIBLE_DEVICES in sglang_env (GPUs now: {params['visible_devices'] or 'all'}).")


def _end_leftovers(params, uid, leftovers, started, result, proc, smi, bus):
    """End the leftovers, wait until their port and GPU memory are released (updates
    `result`); the failure message when they still hold them at the deadline."""
    deadline = started + params["timeout"]
    ended, alive = end({h["pid"]: h for h in leftovers}, params["term_grace"], deadline, proc)
    result.update(changed=any(e["signal"] for e in ended), ended=ended)
    pids = {h["pid"] for h in leftovers}
    done, now = released(params, uid, pids, proc, smi, bus)
    while not done and time.monotonic() < deadline:
        time.sleep(POLL_S)
        done, now = released(params, uid, pids, proc, smi, bus)
    result.update(holders=_brief(now["holders"]), waited_s=round(time.monotonic() - started, 1))
    if not alive and done:
        return None
    still = [h["text"] for h in alive.values()] or \
        [h["text"] for h in now["holders"] if h["pid"] in pids or h["pid"] is None]
    return (f"This service's leftovers still hold the port or GPU memory after "
            f"{params['timeout']} s: {'; '.join(still)}. A process stuck in the GPU driver "
            "(state D) needs the driver reset or a reboot; raise sglang_free_timeout if the "
            "driver is only slow to free memory.")


def run(params, check_mode, proc="/proc", smi=_smi):
    """The module's result (a `failed` one names what refused)."""
    started = time.monotonic()
    try:
        uid = pwd.getpwnam(params["user"]).pw_uid
    except KeyError:
        uid = None  # no such user yet (a first deploy): only the unit's cgroup is ours
    state = unit_state(f"{params['service']}.service")
    running = state.get("ActiveState") in RUNNING
    found = survey(params, uid, running, proc, smi)
    # A leftover that holds the port or a release GPU is named with what it holds.
    holding = {h["pid"]: h for h in found["holders"] if h.get("pid") is not None}
    leftovers = [] if running else [
        dict(info, text=holders_of.describe(dict(info, port=holding.get(pid, {}).get("port"),
                                                 gpus=holding.get(pid, {}).get("gpus")))
             + f" ({info['why']})")
        for pid, info in found["mine"].items()]
    result = {"changed": False, "holders": _brief(found["holders"]), "gpus": found["gpus"],
              "leftovers": [{"pid": h["pid"], "text": h["text"]} for h in leftovers],
              "ended": [], "waited_s": 0.0}
    if params["state"] == "free" and leftovers and not check_mode:
        failure = _end_leftovers(params, uid, leftovers, started, result, proc, smi,
                                 found["bus"])
        if failure:
            return dict(result, failed=True, msg=failure)
    foreign = [h for h in result["holders"] if h["owner"] != "service"]
    result["summary"] = _summary(params, result, running)
    if foreign:
        return dict(result, failed=True, msg=refusal(foreign, params))
    return result


def _brief(holders):
    return [{key: h.get(key) for key in ("pid", "user", "owner", "why", "text")} for h in holders]


def _summary(params, result, running):
    gpus = result["gpus"]
    gpu_text = (f"GPUs {','.join(map(str, gpus['indices'])) or 'none'}" if gpus["checked"]
                else f"GPUs unknown ({gpus['reason']})")
    held = "held by the running service" if running and result["holders"] else "free"
    text = f"port {params['port']} and {gpu_text}: {held}"
    if result["ended"]:
        ended = [f"{e['text']} ({e['signal'] or 'gone before a signal'})" for e in result["ended"]]
        text += "; ended " + "; ".join(ended) \
            + f"; their port and GPU memory released after {result['waited_s']} s"
    elif result["leftovers"]:
        verb = "would end" if params["state"] == "free" else "to end at the start"
        text += f"; {verb}: " + "; ".join(h["text"] for h in result["leftovers"])
    return text


def main():
    module = AnsibleModule(
        argument_spec={
            "service": {"type": "str", "required": True},
            "user": {"type": "str", "required": True},
            "base_dir": {"type": "path", "required": True},
            "port": {"type": "int", "required": True},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "visible_devices": {"type": "str", "default": ""},
            "state": {"type": "str", "choices": ["checked", "free"], "default": "checked"},
            "timeout": {"type": "int", "default": 180},
            "term_grace": {"type": "int", "default": 20},
        },
        supports_check_mode=True,
    )
    try:
        result = run(module.params, module.check_mode)
    except OSError as exc:
        module.fail_json(msg=f"could not free the port and GPUs: {exc}")
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
