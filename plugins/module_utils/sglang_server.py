"""What a running SGLang server resolved (/server_info) and loaded (/model_info), secrets removed,
and how many requests it runs (/metrics).

Used by `sglang_server_info`, and by `sglang_ready`, which reads both in the call that proves
the server serves (one round trip fewer for every deploy); the drains (`sglang_router_worker`,
`sglang_stop`) wait on the requests in flight.
"""

import math

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_http import AuthError, HttpError, request
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_redact import redact

SERVER_INFO_PATHS = ("/server_info", "/get_server_info")  # 0.5.6+, then older servers
MODEL_INFO_PATHS = ("/model_info", "/get_model_info")


def first_answer(url, paths, api_key, timeout):
    """(path, JSON body) of the first path that answers 200 with an object."""
    tried = []
    for path in paths:
        try:
            status, body = request(url + path, api_key=api_key, timeout=timeout)
        except AuthError as exc:
            # The key is wrong or missing: no older path will take it either.
            raise HttpError(f"{exc}: set sglang_api_key to the server's key") from None
        if status == 200 and isinstance(body, dict):
            return path, body
        tried.append(f"{path}: HTTP {status}")
    raise HttpError(f"{url}: no answer ({'; '.join(tried)})")


def read(url, api_key="", admin_api_key="", timeout=30.0):
    """{server_info, model_info, endpoints}: every field named like a secret and every
    occurrence of the given keys replaced by <redacted>. Raises HttpError."""
    url = url.rstrip("/")
    secrets = [api_key, admin_api_key]
    server_path, server = first_answer(url, SERVER_INFO_PATHS, api_key, timeout)
    model_path, model = first_answer(url, MODEL_INFO_PATHS, api_key, timeout)
    return {"server_info": redact(server, secrets), "model_info": redact(model, secrets),
            "endpoints": [server_path, model_path]}


# SGLang's gauges of requests it holds (sglang/srt/metrics/collector.py); older servers wrote
# them with an underscore.
RUNNING_GAUGES = ("sglang:num_running_reqs", "sglang_num_running_reqs")
QUEUED_GAUGES = ("sglang:num_queue_reqs", "sglang_num_queue_reqs")


def requests_in_flight(url, gauges=RUNNING_GAUGES, timeout=10):
    """Sum of the server's `gauges` (running requests by default; its /metrics needs no key),
    or None when they cannot be read: no --enable-metrics, a key in front, a gauge of nan.
    A server that does not answer raises HttpError (a caller waiting on a drain retries)."""
    try:
        status, text = request(url + "/metrics", timeout=timeout)
    except AuthError:
        return None
    if status != 200 or not isinstance(text, str):
        return None
    total = None
    for line in text.splitlines():
        if line.startswith(gauges):
            try:
                value = float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
            if not math.isfinite(value) or value < 0:
                return None  # a gauge of nan or inf: the drain cannot be watched
            total = (total or 0) + value
    return total
