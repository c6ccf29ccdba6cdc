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
    clean bill. The directory of O(out) is made when it is missing (0755), never through a
    symlink.
  - With O(units), installs the systemd units that run it (each written whole when it differs,
    C(@PYTHON@) in them replaced by the Python that runs this module, the one the check is
    written for), reloads systemd when one changed, and enables and starts O(timer).
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
  units:
    description: The systemd units that run the check (file names in O(units_dir)).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The unit's file name.
        type: str
        required: true
      content:
        description: The unit file.
        type: str
        required: true
  units_dir:
    description: Where O(units) are written.
    type: path
    default: /etc/systemd/system
  timer:
    description: The timer unit of O(units) to enable and start.
    type: str
    default: ""
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
    units:
      - name: sglang-drift.service
        content: "{{ lookup('ansible.builtin.template', 'sglang-drift.service.j2') }}"
      - name: sglang-drift.timer
        content: "{{ lookup('ansible.builtin.template', 'sglang-drift.timer.j2') }}"
    timer: sglang-drift.timer
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
units:
  description: The units of O(units) written (or that check mode would write).
  type: list
  elements: str
  returned: always
summary:
  description: One line for the play's output.
  type: str
  returned: always
"""

import inspect
import os
import re
import subprocess
import sys
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_drift, sglang_files
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_monitoring_files import (
    SOURCES, MonitoringFileError, program_changes, textfile_dir_missing, timer_running,
    timer_state, unit_changes)

# The temp names write_atomic gives these files (a run cut before its rename leaves one).
PROGRAM_TEMP = re.compile(r"\.(%s)\.py\..+" % "|".join(SOURCES))
OUT_TEMP = re.compile(re.escape(sglang_drift.OUT_PREFIX) + ".+")
# systemctl answers in well under a second; a wedged systemd must not hold the deploy.
SYSTEMCTL_S = 60
# A temp name of the textfile that a timer run may be writing now is left to it.
OUT_TEMP_AGE_S = 300


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
    """Write the check's files into `directory` (those that differ: the read of a re-run decides
    by the same function); their names."""
    if not check_mode:
        sweep(directory, PROGRAM_TEMP)
    changed = program_changes(directory)
    if changed and not check_mode:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        for name in changed:
            sglang_files.write_atomic(os.path.join(directory, f"{name}.py"),
                                      inspect.getsource(SOURCES[name]), mode=0o644)
    return changed


def textfile_dir(out, check_mode):
    """Make the directory node_exporter reads (0755) when it is missing; a symlink there is
    refused, never followed to chmod what it points at. Whether it was made."""
    if not textfile_dir_missing(out):
        return False
    if not check_mode:
        os.makedirs(os.path.dirname(out), mode=0o755)
        os.chmod(os.path.dirname(out), 0o755)
    return True


def install_units(params, check_mode, systemctl, show=timer_state):
    """Write the units that differ (@PYTHON@: this interpreter), reload systemd when one did,
    enable and start the timer unless it is enabled and active (the read of a re-run decides
    by the same functions). The names written, and whether the timer was started."""
    timer = params.get("timer") or ""
    written = []
    for name, path, text in unit_changes(params.get("units"), params.get("units_dir")):
        written.append(name)
        if not check_mode:
            sglang_files.write_atomic(path, text, mode=0o644)
    if check_mode or not timer:
        return written, False
    if written:
        systemctl("daemon-reload")
    started = not timer_running(show(timer))
    if started and systemctl("enable", "--now", timer) != 0:
        raise MonitoringFileError(f"systemctl enable --now {timer} failed")
    return written, started


def run(params, check_mode, systemctl=None, show=timer_state):
    made_dir = textfile_dir(params["out"], check_mode)
    changed = install(params["dir"], check_mode)
    result = sglang_drift.check(params["base_dir"], params["url"], params["secrets"],
                                params["timeout"])
    if not check_mode:
        sweep(os.path.dirname(params["out"]), OUT_TEMP, OUT_TEMP_AGE_S)
        sglang_drift.publish(params["out"], result, params["host"])
    units, started = install_units(params, check_mode, systemctl, show)
    state = {True: "no drift", False: "DRIFT", None: "unknown"}[result["ok"]]
    wrote = changed + units
    return {"changed": bool(wrote or made_dir or started),
            "program": os.path.join(params["dir"], "sglang_drift.py"),
            "python": sys.executable, "check": result, "units": units,
            "summary": (f"drift check of release {result['release']}: {state}: {result['reason']}"
                        + (f"; {'would write' if check_mode else 'wrote'} {', '.join(wrote)}"
                           if wrote else "")
                        + (f"; started {params.get('timer')}" if started else ""))}


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
            "units": {"type": "list", "elements": "dict", "default": [],
                      "options": {"name": {"type": "str", "required": True},
                                  "content": {"type": "str", "required": True}}},
            "units_dir": {"type": "path", "default": "/etc/systemd/system"},
            "timer": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )

    def systemctl(*args):
        return subprocess.run([module.get_bin_path("systemctl", required=True), *args],
                              capture_output=True, check=False, cwd="/",
                              timeout=SYSTEMCTL_S).returncode

    try:
        result = run(module.params, module.check_mode, systemctl)
    except (MonitoringFileError, OSError, subprocess.SubprocessError) as exc:
        module.fail_json(msg=f"drift check: {exc}")
    if result["check"]["ok"] is not True:
        module.warn(result["summary"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
