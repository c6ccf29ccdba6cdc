#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""What a running SGLang server resolved (/server_info) and loaded (/model_info), secrets removed."""

DOCUMENTATION = r"""
module: sglang_server_info
short_description: Read /server_info and /model_info from SGLang, with its API keys redacted
description:
  - Reads C(/server_info) (0.5.6+) or C(/get_server_info) (older) and C(/model_info) or
    C(/get_model_info), sending the API key when one is given.
  - SGLang returns its own C(api_key) and C(admin_api_key) in C(/server_info) (0.5.23,
    C(build_server_info) over C(ServerArgs.resolved_dict())); every field named like a secret
    and every occurrence of the given key is replaced by C(<redacted>) before anything is
    returned, so no play output, report or manifest holds it.
extends_documentation_fragment:
  - sglang.deploy.sglang.server
options:
  admin_api_key:
    description: Admin key (only redacted, never sent).
    type: str
    default: ''
  timeout:
    description: Seconds per request.
    type: float
    default: 30
notes:
  - Not a builtin because of secrets; M(ansible.builtin.uri) would return C(/server_info) as
    SGLang sends it, with its C(api_key) and C(admin_api_key), into the registered result
    and the play output; this redacts them before anything leaves the host.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Read what the running server resolved
  sglang.deploy.sglang_server_info:
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_api_key }}"
  register: server_info
"""

RETURN = r"""
server_info:
  description: The answer of /server_info, redacted.
  type: dict
  returned: always
model_info:
  description: The answer of /model_info, redacted.
  type: dict
  returned: always
endpoints:
  description: The paths that answered.
  type: list
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_http import HttpError
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_redact import redact
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_server import read


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "admin_api_key": {"type": "str", "default": "", "no_log": True},
            "timeout": {"type": "float", "default": 30.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = read(p["url"], p["api_key"], p["admin_api_key"], p["timeout"])
    except HttpError as exc:
        module.fail_json(msg=redact(str(exc), [p["api_key"], p["admin_api_key"]]))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
