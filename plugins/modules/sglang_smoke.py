#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Throughput smoke test of an SGLang server: TTFT, TPOT, tok/s, MTP accept length."""

DOCUMENTATION = r"""
module: sglang_smoke
short_description: Measure TTFT, TPOT, tokens/s and accept length of a running SGLang server
description:
  - Streams requests at each concurrency level and computes the figures as sglang.bench_serving
    defines them; tokens come from the server's C(usage), never from counting chunks (with MTP
    one chunk carries several tokens).
  - Reads the speculative accept length from C(/server_info) and the CUDA graph pass counters
    from C(/metrics) before and after the run (proof that graphs replayed), when exposed.
  - Standard library only; changes nothing on the server.
extends_documentation_fragment:
  - sglang.deploy.sglang.server
options:
  model:
    description: Model name; default the first of /v1/models.
    type: str
    default: ''
  concurrency:
    description: Concurrency levels.
    type: list
    elements: int
    default:
    - 1
    - 4
  requests_per_level:
    description: Requests measured per level.
    type: int
    default: 8
  max_tokens:
    description: Tokens per request.
    type: int
    default: 256
  prompt:
    description: Prompt.
    type: str
    default: Write a long story about a lighthouse keeper.
  warmup:
    description: Requests sent first and discarded.
    type: int
    default: 1
  ignore_eos:
    description: Generate max_tokens even past end of sequence.
    type: bool
    default: true
  chat:
    description: Use /v1/chat/completions (else /v1/completions).
    type: bool
    default: true
  chat_template_kwargs:
    description: Passed with chat requests (thinking off for Qwen3.6).
    type: dict
    default:
      enable_thinking: false
  timeout:
    description: Seconds per request (the /server_info and /metrics reads included).
    type: float
    default: 300
notes:
  - Not a builtin because there is no equivalent; it streams concurrent completions and
    measures TTFT, TPOT, tokens/s and the accept length as sglang.bench_serving defines
    them.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Measure the server at concurrency 1 and 4
  sglang.deploy.sglang_smoke:
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_api_key }}"
    concurrency: [1, 4]
    max_tokens: 256
  register: smoke
"""

RETURN = r"""
levels:
  description: One entry per concurrency level.
  type: list
  returned: always
accept_length:
  description: Speculative accept length the server reports (null without speculation).
  type: float
  returned: always
accept_length_before:
  description: The same before the run (cumulative since start).
  type: float
  returned: always
graph_passes:
  description: 'cuda_graph_passes_total by mode: before, after, delta.'
  type: dict
  returned: always
  contains:
    before:
      description: cuda_graph_passes_total per mode before the run.
      type: dict
      returned: always
    after:
      description: The same after the run.
      type: dict
      returned: always
    delta:
      description: after minus before, per mode.
      type: dict
      returned: always
model:
  description: Model measured.
  type: str
  returned: always
"""

import math
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_bench import graph_passes, parse_metrics, run_level, served_model, stream_one
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_http import HttpError, request


class SmokeError(Exception):
    """Options that cannot measure anything."""


def _accept_length(url, api_key, timeout):
    """The speculative accept length /server_info reports, each read within `timeout`."""
    try:
        status, info = request(url + "/server_info", api_key=api_key, timeout=timeout)
        if status != 200:
            status, info = request(url + "/get_server_info", api_key=api_key, timeout=timeout)
    except HttpError:
        return None
    if status != 200 or not isinstance(info, dict):
        return None
    states = info.get("internal_states")
    values = [s.get("avg_spec_accept_length") for s in states if isinstance(s, dict)] \
        if isinstance(states, list) else []
    values = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
              and math.isfinite(v)]
    return round(sum(values) / len(values), 3) if values else None


def _passes(url, api_key, timeout):
    """CUDA graph pass counters from /metrics, read within `timeout`."""
    try:
        status, text = request(url + "/metrics", api_key=api_key, timeout=timeout)
    except HttpError:
        return {}
    return graph_passes(parse_metrics(text)) if status == 200 and isinstance(text, str) else {}


def _check_options(p):
    bad = [f"{name} must be at least 1" for name, values in
           (("concurrency", p["concurrency"]), ("requests_per_level", [p["requests_per_level"]]),
            ("max_tokens", [p["max_tokens"]])) if any(v < 1 for v in values)]
    if p["warmup"] < 0 or not 0 < p["timeout"] <= 86400:
        bad.append("warmup must be 0 or more and timeout more than 0 seconds, at most a day")
    if bad:
        raise SmokeError("; ".join(bad))


def _request(url, model, p):
    """(endpoint, body) of one streamed request: chat or plain completion."""
    body = {"model": model, "max_tokens": p["max_tokens"], "stream": True, "temperature": 0,
            "stream_options": {"include_usage": True}, "ignore_eos": p["ignore_eos"]}
    if not p["chat"]:
        return url + "/v1/completions", dict(body, prompt=p["prompt"])
    body["messages"] = [{"role": "user", "content": p["prompt"]}]
    if p["chat_template_kwargs"]:
        body["chat_template_kwargs"] = p["chat_template_kwargs"]
    return url + "/v1/chat/completions", body


def run(p):
    url = p["url"].rstrip("/")
    _check_options(p)
    model = p["model"] or served_model(url, p["api_key"], p["timeout"])
    endpoint, body = _request(url, model, p)

    for _unused in range(p["warmup"]):
        stream_one(endpoint, body, p["api_key"], p["timeout"])
    # "Seconds per request" holds for the side reads too: a trickling /metrics is bounded.
    accept_before = _accept_length(url, p["api_key"], p["timeout"])
    passes_before = _passes(url, p["api_key"], p["timeout"])
    started = time.monotonic()
    levels = [run_level(endpoint, body, c, p["requests_per_level"], p["api_key"], p["timeout"])
              for c in p["concurrency"]]
    passes_after = _passes(url, p["api_key"], p["timeout"])
    return {
        "model": model,
        "levels": levels,
        "accept_length": _accept_length(url, p["api_key"], p["timeout"]),
        "accept_length_before": accept_before,
        "graph_passes": {
            "before": passes_before,
            "after": passes_after,
            "delta": {k: passes_after.get(k, 0) - passes_before.get(k, 0) for k in passes_after},
        },
        "elapsed_s": round(time.monotonic() - started, 2),
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "model": {"type": "str", "default": ""},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "concurrency": {"type": "list", "elements": "int", "default": [1, 4]},
            "requests_per_level": {"type": "int", "default": 8},
            "max_tokens": {"type": "int", "default": 256, "no_log": False},
            "prompt": {"type": "str",
                       "default": "Write a long story about a lighthouse keeper."},
            "warmup": {"type": "int", "default": 1},
            "ignore_eos": {"type": "bool", "default": True},
            "chat": {"type": "bool", "default": True},
            "chat_template_kwargs": {"type": "dict", "default": {"enable_thinking": False}},
            "timeout": {"type": "float", "default": 300},
        },
        supports_check_mode=True,
    )
    try:
        result = run(module.params)
    except HttpError as exc:
        module.fail_json(msg=f"smoke test could not reach the server: {exc}")
    except SmokeError as exc:
        module.fail_json(msg=f"smoke test options: {exc}")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
