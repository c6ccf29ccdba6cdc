#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""SGLang's own argument resolution for a release, run in the ml-env, before any restart."""

DOCUMENTATION = r"""
module: sglang_resolve
short_description: Run the installed SGLang's parser and resolution on a release's config, traced
description:
  - Runs, in the ml-env's own Python, SGLang's C(prepare_server_args) on C(--config <file>) and
    then its resolution (C(ServerArgs.resolve_once) from 0.5.19, the record's C(__post_init__)
    before), and returns every resolved field, every field SGLang changed from what was asked
    with the file, line and function that changed it, SGLang's log records, and any exception
    it raised (type, message, file, line).
  - Never touches a GPU, also beside a serving server. C(CUDA_VISIBLE_DEVICES) is emptied and
    torch's device queries and C(nvidia-smi --query-gpu) are answered from C(gpus) (by default
    the GPUs C(nvidia-smi) lists on the host). Where the NVIDIA driver is absent, packages whose
    import needs it (sgl_kernel) are replaced by inert modules; C(stubbed) names them.
  - With C(sandbox) and systemd running, it runs through C(systemd-run --wait --pipe) as the
    service user with the unit's properties and the release's environment file, so a sandbox
    SGLang cannot live with fails here, before the restart. Without systemd it runs
    unsandboxed and C(sandbox.used) says so.
  - When SGLang cannot be imported at all (an ml-env holding only the sglang wheel),
    C(ran) is false and C(reason) says why; the caller falls back to reading the sources.
  - Read-only; runs in check mode.
extends_documentation_fragment:
  - sglang.deploy.sglang.venv
  - sglang.deploy.sglang.nvidia_smi
options:
  config_path:
    description: The release's config.yaml (used when it exists).
    type: path
  args:
    description: The arguments (dashed names), used when C(config_path) does not exist yet.
    type: dict
    default: {}
  gpus:
    description:
      - "GPUs to answer device queries with: C({count, name, memory_mib, compute_capability})."
      - Empty means the GPUs C(nvidia-smi) lists on this host.
    type: dict
    default: {}
  sandbox:
    description:
      - "C({user, group, env_file, properties}): run as the unit will (C(properties) are the
        unit's C(Key=Value) sandbox lines). Empty runs as the connection user."
    type: dict
    default: {}
  env:
    description:
      - Environment of the release (used when not sandboxed; the sandbox reads C(env_file)).
      - Before the env file exists (check mode, the what-if playbook) the sandbox reads these
        values from a 0600 file removed after the run, never from C(systemd-run)'s command line.
    type: dict
    default: {}
  timeout:
    description: Seconds the resolution may take (it imports torch and transformers).
    type: int
    default: 600
notes:
  - Not a builtin because there is no equivalent; it runs SGLang's own argument resolution,
    traced, in the ml-env's Python (optionally in the unit's sandbox through systemd-run),
    without a GPU.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Resolve the release with SGLang, as the service user inside the unit's sandbox
  sglang.deploy.sglang_resolve:
    venv: /opt/ml-env
    config_path: /opt/sglang/releases/20261130T101500Z-4f0c2a1e/config.yaml
    sandbox:
      user: sglang
      group: sglang
      env_file: /opt/sglang/releases/20261130T101500Z-4f0c2a1e/sglang.env
      properties: [ProtectSystem=strict, ProtectHome=yes, PrivateTmp=yes]
  register: resolution

- name: What-if on a machine without the GPUs
  sglang.deploy.sglang_resolve:
    venv: /root/.cache/sglang-deploy/full-0.5.23
    args: {model-path: /srv/models/Qwen3.6-27B, tp-size: 2}
    gpus: {count: 2, name: NVIDIA RTX A6000, memory_mib: 49140, compute_capability: "8.6"}
"""

RETURN = r"""
ran:
  description: Whether SGLang was imported and asked (false when it could not be imported).
  type: bool
  returned: always
reason:
  description: Why it did not run.
  type: str
  returned: when not ran
sglang_version:
  description: The installed sglang's version.
  type: str
  returned: always
entry:
  description: C(ServerArgs.resolve_once) or C(ServerArgs.__post_init__).
  type: str
  returned: when ran
resolved:
  description: Every resolved field (SGLang's names).
  type: dict
  returned: when ran without error
changes:
  description: "[{field, asked, resolved, file, line, function, source}] for each field SGLang changed."
  type: list
  returned: always
error:
  description: "{type, message, file, line, function, stage} of what SGLang raised, or null."
  type: dict
  returned: always
  contains:
    type:
      description: Exception type.
      type: str
      returned: always
    message:
      description: Its message.
      type: str
      returned: always
    file:
      description: SGLang file that raised.
      type: str
      returned: always
    line:
      description: Line.
      type: int
      returned: always
    function:
      description: Function.
      type: str
      returned: always
    stage:
      description: C(import), C(parse) or C(resolve).
      type: str
      returned: always
import_error:
  description: The same, when importing sglang failed (C(ran) is false then).
  type: dict
  returned: when sglang could not be imported
  contains:
    type:
      description: Exception type.
      type: str
      returned: always
    message:
      description: Its message.
      type: str
      returned: always
    file:
      description: File that raised.
      type: str
      returned: always
    line:
      description: Line.
      type: int
      returned: always
    function:
      description: Function.
      type: str
      returned: always
    stage:
      description: C(import).
      type: str
      returned: always
unknown_flags:
  description: "[{name, suggestions}] for config keys the installed parser does not know."
  type: list
  returned: always
packages:
  description: "{name: version} of every distribution in the venv (what an upgrade plan compares)."
  type: dict
  returned: when the probe ran
volatile:
  description: Fields SGLang set from a random draw while it resolved (a random seed), found by
    tracing the draws of one resolution; no difference between two versions.
  type: list
  returned: when SGLang resolved
weights:
  description:
    - The weight files SGLang's own loader selects for the checkpoint and load format
      (C(DefaultModelLoader._prepare_weights)) and their tensors' bytes from the safetensors
      headers - {files, safetensors, load_format, selected_by, sharded_bytes,
      replicated_bytes, tensors, sized_by_file, unread}; matrices (sharded_bytes) are split
      over the tensor-parallel ranks, vectors (replicated_bytes) are whole on each.
    - "{error} when it cannot say: not a local directory, a format another loader reads, or
      the loader raised."
  type: dict
  returned: when SGLang resolved
log:
  description: "[{level, message, file, line, function}] of SGLang's log records while resolving."
  type: list
  returned: always
stubbed:
  description: "{package: import error} of packages replaced by inert modules (no driver)."
  type: dict
  returned: always
sandbox:
  description: "{used, how, unit}: whether it ran as the unit will, and in which transient unit."
  type: dict
  returned: always
phases_s:
  description: >-
    Seconds per step inside the ml-env's Python: C(packages) (the installed versions),
    C(import) (torch and C(sglang.srt.server_args)), C(parse), C(resolve), C(weights) (the
    loader's file selection and the safetensors headers).
  type: dict
  returned: when the probe ran
elapsed_s:
  description: Seconds the whole run took.
  type: float
  returned: always
"""

import contextlib
import inspect
import json
import os
import shutil
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils import (
    sglang_probe, sglang_probe_gpus, sglang_probe_messages, sglang_probe_trace, sglang_probe_weights)
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_sandbox as sandboxes
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_gpus import check_gpus, memory_mib, smi_rows
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_systemd import ENV_NAME

GPU_QUERY = "index,name,memory.total,compute_cap"
# The probe's parts, by name (sglang_probe.PARTS): their sources go to the ml-env's Python.
PROBE_PARTS = {module.__name__.rsplit(".", 1)[-1]: module for module in (
    sglang_probe, sglang_probe_gpus, sglang_probe_messages, sglang_probe_trace, sglang_probe_weights)}


def host_gpus(nvidia_smi="nvidia-smi", timeout=30):
    """The host's GPUs as a description ({} when nvidia-smi is absent or lists none); a
    description nvidia-smi's answer makes no sense of (`inf` MiB) is returned as it is read,
    for check_gpus to name."""
    path = shutil.which(nvidia_smi)
    if not path:
        return {}
    try:
        proc = subprocess.run([path, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"],
                              capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    rows = smi_rows(proc.stdout, 4)
    if proc.returncode != 0 or not rows:
        return {}
    first = rows[0]
    memory = [memory_mib(r[2]) for r in rows]
    return {"count": len(rows), "name": first[1],
            "memory_mib": min(memory) if None not in memory else first[2][:40],
            "compute_capability": first[3][:40]}


def env_problem(env):
    """Why `env` cannot be a process environment nor a systemd EnvironmentFile (or None)."""
    for name, value in env.items():
        if not ENV_NAME.fullmatch(str(name)):
            return f"env: {str(name)[:40]!r} is not an environment variable name"
        if any(c in str(value) for c in "\0\n\r"):
            return f"env.{name}: a value may not hold a NUL or a line break"
    return None


def _probe_input(params, gpus):
    """The probe's stdin: its request on the first line, then its parts' sources in the order
    BOOTSTRAP makes them modules ([[name, source], ...])."""
    request = {"gpus": gpus}
    config = params.get("config_path")
    if config and os.path.exists(config):
        request["config_path"] = config
    else:
        # JSON is YAML: SGLang's --config reader takes it as it is.
        request["config_text"] = json.dumps(params.get("args") or {})
    parts = [[name, inspect.getsource(PROBE_PARTS[name])] for name in sglang_probe.PARTS]
    return json.dumps(request) + "\n" + json.dumps(parts)


def _probe_command(params, python, release_env, stack):
    """(argv, environment, sandbox report) of the probe: in the unit's sandbox when asked and
    possible (the environment from the release's env file, or before it exists from a private
    file `stack` removes after the run), else unsandboxed with the release's environment."""
    sandbox = params.get("sandbox") or {}
    env = sandboxes.inherited(os.environ)
    refusal = sandboxes.refusal(sandbox) if sandbox else "no sandbox asked for"
    if refusal is None:
        env_file = sandbox.get("env_file")
        if not (env_file and os.path.exists(env_file)):
            env_file = stack.enter_context(sandboxes.private_env_file(release_env))
        unit = sandboxes.unit_name("sglang-resolve")
        argv = sandboxes.argv(sandbox, env_file, unit, params.get("timeout") or 600) + [python]
        how = {"used": True, "unit": unit, "how": "systemd-run as "
               f"{sandbox.get('user') or 'root'} with the unit's properties"}
    else:
        argv = [python]
        env.update(release_env)
        how = {"used": False, "how": f"unsandboxed: {refusal}"}
    return argv + ["-c", sglang_probe.BOOTSTRAP], env, how


def _take_report(out, report):
    """Copy the probe's report into the result; an import error means SGLang never ran."""
    out.update({k: report.get(k, out.get(k)) for k in (
        "sglang_version", "entry", "resolved", "changes", "error", "unknown_flags", "log",
        "stubbed", "driver", "known_flags", "torch", "uid", "packages", "volatile", "weights",
        "phases_s")})
    error = report.get("error") or {}
    if error.get("stage") == "import":
        # SGLang could not even be imported: nothing SGLang said about the arguments.
        out["reason"] = f"sglang could not be imported: {error.get('type')}: {error.get('message')}"
        out["import_error"], out["error"] = error, None
    else:
        out["ran"] = True


# The probe's report: the type of each field it may hold (None allowed everywhere).
REPORT_TYPES = {"sglang_version": str, "entry": str, "resolved": dict, "changes": list,
                "error": dict, "unknown_flags": list, "log": list, "stubbed": dict, "driver": bool,
                "known_flags": int, "torch": dict, "uid": int, "packages": dict, "volatile": list,
                "weights": dict, "asked": dict, "elapsed_s": (int, float), "phases_s": dict}
REPORT_DEPTH = 32


def _depth(value, limit):
    """Whether `value` nests deeper than `limit` (iteratively: no recursion to exhaust)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def report_problem(report):
    """Why the probe's report is not one (a field of the wrong type, nesting past any record
    SGLang resolves), or None."""
    wrong = [k for k, kind in REPORT_TYPES.items()
             if report.get(k) is not None and not isinstance(report[k], kind)]
    if wrong:
        return f"fields of the wrong type: {', '.join(wrong)}"
    if _depth(report, REPORT_DEPTH):
        return f"nested deeper than {REPORT_DEPTH} levels"
    return None


def resolve(params):
    started = time.monotonic()
    venv = params["venv"]
    python = os.path.join(venv, "bin", "python")
    out = {"ran": False, "reason": None, "sglang_version": None, "entry": None, "resolved": None,
           "changes": [], "error": None, "unknown_flags": [], "log": [], "stubbed": {},
           "sandbox": {"used": False, "how": None}, "gpus": None}
    if not os.access(python, os.X_OK):
        out["reason"] = f"no Python at {python}: the ml-env does not exist"
        return out
    gpus = params.get("gpus") or host_gpus(params.get("nvidia_smi") or "nvidia-smi")
    if not gpus:
        out["reason"] = ("no GPU to describe: nvidia-smi lists none here and no gpus "
                         "description was given (sglang_gpus)")
        return out
    problem = check_gpus(gpus, name="sglang_gpus" if params.get("gpus") else "nvidia-smi's GPUs")
    if problem:
        out["reason"] = f"{problem}: set sglang_gpus to describe the GPUs"
        return out
    out["gpus"] = gpus
    stdin = _probe_input(params, gpus)
    release_env = {str(k): str(v) for k, v in (params.get("env") or {}).items()}
    problem = env_problem(release_env)
    if problem:
        out["reason"] = problem
        return out
    with contextlib.ExitStack() as stack:
        argv, env, out["sandbox"] = _probe_command(params, python, release_env, stack)
        return _run_probe(argv, stdin, env, params, out, started)


def _run_probe(argv, stdin, env, params, out, started):
    """Run the probe and read its report into `out`."""
    with tempfile.TemporaryFile() as errors:
        try:
            # A sandboxed resolution that outlives its bound is stopped, its unit's cgroup whole.
            proc = sandboxes.run(argv, out["sandbox"].get("unit"), params.get("timeout") or 600,
                                 input=stdin, stdout=subprocess.PIPE, stderr=errors, text=True,
                                 errors="replace", env=env, cwd="/")
        except subprocess.TimeoutExpired:
            out["reason"] = f"SGLang's resolution did not finish within {params.get('timeout')} s"
            return out
        except OSError as exc:
            out["reason"] = f"could not start {argv[0]}: {exc}"
            return out
        errors.seek(0)
        tail = errors.read().decode("utf-8", "replace").strip().splitlines()[-15:]
    try:
        report = json.loads(proc.stdout)
        if not isinstance(report, dict):
            raise ValueError("not an object")
    except (ValueError, RecursionError):
        out["reason"] = (f"the resolution exited {proc.returncode} without a report: "
                         + (" | ".join(tail[-5:]) or "no output"))
        return out
    problem = report_problem(report)
    if problem:
        out["reason"] = f"the resolution's report cannot be read: {problem}"
        return out
    _take_report(out, report)
    out["stderr_tail"] = tail
    out["elapsed_s"] = round(time.monotonic() - started, 2)
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "config_path": {"type": "path"},
            "args": {"type": "dict", "default": {}},
            "gpus": {"type": "dict", "default": {}},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "sandbox": {"type": "dict", "default": {}},
            "env": {"type": "dict", "default": {}},
            "timeout": {"type": "int", "default": 600},
        },
        supports_check_mode=True,
    )
    problem = check_gpus(module.params["gpus"]) if module.params["gpus"] else None
    if problem:
        module.fail_json(msg=problem)
    module.exit_json(changed=False, **resolve(module.params))


if __name__ == "__main__":
    main()
