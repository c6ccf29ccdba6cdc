"""Run a long module in slices and show its progress in the play output as it goes.

A module cannot print while it runs: the play shows nothing until it returns. A 27B model
loads for minutes and a checkpoint downloads for longer, so the role's long waits
(`sglang_ready`, `sglang_model_fetch`) return every `slice` seconds with `pending: true`, the
lines to show now (`progress`), a one-line `status` and a `resume` state. This action calls
the module again with that state until it is done, prints each progress line at once and the
status every `heartbeat` seconds, and returns the module's last result.

    - name: Wait until SGLang generates tokens
      sglang.deploy.sglang_progress:
        module: sglang.deploy.sglang_ready
        slice: 15
        args: {url: "http://127.0.0.1:30000", unit: sglang}
"""

import re
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

INTERNAL = ("pending", "resume", "progress", "status")
# Control characters (C0, DEL, C1): a journal line or a hub answer relayed in a progress line
# must not drive the operator's terminal (escape sequences, carriage returns over a line).
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def shown_text(line, limit=1000):
    """A module's progress line as it is safe to print: one line, no control characters."""
    text = CONTROL.sub("?", str(line))
    return text if len(text) <= limit else text[:limit] + "..."


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("module", "args", "slice", "heartbeat"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        module, args, slice_s, heartbeat = _options(self._task.args)
        host = task_vars.get("inventory_hostname", "?") if task_vars else "?"
        resume, shown = {}, time.monotonic()
        while True:
            out = self._execute_module(
                module_name=module, task_vars=task_vars,
                module_args={**args, "slice": slice_s, "resume": resume})
            shown = _show(host, out, shown, heartbeat)
            if out.get("failed") or not out.get("pending"):
                break
            resume = out.get("resume") or {}
        for key in INTERNAL:
            out.pop(key, None)
        result.update(out)
        return result


def _options(options):
    """(module, args, slice seconds, heartbeat seconds) of the task, checked."""
    module = options.get("module")
    args = options.get("args") or {}
    if not isinstance(module, str) or not module or not isinstance(args, dict):
        raise AnsibleActionFail("sglang_progress needs module (a name) and args (a mapping)")
    try:
        slice_s = float(options.get("slice", 15))
        heartbeat = float(options.get("heartbeat", 60))
    except (TypeError, ValueError) as exc:
        raise AnsibleActionFail(f"sglang_progress: slice and heartbeat are seconds ({exc})")
    # nan passes `<= 0` and would make the module's slice endless; inf likewise.
    if not (0 < slice_s <= 3600 and 0 <= heartbeat <= 86400):
        raise AnsibleActionFail("sglang_progress: slice must be more than 0 seconds (at "
                                "most 3600) and heartbeat 0 to 86400 seconds")
    return module, args, slice_s, heartbeat


def _show(host, out, shown, heartbeat):
    """Display a slice's progress lines, or its status once `heartbeat` seconds passed in
    silence while it is still pending; returns when something was last shown."""
    lines = out.get("progress") or []
    for line in lines if isinstance(lines, list) else [lines]:
        display.display(f"{host}: {shown_text(line)}")
        shown = time.monotonic()
    if out.get("pending") and not out.get("failed") and out.get("status") \
            and time.monotonic() - shown >= heartbeat:
        display.display(f"{host}: {shown_text(out['status'])}")
        shown = time.monotonic()
    return shown
