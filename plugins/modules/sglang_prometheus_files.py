#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Write one host's files of the observability pack where Prometheus and Grafana read them."""

DOCUMENTATION = r"""
module: sglang_prometheus_files
short_description: Write a host's Prometheus target, alert rules and Grafana dashboard in one call
description:
  - Writes each of the three files under O(dir) whose content differs, whole or not at all (a temp
    file in the same directory, renamed over the old one), mode 0644, and makes the directories
    they sit in (0755). A directory or file that is a symlink is refused, never followed.
  - A rules file (under C(rules/)) is checked with C(promtool check rules) before it replaces
    the old one when O(promtool) names one (C(auto) finds it on C(PATH); with none found nothing
    is checked, and the result says so). Rules Prometheus would refuse never reach its directory.
  - One call where a copy task per file, a directory task and a lookup of promtool took a
    round trip each, so a deploy re-run that changes nothing comes back sooner.
  - Check mode writes nothing and says what would change; with C(--diff) it shows each change.
options:
  dir:
    description: The pack's directory (its C(targets/), C(rules/) and C(dashboards/) are what
      Prometheus's file-based discovery, its C(rule_files) and Grafana's provisioning read).
    type: path
    required: true
  host:
    description: The host the pack describes; its files are C(targets/<host>.json) and
      C(rules/<host>.rules.yml).
    type: str
    required: true
  target:
    description: The content of C(targets/<host>.json) (file-based discovery).
    type: str
    required: true
  rules:
    description: The content of C(rules/<host>.rules.yml) (recording and alerting rules).
    type: str
    required: true
  dashboard:
    description: The content of C(dashboards/sglang.json) (one board for every host).
    type: str
    required: true
  promtool:
    description: The promtool that checks the rules; C(auto) for the one on C(PATH), empty for
      none.
    type: str
    default: ""
  reload:
    description: The systemd unit of Prometheus, reloaded (C(systemctl reload)) when a rules file
      changed so that it reads the new thresholds; empty for none.
    type: str
    default: ""
notes:
  - Not a builtin because ansible.builtin.copy writes one file a task. The pack's three files, their
    directories and the promtool lookup are one step here, one round trip instead of six on every
    deploy, re-runs included.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Write this host's pack
  sglang.deploy.sglang_prometheus_files:
    dir: /etc/prometheus/sglang
    promtool: auto
    host: gpu1
    target: "{{ pack.targets | to_nice_json }}\n"
    rules: "{{ pack.rules | to_nice_yaml }}"
    dashboard: "{{ dashboard | to_nice_json }}\n"
    reload: prometheus.service
  register: pack_files
"""

RETURN = r"""
written:
  description: The files (relative to O(dir)) written, or that check mode would write.
  type: list
  elements: str
  returned: always
rules_changed:
  description: Whether a rules file changed (Prometheus must reload to read it).
  type: bool
  returned: always
reloaded:
  description: The unit of O(reload) when it was reloaded, else null.
  type: str
  returned: always
promtool:
  description: The promtool that checked the rules, or null when none did.
  type: str
  returned: always
"""

import os
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_files
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_monitoring_files import (
    MonitoringFileError, no_link, pack_changes, pack_names, sha256)


# promtool checks a few hundred rules in well under a second, systemctl answers sooner; a wedged
# one must not hold the deploy.
PROMTOOL_S = 60


def run_argv(argv, timeout):
    """(rc, stdout, stderr) of `argv`, run from / and bounded by `timeout` seconds; 127 with
    the reason when it cannot start (no such program, a NUL byte in an argument)."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              check=False, cwd="/", timeout=timeout)
    except (OSError, ValueError) as exc:
        return 127, "", f"cannot run {argv[0]!r}: {exc}"
    return proc.returncode, proc.stdout, proc.stderr


def pack_files(host, target, rules, dashboard):
    """{relative name: content} of a host's pack; the host must be one plain file name."""
    return dict(zip(pack_names(host), (str(target), str(rules), str(dashboard))))


def _promtool(wanted):
    if wanted == "auto":
        return shutil.which("promtool")
    return wanted or None


def plan(directory, files):
    """[(kind, name, path, old, new)] for each file whose content or mode differs (the read of a
    re-run decides by the same function: sglang_monitoring_files.pack_changes)."""
    todo = pack_changes(directory, {name: sha256(text) for name, text in files.items()})
    return [(name.split("/")[0], name, path, old, files[name]) for name, path, old in todo]


def write(directory, todo, promtool, run_command):
    """Write `todo`: directories first, a rules file only once promtool accepts it."""
    for kind in sorted({kind for kind, *_rest in todo}):
        os.makedirs(os.path.join(directory, kind), mode=0o755, exist_ok=True)
        no_link(os.path.join(directory, kind), "pack directory")
    for kind, name, path, _old, new in todo:
        def move(tmp, dest, kind=kind, name=name):
            if kind == "rules" and promtool:
                rc, out, err = run_command([promtool, "check", "rules", tmp], timeout=PROMTOOL_S)
                if rc != 0:
                    raise MonitoringFileError(f"promtool refused {name} ({promtool} check rules): "
                                              f"{(err or out).strip()[-2000:]}")
            os.replace(tmp, dest)
        sglang_files.write_atomic(path, new, mode=0o644, move=move)


def run(params, check_mode, run_command):
    todo = plan(params["dir"], pack_files(params["host"], params["target"], params["rules"],
                                          params["dashboard"]))
    promtool = _promtool(params["promtool"])
    if todo and not check_mode:
        write(params["dir"], todo, promtool, run_command)
    names = [name for _kind, name, *_rest in todo]
    rules_changed = any(kind == "rules" for kind, *_rest in todo)
    reloaded = None
    if rules_changed and params.get("reload") and not check_mode:
        rc, out, err = run_command(["systemctl", "reload", "--", params["reload"]],
                                   timeout=PROMTOOL_S)
        if rc != 0:
            raise MonitoringFileError(f"the rules are written, but systemctl reload "
                                      f"{params['reload']} failed: {(err or out).strip()[-500:]}")
        reloaded = params["reload"]
    return {"changed": bool(todo), "written": names, "rules_changed": rules_changed,
            "reloaded": reloaded,
            "promtool": promtool,
            "diff": [{"before_header": os.path.join(params["dir"], name), "before": old or "",
                      "after_header": os.path.join(params["dir"], name), "after": new}
                     for _kind, name, _path, old, new in todo]}


def main():
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "required": True},
            "host": {"type": "str", "required": True},
            "target": {"type": "str", "required": True},
            "rules": {"type": "str", "required": True},
            "dashboard": {"type": "str", "required": True},
            "promtool": {"type": "str", "default": ""},
            "reload": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    try:
        result = run(module.params, module.check_mode, run_argv)
    except (MonitoringFileError, OSError, subprocess.SubprocessError) as exc:
        module.fail_json(msg=str(exc))
    if not module._diff:
        result.pop("diff")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
