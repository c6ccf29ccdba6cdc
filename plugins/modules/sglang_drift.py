#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Install the drift check on the host and run it once: live resolution against the release's."""

DOCUMENTATION = r"""
module: sglang_drift
short_description: Install the drift check (live /server_info against the release's record) and run it once
description:
  - Writes the drift check (C(module_utils/sglang_drift.py) and the two files it imports) into
    O(dir) on the host, where the role's C(<service>-drift) timer runs it with the host's
    Python. Each run reads what the serving release recorded when it was proven
    (C(current/manifest.json), the effective view of its C(/server_info)) and what the live
    server resolves now, and publishes one C(sglang_drift) series per setting (CUDA graph
    backends, speculative settings, attention backend, tp size, version) for node_exporter's
    textfile collector, replacing O(out) whole.
  - Then runs the check once, so the deploy shows it works. Fail closed; a record or a server
    it cannot read is C(unknown) with the reason (C(sglang_drift_check_success 0)), never a
    clean bill.
  - Check mode writes nothing and runs the check without publishing it.
options:
  base_dir:
    description: The deployment's base directory (its C(current) link names the serving release).
    type: path
    required: true
  url:
    description: SGLang's base URL.
    type: str
    required: true
  secrets:
    description: The 0600 key file the service reads (an api key is sent when it holds one).
    type: path
    default: ""
  host:
    description: The C(sglang_host) label of every series (the inventory name the rules select).
    type: str
    required: true
  out:
    description: The C(.prom) file node_exporter's textfile collector reads.
    type: path
    required: true
  dir:
    description: Where the check's files are written (root-owned, 0644).
    type: path
    required: true
  timeout:
    description: Seconds to wait for C(/server_info).
    type: float
    default: 10
notes:
  - Not a builtin because the check compares SGLang's resolution through the collection's own
    normalisation of C(/server_info) across 0.5.x versions, the one verification uses.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Install the drift check and run it once
  sglang.deploy.sglang_drift:
    base_dir: /opt/sglang
    url: http://127.0.0.1:30000
    host: gpu1
    secrets: /opt/sglang/secrets.json
    out: /var/lib/prometheus/node-exporter/sglang.prom
    dir: /opt/sglang/monitoring
  register: drift
"""

RETURN = r"""
program:
  description: The check's file under O(dir), to run as C(python program --base-dir ...).
  type: str
  returned: always
python:
  description: The host's Python that ran this module (the timer runs the check with it).
  type: str
  returned: always
check:
  description: The check's result; C(ok) true (no drift), false (drift) or null (unknown).
  type: dict
  returned: always
summary:
  description: One line for the play's output.
  type: str
  returned: always
"""

import inspect
import os
import re
import sys
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils import (
    sglang_drift, sglang_effective, sglang_files)

SOURCES = {"sglang_drift": sglang_drift, "sglang_effective": sglang_effective,
           "sglang_files": sglang_files}
# The temp names write_atomic gives these files (a run cut before its rename leaves one).
PROGRAM_TEMP = re.compile(r"\.(%s)\.py\..+" % "|".join(SOURCES))
OUT_TEMP = re.compile(re.escape(sglang_drift.OUT_PREFIX) + ".+")
# A temp name of the textfile that a timer run may be writing now is left to it.
OUT_TEMP_AGE_S = 300


def _current(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def sweep(directory, pattern, older_than=0.0):
    """Remove what a cut run left: temp names matching `pattern` (older than `older_than` s)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        try:
            if pattern.fullmatch(name) and time.time() - os.lstat(path).st_mtime >= older_than:
                os.unlink(path)
        except OSError:
            pass


def install(directory, check_mode):
    """Write the check's files into `directory`; the names of those that changed."""
    if not check_mode:
        sweep(directory, PROGRAM_TEMP)
    changed = []
    for name in sglang_drift.LIBRARY:
        path = os.path.join(directory, f"{name}.py")
        source = inspect.getsource(SOURCES[name])
        if _current(path) == source:
            continue
        changed.append(name)
        if not check_mode:
            os.makedirs(directory, mode=0o755, exist_ok=True)
            sglang_files.write_atomic(path, source, mode=0o644)
    return changed


def run(params, check_mode):
    changed = install(params["dir"], check_mode)
    result = sglang_drift.check(params["base_dir"], params["url"], params["secrets"],
                                params["timeout"])
    if not check_mode:
        sweep(os.path.dirname(params["out"]), OUT_TEMP, OUT_TEMP_AGE_S)
        sglang_drift.publish(params["out"], result, params["host"])
    state = {True: "no drift", False: "DRIFT", None: "unknown"}[result["ok"]]
    return {"changed": bool(changed), "program": os.path.join(params["dir"], "sglang_drift.py"),
            "python": sys.executable, "check": result,
            "summary": (f"drift check of release {result['release']}: {state}: {result['reason']}"
                        + (f"; {'would write' if check_mode else 'wrote'} "
                           f"{', '.join(changed)} in {params['dir']}" if changed else ""))}


def main():
    module = AnsibleModule(
        argument_spec={
            "base_dir": {"type": "path", "required": True},
            "url": {"type": "str", "required": True},
            "host": {"type": "str", "required": True},
            "secrets": {"type": "path", "default": ""},
            "out": {"type": "path", "required": True},
            "dir": {"type": "path", "required": True},
            "timeout": {"type": "float", "default": 10},
        },
        supports_check_mode=True,
    )
    try:
        result = run(module.params, module.check_mode)
    except OSError as exc:
        module.fail_json(msg=f"drift check: {exc}")
    if result["check"]["ok"] is not True:
        module.warn(result["summary"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
