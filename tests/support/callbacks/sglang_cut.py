# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""A test callback: kill the playbook process (SIGKILL) right after a named task ends.

A cut between two tasks, as a host sees one when the controller dies, the operator's laptop
sleeps or CI times out: the task before it finished on the host, the task after it never
started, and no rescue or always section runs. Enabled by the tests only
(ANSIBLE_CALLBACKS_ENABLED=sglang_cut), on SGLANG_TEST_CUT_AFTER (a prefix of the task's
name) or SGLANG_TEST_CUT_AT_CHANGED (n: right after the n-th task that changed the host, the
task boundaries tests/support/task_cuts.py enumerates); SGLANG_TEST_CUT_MARK names a file
written just before the kill, so a test tells a cut run from one that ended before reaching
the task.
"""

import os
import signal

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: sglang_cut
type: aggregate
short_description: Kill the playbook process after a named task (tests only)
description: Kill the playbook process with SIGKILL once the task named by SGLANG_TEST_CUT_AFTER ends.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sglang_cut"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.changed = 0

    def _ended(self, result):
        after = os.environ.get("SGLANG_TEST_CUT_AFTER")
        at_changed = int(os.environ.get("SGLANG_TEST_CUT_AT_CHANGED") or 0)
        # A role's task is named "role : name".
        name = result._task.get_name().split(" : ", 1)[-1]  # pylint: disable=protected-access
        changed = bool(result._result.get("changed"))  # pylint: disable=protected-access
        self.changed += changed
        if (after and name.startswith(after)) or (changed and self.changed == at_changed):
            mark = os.environ.get("SGLANG_TEST_CUT_MARK")
            if mark:
                with open(mark, "w", encoding="utf-8") as handle:
                    handle.write(name + "\n")
            os.kill(os.getpid(), signal.SIGKILL)

    def v2_runner_on_ok(self, result):
        self._ended(result)

    def v2_runner_on_skipped(self, result):
        self._ended(result)
