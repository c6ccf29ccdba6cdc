#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Fetch a hub checkpoint into a local directory before the restart, with progress."""

DOCUMENTATION = r"""
module: sglang_model_fetch
short_description: Fetch a Hugging Face hub checkpoint into a local directory, pinned to a commit
description:
  - Downloads I(repo) at I(revision) into I(local_dir) with huggingface_hub, run by the ml-env's
    Python in a detached worker (module_utils/sglang_fetch_worker.py), so the download outlives
    the calls that watch it; a re-run attaches to a running fetch instead of starting another.
  - Before the download, the hub's file sizes are checked against the free space of
    I(local_dir)'s filesystem. A finished fetch leaves C(.sglang-fetch.json) in I(local_dir);
    with it present for the same repo, revision and patterns, nothing is fetched again.
  - "With I(offline), nothing reaches the network: the directory must already hold the
    checkpoint (huggingface_hub's C(local_files_only))."
  - Called in slices by the role's C(sglang_progress) action, which prints the progress.
extends_documentation_fragment:
  - sglang.deploy.sglang.venv
options:
  repo:
    description: Hub id, e.g. C(Qwen/Qwen3.6-27B).
    type: str
    required: true
  revision:
    description: The commit to fetch (the role asks for a full commit hash).
    type: str
    required: true
  local_dir:
    description: Directory the checkpoint goes to (created when missing).
    type: path
    required: true
  state_dir:
    description: Where the worker's request, state and log live.
    type: path
    required: true
  token:
    description: Hub token for gated or private repos (only in the worker's environment).
    type: str
    default: ''
  offline:
    description: Use only what is on disk (C(HF_HUB_OFFLINE=1)).
    type: bool
    default: false
  allow_patterns:
    description: Only the files matching these globs (all when empty).
    type: list
    elements: str
    default: []
  min_free_gb:
    description: Space to leave free on the filesystem after the download.
    type: float
    default: 10
  timeout:
    description: Seconds to wait for the fetch in all; it goes on in the background after.
    type: int
    default: 14400
  slice:
    description: Return after this many seconds with C(pending) and C(resume) (0 waits to the end).
    type: float
    default: 0
  resume:
    description: C(resume) of the call before (internal).
    type: dict
    default: {}
notes:
  - Not a builtin because there is no equivalent and it carries a secret; a detached
    download that outlives the module calls, with a free-space check and progress in slices;
    the hub token reaches the worker only through its environment, never an argument or a
    log.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Fetch a checkpoint pinned to a commit (the role runs it in slices via sglang_progress)
  sglang.deploy.sglang_model_fetch:
    repo: Qwen/Qwen3.6-27B
    revision: 0123456789abcdef0123456789abcdef01234567
    local_dir: /srv/models/Qwen3.6-27B
    venv: /opt/ml-env
    state_dir: /var/lib/sglang/fetch
    token: "{{ sglang_hf_token }}"
    allow_patterns: ["*.safetensors", "*.json", "tokenizer*"]
  register: fetch
"""

RETURN = r"""
fetched:
  description: Whether the checkpoint is complete in local_dir.
  type: bool
  returned: success
sha:
  description: The commit fetched.
  type: str
  returned: success
files:
  description: Files in the checkpoint.
  type: int
  returned: success
total_bytes:
  description: Bytes of the checkpoint.
  type: int
  returned: success
architectures:
  description: The checkpoint's architectures (config.json).
  type: list
  returned: when fetched in this call
pending:
  description: The slice ended before the fetch did; call again with C(resume).
  type: bool
  returned: always
resume:
  description: Where the fetch stands, for the next call.
  type: dict
  returned: when pending
progress:
  description: Lines to show now.
  type: list
  returned: always
status:
  description: One line on the fetch's progress.
  type: str
  returned: when pending
log:
  description: The worker's last log lines.
  type: list
  returned: failure
"""

import hashlib
import inspect
import json
import os
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_fetch_worker as worker
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_sandbox as sandboxes
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_read import number, read_text
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_redact import excerpt

GB = 1e9
# More free space than any filesystem has (a petabyte) is a typo, not a wish.
MAX_FREE_GB = 1e6
# Hub tokens are tens of characters; a longer one is a mistake (and costs every redaction).
MAX_TOKEN = 4096
MAX_BYTES = 1e16


def size(n):
    """Bytes for people: 8.4 MB, 54.1 GB (0 for what is not a sane number of bytes)."""
    n = number(n, 0, MAX_BYTES, integer=False) or 0
    return f"{n / GB:.1f} GB" if n >= GB else f"{n / 1e6:.1f} MB"


class FetchFailed(Exception):
    def __init__(self, msg, log=None):
        super().__init__(msg)
        self.log = log or []


def read_json(path):
    """A JSON object from a regular file of sane size, else {} (a FIFO does not block)."""
    try:
        data = json.loads(read_text(path))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError, RecursionError):
        return {}


def read_state(work):
    """The worker's state with each field of the type it should have: a state of the wrong
    shape (`sha: null` from a hub that omits it, a hand-edited file) reads as unknown."""
    state = read_json(os.path.join(work, "state.json"))
    files = state.get("files")
    phase = state.get("phase")
    return {
        "phase": phase if phase in ("planning", "downloading", "done", "failed") else "starting",
        "sha": state["sha"] if isinstance(state.get("sha"), str) else None,
        "files": files if isinstance(files, (dict, int)) and not isinstance(files, bool) else None,
        "total_bytes": number(state.get("total_bytes"), 0, MAX_BYTES),
        "need_bytes": number(state.get("need_bytes"), 0, MAX_BYTES),
        "error": str(state.get("error"))[:2000] if state.get("error") is not None else "?",
    }


def _count(files):
    """Files of a state: a count (done), or {name: size} (downloading)."""
    return files if isinstance(files, int) else len(files or {})


def check_params(params):
    """Why the arguments cannot start a fetch, naming the option (None when they can)."""
    if params["repo"].count("/") != 1 or not params["revision"].strip():
        return (f"repo {params['repo']!r} is not a hub id (owner/name) or the revision is "
                "empty")
    if not os.path.isabs(params["local_dir"]):
        return "local_dir must be an absolute path"
    if number(params["min_free_gb"], 0, MAX_FREE_GB, integer=False) is None:
        return (f"min_free_gb must be a number of GB from 0 to {MAX_FREE_GB:g}, not "
                f"{params['min_free_gb']!r}")
    if number(params["slice"], 0, 86400, integer=False) is None or params["timeout"] < 0:
        return "slice and timeout must be 0 or more seconds (slice at most a day)"
    if len(params["token"]) > MAX_TOKEN:
        return (f"token is {len(params['token'])} characters: not a hub token (at most "
                f"{MAX_TOKEN}; check sglang_hf_token)")
    if any(c in params["token"] for c in "\0\r\n"):
        # Never echoed: it is a secret, only its defect is named.
        return "token holds a NUL or a line break: not a hub token (check sglang_hf_token)"
    return None


def finished(params):
    """The marker of an earlier fetch of the same repo, revision and patterns, or None."""
    marker = read_json(os.path.join(params["local_dir"], worker.MARKER))
    same = (marker.get("repo") == params["repo"] and marker.get("revision") == params["revision"]
            and (marker.get("allow_patterns") or []) == (params["allow_patterns"] or []))
    config = os.path.isfile(os.path.join(params["local_dir"], "config.json"))
    return marker if same and config else None


def work_dir(params):
    key = json.dumps([params["repo"], params["revision"], params["local_dir"],
                      params["allow_patterns"]])
    return os.path.join(params["state_dir"], hashlib.sha256(key.encode()).hexdigest()[:16])


def alive(pid):
    """A running (not zombie) fetch worker has this pid."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="utf-8") as handle:
            state = handle.read().rpartition(")")[2].split()[0]
        with open(f"/proc/{int(pid)}/cmdline", "rb") as handle:
            cmdline = handle.read()
    except (OSError, ValueError, IndexError, TypeError):
        return False
    return state != "Z" and b"sglang_fetch_worker" in cmdline


def start(params, work):
    """Start the detached worker; returns its pid."""
    os.makedirs(work, mode=0o700, exist_ok=True)
    os.makedirs(params["local_dir"], mode=0o755, exist_ok=True)
    script = os.path.join(work, "sglang_fetch_worker.py")
    with open(script, "w", encoding="utf-8") as handle:
        handle.write(inspect.getsource(worker))
    request = {k: params[k] for k in ("repo", "revision", "local_dir", "allow_patterns",
                                      "offline")}
    request.update(state_file=os.path.join(work, "state.json"),
                   min_free_bytes=int(params["min_free_gb"] * GB))
    worker.write_json(os.path.join(work, "request.json"), request)
    for stale in ("state.json", "pid"):
        if os.path.exists(os.path.join(work, stale)):
            os.unlink(os.path.join(work, stale))
    # Run as root: nothing of the run's environment chooses the code it loads (PYTHONPATH).
    env = dict(sandboxes.inherited(os.environ), HF_HUB_DISABLE_PROGRESS_BARS="1")
    env.pop("HF_TOKEN", None)
    if params["token"]:
        env["HF_TOKEN"] = params["token"]
    if params["offline"]:
        env["HF_HUB_OFFLINE"] = "1"
    python = os.path.join(params["venv"], "bin", "python")
    with open(os.path.join(work, "log"), "ab") as log:
        try:
            proc = subprocess.Popen(  # pylint: disable=consider-using-with  # detached on purpose
                [python, script, os.path.join(work, "request.json")], cwd="/", env=env,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        except OSError as exc:
            raise FetchFailed(f"cannot start the fetch with {python}: {exc}; is sglang_venv "
                              "the ml-env SGLang is installed in?") from None
    with open(os.path.join(work, "pid"), "w", encoding="utf-8") as handle:
        handle.write(str(proc.pid))
    return proc


def log_tail(work, secrets):
    try:
        with open(os.path.join(work, "log"), encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()[-20:]
    except OSError:
        return []
    return [excerpt(line, secrets) for line in lines]


def on_disk(local_dir, files):
    """Bytes fetched so far: complete files, plus huggingface_hub's .incomplete parts."""
    done = worker.present_bytes(local_dir, files or {})
    parts = os.path.join(local_dir, ".cache", "huggingface", "download")
    for root, _unused, names in os.walk(parts):
        for name in names:
            if name.endswith(".incomplete"):
                try:
                    done += os.path.getsize(os.path.join(root, name))
                except OSError:
                    pass
    return done


def status_line(params, state, done, rate):
    total = state.get("total_bytes") or 0
    what = f"{params['repo']}@{params['revision'][:12]}"
    if state.get("phase") != "downloading" or not total:
        return f"fetching {what}: {state.get('phase', 'starting')}"
    speed = f", {rate / 1e6:.0f} MB/s" if rate else ""
    return f"fetching {what}: {size(done)} of {size(total)} ({100 * done / total:.0f}%){speed}"


def _announce(params, state):
    return (f"fetching {params['repo']}@{(state['sha'] or params['revision'])[:12]}: "
            f"{_count(state['files'])} files, {size(state['total_bytes'])}, "
            f"{size(state.get('need_bytes'))} to download")


def _fetched_line(files, total_bytes, elapsed):
    return f"fetched {_count(files)} files, {size(total_bytes)} in {elapsed:.0f} s"


def _fetched(params, state, progress, elapsed):
    """The result of a fetch the worker reports done, once config.json names architectures."""
    config = os.path.join(params["local_dir"], "config.json")
    archs = read_json(config).get("architectures")
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        raise FetchFailed(
            f"{config} has architectures {archs!r}: not a checkpoint SGLang can serve "
            "(check sglang_model_fetch.repo and allow_patterns)")
    progress.append(_fetched_line(state["files"], state.get("total_bytes"), elapsed))
    return {"fetched": True, "sha": state["sha"] or params["revision"],
            "architectures": archs, "files": _count(state["files"]),
            "total_bytes": state["total_bytes"], "progress": progress}


def _running(proc, pid):
    return proc.poll() is None if proc else alive(pid)


def _ended_with_result(proc, pid, work, secrets):
    """False while the worker runs; True when it ended after writing its result (read it
    again); FetchFailed when it ended without one."""
    if _running(proc, pid):
        return False
    if read_state(work)["phase"] in ("done", "failed"):
        return True
    raise FetchFailed("the fetch worker exited without a result", log_tail(work, secrets))


def _slice_end(params, state, t, last, resume):
    """The answer of a slice that ends while the fetch goes on: progress, rate, resume."""
    done = on_disk(params["local_dir"],
                   state["files"] if isinstance(state["files"], dict) else {})
    last_t, last_bytes = last
    rate = (done - last_bytes) / (t - last_t) if t > last_t and done >= last_bytes else 0
    return {"progress": resume.pop("progress"), "status": status_line(params, state, done, rate),
            "resume": dict(resume, t=t, bytes=done, changed=True)}


def _resumed(resume, now):
    """(started, t, bytes) of the resume state, which made the round trip through the
    controller: numbers are checked, anything else reads as now / 0."""
    return (number(resume.get("started", now), 0, now, integer=False) or now,
            number(resume.get("t", now), 0, now, integer=False) or now,
            number(resume.get("bytes", 0), 0, MAX_BYTES) or 0)


def watch(params, work, resume, proc=None, clock=time.time, sleep=time.sleep):
    """(result, pending) of watching the worker for one slice."""
    secrets = [params["token"]] if params["token"] else []
    now = clock()
    started, last_t, last_bytes = _resumed(resume, now)
    until = now + params["slice"] if params["slice"] else None
    phase_seen = resume.get("phase")
    progress = []
    while True:
        state = read_state(work)
        phase = state["phase"]
        if phase != phase_seen and phase == "downloading":
            progress.append(_announce(params, state))
        phase_seen = phase
        if phase == "done":
            return _fetched(params, state, progress, clock() - started), False
        if phase == "failed":
            raise FetchFailed(f"the fetch of {params['repo']}@{params['revision']} failed: "
                              + excerpt(state["error"], secrets, limit=600),
                              log_tail(work, secrets))
        pid = proc.pid if proc else _pid(work)
        if _ended_with_result(proc, pid, work, secrets):
            continue  # it wrote its result as it ended
        t = clock()
        if t - started >= params["timeout"]:
            raise FetchFailed(
                f"still fetching after {params['timeout']} s; it goes on in the background "
                f"(pid {pid}): re-run to wait for it, or raise sglang_model_fetch.timeout")
        if until is not None and t >= until:
            return _slice_end(params, state, t, (last_t, last_bytes), {
                "started": started, "phase": phase, "progress": progress}), True
        sleep(min(1.0, params["slice"] or 1.0))


def _ended_between_slices(marker, resume):
    """The closing line of this run's fetch when the worker finished after the last slice
    watched it (a loaded host shows it): found by its marker, said as watch() says it."""
    if not resume.get("changed"):
        return []
    now = time.time()
    return [_fetched_line(marker.get("files"), marker.get("total_bytes"),
                          now - _resumed(resume, now)[0])]


def _pid(work):
    try:
        with open(os.path.join(work, "pid"), encoding="utf-8") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def main():
    module = AnsibleModule(
        argument_spec={
            "repo": {"type": "str", "required": True},
            "revision": {"type": "str", "required": True},
            "local_dir": {"type": "path", "required": True},
            "venv": {"type": "path", "required": True},
            "state_dir": {"type": "path", "required": True},
            "token": {"type": "str", "default": "", "no_log": True},
            "offline": {"type": "bool", "default": False},
            "allow_patterns": {"type": "list", "elements": "str", "default": []},
            "min_free_gb": {"type": "float", "default": 10},
            "timeout": {"type": "int", "default": 14400},
            "slice": {"type": "float", "default": 0},
            "resume": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    params = module.params
    problem = check_params(params)
    if problem:
        module.fail_json(msg=problem)
    resume = params["resume"] or {}
    marker = finished(params)
    if marker:
        module.exit_json(changed=bool(resume.get("changed")), fetched=True, pending=False,
                         sha=marker.get("sha"), files=marker.get("files"),
                         total_bytes=marker.get("total_bytes"),
                         progress=_ended_between_slices(marker, resume))
    if module.check_mode:
        module.exit_json(changed=True, fetched=False, pending=False, progress=[
            f"would fetch {params['repo']}@{params['revision']} into {params['local_dir']}"])
    work = work_dir(params)
    proc = None
    try:
        if not resume and not alive(_pid(work)):
            proc = start(params, work)
        result, pending = watch(params, work, resume, proc)
    except FetchFailed as exc:
        module.fail_json(msg=str(exc), log=exc.log, pending=False, progress=[])
    except OSError as exc:
        module.fail_json(msg=f"cannot fetch into {params['local_dir']}: {exc}", pending=False,
                         progress=[])
    if pending:
        module.exit_json(changed=True, pending=True, **result)
    module.exit_json(changed=True, pending=False, **result)


if __name__ == "__main__":
    main()
