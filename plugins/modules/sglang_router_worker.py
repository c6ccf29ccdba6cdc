#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Replicas in the SGLang router: list, add and wait healthy, remove and drain."""

DOCUMENTATION = r"""
module: sglang_router_worker
short_description: Add, remove (and drain) or wait for workers of the SGLang router (sglang-router 0.3)
description:
  - Uses the router's worker API of sglang-router 0.3 (C(GET /workers), C(POST /workers),
    C(DELETE /workers/{id})); the C(/add_worker) and C(/remove_worker) paths of 0.2 are gone.
  - C(state=present) registers C(worker) unless the router lists it, then waits until the router
    reports it healthy. C(state=absent) removes it (by id, looked up by URL), waits until it is
    no longer listed, then drains it - waits until the worker's own C(sglang:num_running_reqs)
    is 0 - because the router lets requests already sent finish. C(state=ready) waits until the
    router answers and lists every URL of C(workers) as healthy (with none, only that it answers).
options:
  router_url:
    description: Base URL of the router.
    type: str
    required: true
  worker:
    description: Worker URL (C(http://host:port)) for C(present) and C(absent).
    type: str
  workers:
    description: Worker URLs that must all be healthy for C(ready).
    type: list
    elements: str
    default: []
  state:
    description: What to do.
    type: str
    choices:
    - present
    - absent
    - ready
    default: ready
  api_key:
    description: The router's key (sent as a bearer token).
    type: str
    default: ''
  timeout:
    description: Seconds to wait for the router.
    type: float
    default: 120
  drain_timeout:
    description: Seconds to wait for a removed worker's running requests.
    type: float
    default: 120
notes:
  - Not a builtin because of fewer round trips and secrets; registering then waiting
    healthy, or removing then draining, is a loop of several M(ansible.builtin.uri) calls;
    the router's API key stays out of the result.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Add this replica to the router
  sglang.deploy.sglang_router_worker:
    router_url: http://router.example:30000
    worker: http://10.0.0.11:30000
    state: present

- name: Remove (and drain) it before a restart
  sglang.deploy.sglang_router_worker:
    router_url: http://router.example:30000
    worker: http://10.0.0.11:30000
    state: absent
"""

RETURN = r"""
workers:
  description: 'The router''s workers after the task: [{url, healthy}].'
  type: list
  returned: always
drained:
  description: Whether a removed worker had no running request left; null when its running
    count could not be read (C(drain_reason) says why), never true without the count.
  type: bool
  returned: when state is absent
drain_reason:
  description: What C(drained) rests on.
  type: str
  returned: when state is absent
"""

import math
import time
import urllib.parse

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_http import AuthError, HttpError, request
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_redact import excerpt
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_server import requests_in_flight


class RouterError(Exception):
    pass


def workers(router, api_key):
    try:
        status, body = request(router + "/workers", api_key=api_key, timeout=10)
    except AuthError as exc:
        raise RouterError(f"{exc}: set sglang_router_api_key") from None
    listed = body.get("workers") if isinstance(body, dict) else None
    if status != 200 or not isinstance(listed or [], list):
        raise RouterError(f"{router}/workers answered HTTP {status}: {excerpt(body, [api_key])}")
    return [{"id": w.get("id"), "url": str(w.get("url", "")).rstrip("/"),
             "healthy": bool(w.get("is_healthy"))} for w in listed or [] if isinstance(w, dict)]


def _wait(what, check, timeout):
    deadline = time.monotonic() + timeout
    while True:
        try:
            last = check()
            if last is True:
                return
        except HttpError as exc:
            last = str(exc)
        if time.monotonic() > deadline:
            raise RouterError(f"{what}: not after {timeout:g} s ({last})")
        time.sleep(1.0)


def present(router, worker, api_key, timeout, check_mode):
    listed = [w for w in workers(router, api_key) if w["url"] == worker]
    changed = not listed
    if changed and not check_mode:
        status, body = request(router + "/workers", {"url": worker}, api_key=api_key, timeout=10)
        if status not in (200, 201, 202):
            raise RouterError(f"adding {worker}: HTTP {status}: {excerpt(body, [api_key])}")
    if not check_mode:
        _wait(f"{worker} healthy in the router",
              lambda: any(w["url"] == worker and w["healthy"] for w in workers(router, api_key))
              or "listed but not healthy yet", timeout)
    return {"changed": changed}


def absent(router, worker, api_key, timeout, drain_timeout, check_mode):
    listed = [w for w in workers(router, api_key) if w["url"] == worker]
    if not listed or check_mode:
        return {"changed": bool(listed), "drained": True if not listed else None,
                "drain_reason": "not in the router" if not listed else "check mode: not drained"}
    for w in listed:
        # The id comes from the router's answer: one path segment, quoted, never a path.
        if not isinstance(w["id"], (str, int)) or isinstance(w["id"], bool) or w["id"] == "":
            raise RouterError(f"removing {worker}: the router lists it without an id "
                              f"({excerpt(w['id'], [api_key])}): remove it by hand")
        wid = urllib.parse.quote(str(w["id"]), safe="")
        status, body = request(f"{router}/workers/{wid}", api_key=api_key, timeout=10,
                               method="DELETE")
        if status not in (200, 202, 204, 404):
            raise RouterError(f"removing {worker}: HTTP {status}: {excerpt(body, [api_key])}")
    _wait(f"{worker} gone from the router",
          lambda: all(w["url"] != worker for w in workers(router, api_key)) or "still listed",
          timeout)

    return dict(drain(worker, drain_timeout), changed=True)


def drain(worker, drain_timeout, in_flight=requests_in_flight):
    """{drained, drain_reason} of a worker out of the router: True once its running count reads
    0, False when requests still run at the bound, None when the count cannot be read (metrics
    off, a key in front, a gauge of NaN): never a clean bill without the count. The stop that
    follows drains in SGLang itself either way (sglang_stop)."""
    seen = {}

    def idle():
        seen["running"] = running = in_flight(worker)
        if running is None:
            return True  # nothing to wait on: unknown, said below
        return running == 0 or f"{running:g} requests running"

    try:
        _wait(f"{worker} drained", idle, drain_timeout)
    except RouterError as exc:
        return {"drained": False, "drain_reason": str(exc)}
    if seen.get("running") is None:
        return {"drained": None,
                "drain_reason": f"unknown: {worker}/metrics gives no running count (no "
                                "--enable-metrics, a key in front of it, or not a number)"}
    return {"drained": True, "drain_reason": "no request running"}


def ready(router, expected, api_key, timeout):
    def check():
        listed = {w["url"]: w["healthy"] for w in workers(router, api_key)}
        missing = [u for u in expected if not listed.get(u)]
        return not missing or f"not healthy or not listed: {', '.join(missing)}"
    _wait("the router's workers", check, timeout)
    return {"changed": False}


def main():
    module = AnsibleModule(
        argument_spec={
            "router_url": {"type": "str", "required": True},
            "worker": {"type": "str"},
            "workers": {"type": "list", "elements": "str", "default": []},
            "state": {"type": "str", "choices": ["present", "absent", "ready"], "default": "ready"},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "timeout": {"type": "float", "default": 120.0},
            "drain_timeout": {"type": "float", "default": 120.0},
        },
        required_if=[("state", "present", ["worker"]), ("state", "absent", ["worker"])],
        supports_check_mode=True,
    )
    p = module.params
    for name in ("timeout", "drain_timeout"):
        # nan or inf would make every wait endless (a deadline never passed).
        if not (math.isfinite(p[name]) and 0 <= p[name] <= 86400):
            module.fail_json(msg=f"{name} must be a number of seconds from 0 to 86400, "
                                 f"not {p[name]!r}")
    router = p["router_url"].rstrip("/")
    worker = (p["worker"] or "").rstrip("/")
    try:
        if p["state"] == "present":
            result = present(router, worker, p["api_key"], p["timeout"], module.check_mode)
        elif p["state"] == "absent":
            result = absent(router, worker, p["api_key"], p["timeout"], p["drain_timeout"],
                            module.check_mode)
        else:
            result = ready(router, [u.rstrip("/") for u in p["workers"]], p["api_key"],
                           p["timeout"])
        result["workers"] = [{"url": w["url"], "healthy": w["healthy"]}
                             for w in workers(router, p["api_key"])]
    except (HttpError, RouterError) as exc:
        module.fail_json(msg=excerpt(str(exc), [p["api_key"]], 1000))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
