#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Which pinned requirements the ml-env already satisfies, read without running pip."""

DOCUMENTATION = r"""
module: sglang_pip_check
short_description: Check pinned requirements against a virtual environment, cheaply
description:
  - Runs the venv's own Python to read installed versions from distribution metadata
    (importlib.metadata) and matches them with the packaging library pip vendors, so a re-run
    with everything installed starts no pip resolution and no index request (~0.1 s).
  - Read-only; runs in check mode.
extends_documentation_fragment:
  - sglang.deploy.sglang.venv
options:
  requirements:
    description: Requirement strings (C(sglang==0.5.23)).
    type: list
    elements: str
    required: true
notes:
  - Not a builtin because of fewer round trips; M(ansible.builtin.pip) resolves and may ask
    the index even when everything is installed; this reads installed metadata in ~0.1 s and
    changes nothing.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Which pinned requirements the ml-env already has
  sglang.deploy.sglang_pip_check:
    venv: /opt/ml-env
    requirements: [sglang==0.5.23]
  register: pip_check
"""

RETURN = r"""
venv_exists:
  description: Whether the venv has a Python.
  type: bool
  returned: always
installed:
  description: Installed version per requirement name (null when absent).
  type: dict
  returned: always
missing:
  description: Requirements not satisfied, in the order given.
  type: list
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_pip import check


def main():
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "requirements": {"type": "list", "elements": "str", "required": True},
        },
        supports_check_mode=True,
    )
    try:
        result = check(module.params["venv"], module.params["requirements"])
    except RuntimeError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
