#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Wait until an SGLang server generates tokens, or fail with its journal."""

DOCUMENTATION = r"""
module: sglang_ready
short_description: Prove an SGLang server is ready by generating tokens
description:
  - Polls until C(/health) answers 200 and a completion returns at least one token
    (C(/health) alone can answer 200 while the scheduler is broken, sglang#6624).
  - Watches the systemd unit meanwhile; a unit that failed, waits to be restarted or
    restarted during the wait (a crash loop) fails at once, a deadline fails too; both return
    the unit's last journal lines. Restarts are counted from the wait's first look at the unit
    (systemd's C(NRestarts) can survive a manual restart, and a restart by systemd long before
    this wait is not a crash of this start).
  - Standard library only; reads nothing from the server but what it needs.
  - With O(server_info), once tokens came back, also reads what the server resolved
    (C(/server_info)) and loaded (C(/model_info)), keys redacted, as
    M(sglang.deploy.sglang_server_info) does, so the verification that follows a readiness
    proof needs no round trip of its own.
extends_documentation_fragment:
  - sglang.deploy.sglang.server
options:
  unit:
    description: systemd unit to watch; empty for a server not run by systemd.
    type: str
    default: ''
  timeout:
    description: Deadline in seconds of the whole start (a 27B model takes minutes to load);
      the default is C(module_utils/sglang_stages.py)'s READY_TIMEOUT_S, the role's
      C(sglang_ready_timeout) default too.
    type: int
    default: 7200
  poll:
    description: Seconds between attempts.
    type: float
    default: 1
  model:
    description: Model name for the completion; default the first of /v1/models.
    type: str
    default: ''
  prompt:
    description: Prompt of the readiness completion.
    type: str
    default: The capital of France is
  max_tokens:
    description: Tokens to generate.
    type: int
    default: 8
  journal_lines:
    description: Journal lines returned on failure.
    type: int
    default: 40
  stage_timeouts:
    description: 'Seconds per start-up stage (module_utils/sglang_stages.py), e.g. {weights loaded:
      1800}.'
    type: dict
    default: {}
  slice:
    description: 'Return after this many seconds with C(pending) and C(resume) when not ready yet (0:
      wait to the end). The role''s C(sglang_progress) action calls the module slice after slice and
      prints the stages as they come.'
    type: float
    default: 0
  resume:
    description: 'C(resume) of the call before (internal): the wait goes on from there.'
    type: dict
    default: {}
  server_info:
    description: Once ready, also read C(/server_info) and C(/model_info) (RV(server_answers)).
    type: bool
    default: false
  admin_api_key:
    description: Admin key, only redacted from RV(server_answers) (never sent).
    type: str
    default: ''
notes:
  - Not a builtin because of fewer round trips and secrets; M(ansible.builtin.uri) with
    retries could poll C(/health) but not prove a token, watch the unit and its start-up
    stages, quote the journal on failure and read C(/server_info) in the same call; the API
    keys never appear in the result.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Wait until SGLang generates tokens
  sglang.deploy.sglang_ready:
    url: http://127.0.0.1:30000
    unit: sglang.service
    api_key: "{{ sglang_api_key }}"
    timeout: 1800
    server_info: true
  register: ready
"""

RETURN = r"""
ready_after_s:
  description: Seconds from the first poll until tokens came back.
  type: float
  returned: success
model:
  description: Model that answered.
  type: str
  returned: success
completion_tokens:
  description: Tokens the server reported in usage.
  type: int
  returned: success
generation_ms:
  description: Wall time of the readiness completion.
  type: float
  returned: success
journal:
  description: The unit's last journal lines.
  type: list
  returned: failure
stages:
  description: Start-up stages reached, with seconds from the start of the wait.
  type: list
  returned: when unit is set
pending:
  description: The slice ended before the server was ready; call again with C(resume).
  type: bool
  returned: always
resume:
  description: Where the wait stands (the start, the stages), for the next call.
  type: dict
  returned: when pending
progress:
  description: Lines to show now (stages reached in this call).
  type: list
  returned: always
status:
  description: One line on where the start is.
  type: str
  returned: when pending
server_answers:
  description: What the server resolved and loaded, keys redacted.
  type: dict
  returned: success, when O(server_info) is set
  contains:
    server_info:
      description: The answer of C(/server_info) (C(/get_server_info) on older servers).
      type: dict
      returned: always
    model_info:
      description: The answer of C(/model_info) (C(/get_model_info) on older servers).
      type: dict
      returned: always
    endpoints:
      description: The paths that answered.
      type: list
      returned: always
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_http import AuthError, DeadlineError, HttpError, request
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_redact import excerpt, redact
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_server import read as read_server
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_stages import (
    READY_TIMEOUT_S, StageOverdue, StageWatch, invocation_lines)
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_systemd import (
    COMMAND_TIMEOUT, journal_tail, unit_state)


class NotReady(Exception):
    """Not ready yet; worth another try."""

    def __init__(self, msg, cut=False):
        super().__init__(msg)
        self.cut = cut  # the overall deadline ended the attempt: an earlier answer says more


class Failed(Exception):
    """Will not become ready: stop waiting."""


class Pending(Exception):
    """This call's slice of the wait ended before the server was ready: the wait goes on."""


def check_unit(unit, restarts_before=0, timeout=COMMAND_TIMEOUT):
    """Failed when the unit will not become ready; `restarts_before` is its NRestarts when the
    wait began (only restarts after that are crashes of this start)."""
    state = unit_state(unit, timeout)
    if state.get("error"):
        raise Failed(f"cannot read the state of unit {unit}: {state['error']}")
    if state.get("ActiveState") == "failed" or (
        state.get("ActiveState") == "inactive" and state.get("Result", "success") != "success"
    ):
        raise Failed(f"unit {unit} is {state.get('ActiveState')} (result: {state.get('Result')})")
    if state.get("SubState") == "auto-restart":
        raise Failed(
            f"unit {unit} exited (result: {state.get('Result')}) and waits to be restarted: "
            "the server crashes during start"
        )
    if state["NRestarts"] > restarts_before:
        raise Failed(
            f"unit {unit} restarted {state['NRestarts'] - restarts_before} time(s) during this "
            "wait: the server crashes during start"
        )
    if state.get("ActiveState") == "inactive":
        raise Failed(f"unit {unit} is not running: start it first")


def _tokens(body):
    """usage.completion_tokens of a completion when it is a positive integer, else 0."""
    usage = body.get("usage") if isinstance(body, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0 else 0


def try_generate(url, model, prompt, max_tokens, api_key, budget=120.0):
    """One readiness attempt: health, then a real completion, all within `budget` seconds."""
    deadline = time.monotonic() + budget

    def left(cap):
        return max(0.001, min(cap, deadline - time.monotonic()))

    try:
        status, _unused = request(url + "/health", api_key=api_key, timeout=left(10))
        if status != 200:
            raise NotReady(f"/health answered {status}")
        if not model:
            status, body = request(url + "/v1/models", api_key=api_key, timeout=left(10))
            data = body.get("data") if isinstance(body, dict) else None
            if status != 200 or not isinstance(data, list) or not data \
                    or not isinstance(data[0], dict) or not isinstance(data[0].get("id"), str):
                raise NotReady(f"/v1/models answered {status}: {excerpt(body, [api_key])}")
            model = data[0]["id"]
        started = time.monotonic()
        status, body = request(
            url + "/v1/completions",
            {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
            api_key=api_key,
            timeout=left(120),
        )
    except AuthError as exc:
        raise Failed(str(exc)) from None
    except DeadlineError as exc:
        raise NotReady(str(exc), cut=True) from exc
    except HttpError as exc:
        raise NotReady(str(exc)) from exc
    if status != 200 or not isinstance(body, dict):
        raise NotReady(f"/v1/completions answered {status}: {excerpt(body, [api_key])}")
    tokens = _tokens(body)
    if tokens < 1:
        raise NotReady("/v1/completions answered 200 without a positive integer "
                       "usage.completion_tokens")
    return {"model": model, "completion_tokens": tokens,
            "generation_ms": round((time.monotonic() - started) * 1000, 1)}


def wait_ready(params, clock=time.monotonic, sleep=time.sleep, unit_check=check_unit,
               start=None, until=None):
    """Tokens from the server by `start` + timeout; Pending at `until` (the end of a slice)."""
    url = params["url"].rstrip("/")
    start = clock() if start is None else start
    deadline = start + params["timeout"]
    last = "no attempt yet"
    while True:
        if params["unit"]:
            unit_check(params["unit"])
        try:
            answer = try_generate(url, params["model"], params["prompt"], params["max_tokens"],
                                  params["api_key"], max(0.001, deadline - clock()))
            answer["ready_after_s"] = round(clock() - start, 2)
            return answer
        except NotReady as exc:
            if not (exc.cut and last != "no attempt yet"):
                last = str(exc)
        if clock() >= deadline:
            raise Failed(f"not ready after {params['timeout']} s; last answer: {last}")
        if until is not None and clock() >= until:
            raise Pending(last)
        sleep(max(0.0, params["poll"]))


ARGUMENT_SPEC = {
    "url": {"type": "str", "required": True},
    "unit": {"type": "str", "default": ""},
    "timeout": {"type": "int", "default": READY_TIMEOUT_S},
    "poll": {"type": "float", "default": 1},
    "model": {"type": "str", "default": ""},
    "prompt": {"type": "str", "default": "The capital of France is"},
    "max_tokens": {"type": "int", "default": 8, "no_log": False},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "journal_lines": {"type": "int", "default": 40},
    "stage_timeouts": {"type": "dict", "default": {}},
    "slice": {"type": "float", "default": 0},
    "resume": {"type": "dict", "default": {}},
    "server_info": {"type": "bool", "default": False},
    "admin_api_key": {"type": "str", "default": "", "no_log": True},
}


def _check_bounds(module, params):
    # `not 0 <= x <= a day`: nan and inf (a wait that never ends, a sleep that overflows) too.
    if not 0 <= params["timeout"] <= 86400 or params["max_tokens"] < 1 \
            or not 0 <= params["slice"] <= 86400 or not 0 <= params["poll"] <= 3600:
        module.fail_json(msg="timeout and slice must be 0 to 86400 seconds, poll 0 to 3600 "
                             "and max_tokens at least 1")


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    _check_bounds(module, params)
    unit = params["unit"]
    # The wall clock: a wait in slices spans several processes.
    now = time.time()
    started, restarts, watch = _resume(module, params, now)
    seen = len(_reached(watch))

    def news():
        """The stages reached in this call, those seen at the same moment on one line."""
        lines = {}
        for r in _reached(watch)[seen:]:
            lines.setdefault(r["after_s"], []).append(r["stage"])
        return [f"{', '.join(stages)} at {at} s" for at, stages in lines.items()]

    def unit_and_stage_check(name):
        # The journal first: a crash is reported with the last stage it reached.
        try:
            watch.check()
            overdue = None
        except StageOverdue as exc:
            overdue = exc
        check_unit(name, restarts, _left(started, params))
        if overdue:
            raise Failed(str(overdue)) from overdue

    try:
        result = wait_ready(params, clock=time.time, unit_check=unit_and_stage_check,
                            start=started, until=now + params["slice"] if params["slice"] else None)
    except Pending as exc:
        module.exit_json(changed=False, pending=True, progress=news(),
                         status=watch.waiting() if watch else f"not ready yet: {exc}",
                         resume={"started": started, "restarts": restarts,
                                 "watch": watch.state() if watch else None},
                         stages=_reached(watch))
    except Failed as exc:
        journal = journal_tail(unit, params["journal_lines"]) if unit else []
        stages = f" ({watch.summary()})" if watch else ""
        module.fail_json(msg=f"SGLang is not serving: {exc}{stages}", journal=journal,
                         stages=_reached(watch), progress=news(), pending=False)
    progress = news() + [f"tokens after {result['ready_after_s']} s"]
    if params["server_info"]:
        result["server_answers"] = _server_answers(module, params, progress)
    module.exit_json(changed=False, pending=False, progress=progress,
                     stages=_reached(watch), **result)


def _left(started, params):
    """Seconds left before the overall deadline: no systemctl or journalctl call waits longer."""
    return started + params["timeout"] - time.time()


def _resume(module, params, now):
    """(when the wait started, the unit's NRestarts then, the stage watch or None without a
    unit) from `resume`, or from the unit itself on the wait's first call."""
    resume = params["resume"] or {}
    unit = params["unit"]
    try:
        started = float(resume.get("started", now))
        if "restarts" in resume:
            restarts = int(resume["restarts"])
        else:
            restarts = unit_state(unit, _left(started, params))["NRestarts"] if unit else 0
        watch = StageWatch(params["stage_timeouts"],
                           invocation_lines(unit, lambda: _left(started, params)),
                           time.time).restore(resume.get("watch")) if unit else None
    except ValueError as exc:
        module.fail_json(msg=f"stage_timeouts: {exc}")
    except (KeyError, TypeError) as exc:
        module.fail_json(msg=f"resume: not a state this module returned ({exc})")
    return started, restarts, watch


def _reached(watch):
    return watch.reached if watch else []


def _server_answers(module, params, progress):
    """What the server resolved (/server_info), read once it serves tokens."""
    keys = [params["api_key"], params["admin_api_key"]]
    try:
        return read_server(params["url"], *keys)
    except HttpError as exc:
        module.fail_json(msg=f"SGLang serves tokens, but what it resolved cannot be read: "
                             f"{redact(str(exc), keys)}", pending=False, progress=progress)
    return None


if __name__ == "__main__":
    main()
