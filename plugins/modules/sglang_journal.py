#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""The evidence SGLang logs about CUDA graphs, all-reduce and MTP, from the unit's journal."""

DOCUMENTATION = r"""
module: sglang_journal
short_description: Quote SGLang's CUDA graph / all-reduce / MTP log lines since the unit started
description:
  - Reads the journal of the unit's current invocation (C(_SYSTEMD_INVOCATION_ID)), so lines
    of an earlier start are not mistaken for this one, and returns the lines that prove or
    disprove graph capture, auto-disables and the runtime decode state.
  - "Patterns are the log lines SGLang prints across 0.5.x (decode capture C(Capture cuda graph
    begin) up to 0.5.12, C(Capture target decode CUDA graph begin) from 0.5.16; prefill capture;
    C(Breakable CUDA graph is incompatible with ...); C(CustomAllreduce is disabled ...); the
    periodic C(Decode batch ... cuda graph: True|False) line)."
options:
  unit:
    description: systemd unit.
    type: str
    required: true
  max_lines:
    description: Lines quoted per pattern.
    type: int
    default: 3
notes:
  - Not a builtin because of fewer round trips; the journal of the current invocation needs
    its id first (C(systemctl show), then C(journalctl _SYSTEMD_INVOCATION_ID=)), two
    dependent M(ansible.builtin.command) tasks in one call, both bounded in time and with
    the unit name checked (module_utils/sglang_systemd).
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Quote what SGLang logged about CUDA graphs, all-reduce and MTP
  sglang.deploy.sglang_journal:
    unit: sglang.service
    max_lines: 3
  register: journal
"""

RETURN = r"""
invocation:
  description: The unit's current invocation id.
  type: str
  returned: always
evidence:
  description: '{name: {count, lines}} per pattern that matched.'
  type: dict
  returned: always
  contains:
    decode_graph_captured:
      description: 'C(decode_graph_captured) when it matched: {count, lines} (the first C(max_lines)).'
      type: dict
      returned: always
    prefill_graph_captured:
      description: 'C(prefill_graph_captured) when it matched: {count, lines} (the first C(max_lines)).'
      type: dict
      returned: always
    prefill_graph_auto_disabled:
      description: 'C(prefill_graph_auto_disabled) when it matched: {count, lines} (the first C(max_lines)).'
      type: dict
      returned: always
    custom_allreduce_disabled:
      description: 'C(custom_allreduce_disabled) when it matched: {count, lines} (the first C(max_lines)).'
      type: dict
      returned: always
    peer_access_unsupported:
      description: 'C(peer_access_unsupported) when it matched: {count, lines} (the first C(max_lines)).'
      type: dict
      returned: always
    decode_with_graph:
      description: 'C(decode_with_graph) when it matched: {count, lines} (the first C(max_lines)).'
      type: dict
      returned: always
    decode_without_graph:
      description: 'C(decode_without_graph) when it matched: {count, lines} (the first C(max_lines)).'
      type: dict
      returned: always
    accept_length:
      description: 'C(accept_length) when it matched: {count, lines} (the first C(max_lines)).'
      type: dict
      returned: always
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_systemd import invocation_journal

PATTERNS = {
    "decode_graph_captured": r"Capture (cuda graph|target decode CUDA graph|target verify CUDA graph) begin",
    "prefill_graph_captured": r"Capture (piecewise CUDA graph|target prefill CUDA graph) begin",
    "prefill_graph_auto_disabled": r"Breakable CUDA graph is incompatible with .*disabling prefill CUDA graph",
    "custom_allreduce_disabled": r"CustomAllreduce is disabled",
    "peer_access_unsupported": r"peer access is not supported",
    "decode_with_graph": r"Decode batch.*cuda graph: True",
    "decode_without_graph": r"Decode batch.*cuda graph: False",
    "accept_length": r"Decode batch.*accept len: [0-9.]+",
}


def scan(lines, max_lines=3):
    evidence = {}
    for name, pattern in PATTERNS.items():
        regex = re.compile(pattern)
        hits = [line for line in lines if regex.search(line)]
        if hits:
            evidence[name] = {"count": len(hits), "lines": hits[:max_lines]}
    return evidence


def main():
    module = AnsibleModule(
        argument_spec={"unit": {"type": "str", "required": True},
                       "max_lines": {"type": "int", "default": 3}},
        supports_check_mode=True,
    )
    unit = module.params["unit"]
    if module.params["max_lines"] < 0:
        module.fail_json(msg="max_lines must be 0 or more")
    invocation, lines = invocation_journal(unit)
    if not invocation:
        module.fail_json(msg=f"unit {unit!r} has no current invocation ({lines[0]}): "
                             "is it running? Check sglang_service_name")
    module.exit_json(changed=False, invocation=invocation,
                     evidence=scan(lines, module.params["max_lines"]))


if __name__ == "__main__":
    main()
