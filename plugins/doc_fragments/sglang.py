# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""The options several modules share, documented once (extends_documentation_fragment)."""


class ModuleDocFragment:
    """sglang.deploy.sglang.venv, sglang.deploy.sglang.server, sglang.deploy.sglang.nvidia_smi."""

    VENV = r"""
options:
  venv:
    description:
      - The ml-env, the virtual environment SGLang is installed in; its Python runs what the
        module asks of SGLang.
    type: path
    required: true
"""

    SERVER = r"""
options:
  url:
    description: Base URL of the SGLang server, for example V(http://127.0.0.1:30000).
    type: str
    required: true
  api_key:
    description: The server's API key, sent as a bearer token; never returned or logged.
    type: str
    default: ''
"""

    NVIDIA_SMI = r"""
options:
  nvidia_smi:
    description: The nvidia-smi command to ask (a path, or a name found on E(PATH)).
    type: str
    default: nvidia-smi
"""
