#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Documentation of the sglang_progress action (plugins/action/sglang_progress.py): the action
runs on the controller; this file only carries its documentation, as ansible.builtin.debug's
module file does."""

DOCUMENTATION = r"""
module: sglang_progress
short_description: Run a long sglang.deploy module in slices and print its progress as it goes
description:
  - A module cannot print while it runs, and a 27B model loads for minutes. The long waits of
    this collection (M(sglang.deploy.sglang_ready), M(sglang.deploy.sglang_model_fetch)) return
    every O(slice) seconds with C(pending=true), the lines to show now, a one-line status and a
    state to resume from. This action calls the module again with that state until it is done,
    prints each progress line at once and the status every O(heartbeat) seconds, and returns the
    module's last result.
  - Runs on the controller (an action plugin); the module it names runs on the target.
options:
  module:
    description: The module to run in slices (its FQCN).
    type: str
    required: true
  args:
    description: The module's arguments.
    type: dict
    default: {}
  slice:
    description: Seconds each call of the module may take before it returns with progress.
    type: float
    default: 15
  heartbeat:
    description: Seconds between two status lines when no progress line came.
    type: float
    default: 60
notes:
  - Not a builtin because none prints a module's progress while it runs; async + async_status
    would poll but print nothing of what the module saw.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Wait until SGLang generates tokens
  sglang.deploy.sglang_progress:
    module: sglang.deploy.sglang_ready
    slice: 15
    args:
      url: http://127.0.0.1:30000
      unit: sglang
"""

RETURN = r"""
_module_result:
  description: The named module's last result, without its slicing keys (pending, resume, progress, status).
  type: dict
  returned: always
"""
