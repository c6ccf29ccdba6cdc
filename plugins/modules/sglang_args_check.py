#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Check a release's arguments against the installed SGLang's own argument parser."""

DOCUMENTATION = r"""
module: sglang_args_check
short_description: Check SGLang arguments with the installed sglang.launch_server --help
description:
  - Runs C(<venv>/bin/python -m sglang.launch_server --help), the real parser of the installed
    version, reads the long options it declares and returns every argument of the release it
    does not know, with the nearest known names.
  - When the parser cannot run (an ml-env installed without dependencies, on a host without a
    GPU), C(checked) is false and C(reason) says why; nothing is guessed.
  - Read-only; runs in check mode.
extends_documentation_fragment:
  - sglang.deploy.sglang.venv
options:
  args:
    description: The release's arguments (dashed names).
    type: dict
    required: true
  launch_module:
    description: Module whose --help is read.
    type: str
    default: sglang.launch_server
  timeout:
    description: Seconds the parser may take (it imports torch).
    type: int
    default: 120
notes:
  - Not a builtin only weakly; M(ansible.builtin.command) could run C(--help) in the same one
    round trip and a filter could compare the names. The module keeps the run, its time bound
    and the comparison with nearest names in one unit-tested place; it is the fallback for when
    M(sglang.deploy.sglang_resolve) could not run.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Ask the installed parser whether it knows every argument of the release
  sglang.deploy.sglang_args_check:
    venv: /opt/ml-env
    args: {model-path: /srv/models/Qwen3.6-27B, tp-size: 2, speculative-algorithm: NEXTN}
  register: args_check
"""

RETURN = r"""
checked:
  description: Whether the parser ran.
  type: bool
  returned: always
reason:
  description: Why it did not run.
  type: str
  returned: when not checked
known_count:
  description: Long options the parser declares.
  type: int
  returned: always
unknown:
  description: '[{name, suggestions}] for arguments the parser does not know.'
  type: list
  returned: always
elapsed_s:
  description: Time the parser took.
  type: float
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_cli import parse_help, run_help, unknown_args


def check(venv, args, launch_module="sglang.launch_server", timeout=120):
    text, why, elapsed = run_help(os.path.join(venv, "bin", "python"), launch_module, timeout)
    if text is None:
        return {"checked": False, "reason": why, "known_count": 0, "unknown": [],
                "elapsed_s": round(elapsed, 2)}
    known = parse_help(text)
    return {"checked": True, "reason": None, "known_count": len(known),
            "unknown": unknown_args(sorted(args), known), "elapsed_s": round(elapsed, 2)}


def main():
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "args": {"type": "dict", "required": True},
            "launch_module": {"type": "str", "default": "sglang.launch_server"},
            "timeout": {"type": "int", "default": 120},
        },
        supports_check_mode=True,
    )
    p = module.params
    module.exit_json(changed=False, **check(p["venv"], p["args"], p["launch_module"], p["timeout"]))


if __name__ == "__main__":
    main()
