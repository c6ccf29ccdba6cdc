#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Stop SGLang once it finished the requests it runs, and say how many and how long."""

DOCUMENTATION = r"""
module: sglang_stop
short_description: Stop SGLang after it drained the requests it runs, reporting how many and how long
description:
  - Reads the requests SGLang holds (C(sglang:num_running_reqs) and C(sglang:num_queue_reqs) of
    its C(/metrics), which C(--enable-metrics) turns on), then stops the unit. systemd sends
    SIGTERM to the launcher, which passes it to SGLang; SGLang then answers C(/health) with 503
    (a balancer stops sending), finishes every request it holds, and exits. The unit's
    C(KillMode=mixed) keeps the signal from SGLang's workers until then; its C(TimeoutStopSec)
    bounds the drain, after which systemd kills what is left.
  - Watches the stop, reading the count while SGLang drains, and reports the requests in flight
    at the stop, how long the stop took, and how systemd ended it (C(Result)). Only a stop that
    systemd ended with SIGKILL (C(Result=timeout)) cut requests, the last count read; without
    metrics the count is C(unknown) with the reason.
  - A unit that is not running is left as it is. Check mode reads the count and stops nothing.
options:
  service:
    description: systemd service name (without C(.service)).
    type: str
    required: true
  url:
    description: SGLang's base URL (its C(/metrics) needs no key).
    type: str
    required: true
  timeout:
    description: Seconds to wait for the unit to stop (longer than its C(TimeoutStopSec)).
    type: int
    default: 600
notes:
  - Not a builtin because C(ansible.builtin.systemd_service) stops without reading what the
    server still runs, so it cannot say what a stop waited for or cut.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Stop SGLang once it finished the requests it runs
  sglang.deploy.sglang_stop:
    service: sglang
    url: http://127.0.0.1:30000
    timeout: 480
  register: stopped
"""

RETURN = r"""
in_flight:
  description: Requests SGLang held (running and queued) when the stop began; null when unknown.
  type: float
  returned: always
most:
  description: The most requests read during the drain (new ones SGLang took meanwhile included).
  type: float
  returned: always
seconds:
  description: How long the stop took (the drain, then SGLang's exit).
  type: float
  returned: always
result:
  description: systemd's C(Result) of the stop (C(success); C(timeout) when it killed SGLang).
  type: str
  returned: always
cut:
  description: Requests the stop cut (0 after a drain that ended; null when unknown).
  type: float
  returned: always
summary:
  description: One line for the play's output.
  type: str
  returned: always
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_http import HttpError
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_server import (
    QUEUED_GAUGES, RUNNING_GAUGES, requests_in_flight)
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_systemd import (
    show, stop_no_block, unit_state)

STOPPED = ("inactive", "failed")
POLL_S = 0.5


def in_flight(url):
    """(running + queued requests, None) or (None, why it is unknown)."""
    try:
        count = requests_in_flight(url.rstrip("/"), RUNNING_GAUGES + QUEUED_GAUGES, timeout=5)
    except HttpError as exc:
        return None, f"{url}/metrics: {exc}"
    return (count, None) if count is not None else (
        None, f"{url}/metrics has no sglang:num_running_reqs (is --enable-metrics on?)")


def _count(value):
    return "unknown" if value is None else f"{value:g}"


def watch(params, unit, started):
    """Wait until the unit stopped; (the last count read, the most seen, why unknown)."""
    last, why = in_flight(params["url"])
    most = last
    deadline = started + params["timeout"]
    while unit_state(unit).get("ActiveState") not in STOPPED:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{unit} is still stopping after {params['timeout']} s "
                               f"({_count(last)} requests in flight at the last read)")
        time.sleep(POLL_S)
        count, _unused = in_flight(params["url"])
        if count is not None:
            last, most = count, max(most or 0, count)
    return last, most, why


def run(params, check_mode):
    unit = f"{params['service']}.service"
    before, why = in_flight(params["url"])
    result = {"changed": False, "in_flight": before, "most": before, "seconds": 0.0,
              "result": None, "cut": 0 if before == 0 else None}
    state = unit_state(unit)
    if "ActiveState" not in state:
        raise OSError(f"cannot read {unit}'s state: {state.get('error') or 'no answer'}")
    if state["ActiveState"] in STOPPED:
        return dict(result, cut=0, summary=f"{unit} was not running: nothing to drain")
    if check_mode:
        return dict(result, changed=True, summary=(
            f"would stop {unit} once its {_count(before)} requests in flight finished"
            + (f" ({why})" if why else "")))
    started = time.monotonic()
    error = stop_no_block(unit)
    if error:
        raise OSError(f"systemctl stop {unit}: {error}")
    last, most, why = watch(params, unit, started)
    seconds = round(time.monotonic() - started, 1)
    outcome = show(unit, ["Result"])[0].get("Result") or "unknown"
    killed = outcome == "timeout"  # TimeoutStopSec reached: systemd sent SIGKILL
    cut = last if killed else 0
    return dict(result, changed=True, most=most, seconds=seconds, result=outcome, cut=cut,
                summary=_summary(unit, seconds, before, most, killed, cut, why))


def _summary(unit, seconds, before, most, killed, cut, why):
    """The play's line: what the stop waited for, or what systemd's kill cut."""
    if killed:
        return (f"{unit}: the drain did not end within its TimeoutStopSec, systemd killed SGLang "
                f"after {seconds} s: {_count(cut)} requests cut; raise sglang_drain_timeout")
    more = f" (at most {_count(most)} during the drain)" if (most or 0) > (before or 0) else ""
    return (f"{unit} stopped in {seconds} s after SGLang finished the {_count(before)} requests "
            f"in flight at the stop{more}" + (f"; counts unknown: {why}" if why else ""))


def main():
    module = AnsibleModule(
        argument_spec={
            "service": {"type": "str", "required": True},
            "url": {"type": "str", "required": True},
            "timeout": {"type": "int", "default": 600},
        },
        supports_check_mode=True,
    )
    try:
        result = run(module.params, module.check_mode)
    except (OSError, TimeoutError) as exc:
        module.fail_json(msg=f"could not stop SGLang: {exc}")
    if result["cut"]:
        module.warn(result["summary"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
