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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_service_read import SPEC, read


def main():
    module = AnsibleModule(argument_spec=SPEC, required_by={"release": "base_dir"},
                           supports_check_mode=True)
    try:
        result = read(module.params)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"cannot read what the deploy would write: {exc}")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
