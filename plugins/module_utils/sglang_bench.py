"""Streamed-generation measurements with sglang.bench_serving's definitions; stdlib only.

TTFT = time to the first non-empty streamed chunk. TPOT per request = (latency - TTFT) /
(output tokens - 1). Output tok/s = completion tokens of a level / its wall time. Tokens are
the server's `usage.completion_tokens`, never a count of chunks: with MTP one chunk carries
several tokens.
"""

import json
import statistics
import threading
import time

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_http import AuthError, HttpError, exchange, request
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_redact import excerpt


def percentile(values, pct):
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * pct / 100.0
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _events(resp, check):
    """The payload of each `data:` line of a server-sent event stream, up to [DONE] or its end."""
    while True:
        check()
        line = resp.readline(1024 * 1024)
        if not line:
            return
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        yield data


def _outcome(ttft, tokens, latency, api_key):
    """The result of a stream that ended: a failure unless it streamed text and usage."""
    if ttft is None:
        return {"ok": False, "error": "no token was streamed"}
    if tokens is None:
        return {"ok": False, "error": "the stream carried no usage (completion_tokens)"}
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
        return {"ok": False, "error": f"usage.completion_tokens {excerpt(tokens, [api_key], 40)} "
                                      "is not a positive integer"}
    return {"ok": True, "ttft_s": ttft, "latency_s": latency, "tokens": tokens}


def stream_one(url, body, api_key=None, timeout=300.0):
    """POST one streamed request; return {ok, ttft_s, latency_s, tokens, error}.

    `timeout` bounds the whole request (an endless or trickling stream fails at it). Whatever
    the server sends, the answer is a result, never an exception: a chunk that is not a JSON
    object, or a completion_tokens that is not a positive integer, is a failed request.
    """
    headers = {"Accept": "text/event-stream"}
    start = time.perf_counter()
    ttft = None
    tokens = None
    try:
        with exchange(url, body, api_key, timeout, "POST", headers) as (resp, check):
            if resp.status != 200:
                return {"ok": False, "error": f"HTTP {resp.status}: "
                                              f"{excerpt(resp.read(4096), [api_key])}"}
            for data in _events(resp, check):
                try:
                    chunk = json.loads(data)
                except ValueError:
                    chunk = None
                if not isinstance(chunk, dict):
                    return {"ok": False, "error": f"a stream chunk is not a JSON object: "
                                                  f"{excerpt(data, [api_key], 80)}"}
                if ttft is None and _has_text(chunk):
                    ttft = time.perf_counter() - start
                usage = chunk.get("usage")
                if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                    tokens = usage["completion_tokens"]
            latency = time.perf_counter() - start
    except AuthError:
        raise  # a wrong key fails every request: the caller stops
    except HttpError as exc:
        return {"ok": False, "error": str(exc)}
    return _outcome(ttft, tokens, latency, api_key)


def _has_text(chunk):
    choices = chunk.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        if choice.get("text") or delta.get("content") or delta.get("reasoning_content"):
            return True
    return False


def served_model(url, api_key=None, timeout=60.0):
    """The first model the server's /v1/models lists (when no model name is given)."""
    status, body = request(url + "/v1/models", api_key=api_key, timeout=timeout)
    data = body.get("data") if isinstance(body, dict) else None
    if status != 200 or not isinstance(data, list) or not data \
            or not isinstance(data[0], dict) or not isinstance(data[0].get("id"), str):
        raise HttpError(f"/v1/models answered {status}: {excerpt(body, [api_key])}; "
                        "set the model name")
    return data[0]["id"]


def run_level(url, body, concurrency, requests, api_key=None, timeout=300.0):
    """`requests` streamed requests, `concurrency` at a time. Returns the level's figures."""
    results, wall = run_requests(url, [body] * requests, concurrency, api_key, timeout)
    return summarize(results, concurrency, wall)


def run_requests(url, bodies, concurrency, api_key=None, timeout=300.0):
    """Each of `bodies` streamed once, `concurrency` at a time: (results, wall seconds)."""
    results = []
    refused = []
    lock = threading.Lock()
    pending = list(reversed(bodies))

    def worker():
        while True:
            with lock:
                if not pending:
                    return
                body = pending.pop()
            try:
                result = stream_one(url, body, api_key, timeout)
            except AuthError as exc:
                result = {"ok": False, "error": str(exc)}
                with lock:
                    refused.append(exc)
                    pending.clear()
            except Exception as exc:  # noqa: BLE001 - a sent request is always counted
                result = {"ok": False, "error": f"{type(exc).__name__}: {excerpt(str(exc), [api_key])}"}
            with lock:
                results.append(result)

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _unused in range(max(1, concurrency))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    if refused:
        raise refused[0]
    return results, wall


def summarize(results, concurrency, wall):
    ok = [r for r in results if r.get("ok")]
    ttfts = [r["ttft_s"] * 1000 for r in ok]
    tpots = [(r["latency_s"] - r["ttft_s"]) * 1000 / (r["tokens"] - 1) for r in ok if r["tokens"] > 1]
    tokens = sum(r["tokens"] for r in ok)
    mean_tpot = statistics.mean(tpots) if tpots else None
    return {
        "concurrency": concurrency,
        "requests_ok": len(ok),
        "requests_failed": len(results) - len(ok),
        "requests_sent": len(results),
        "errors": sorted({str(r.get("error")) for r in results if not r.get("ok")})[:5],
        "ttft_ms_p50": _round(percentile(ttfts, 50)),
        "ttft_ms_p99": _round(percentile(ttfts, 99)),
        "tpot_ms_p50": _round(percentile(tpots, 50)),
        "tpot_ms_p99": _round(percentile(tpots, 99)),
        "decode_tok_s_per_user": _round(1000.0 / mean_tpot) if mean_tpot else None,
        "output_tok_s": _round(tokens / wall) if wall > 0 else None,
        "completion_tokens": tokens,
        "wall_s": _round(wall),
    }


def _round(value, digits=2):
    return None if value is None else round(value, digits)


def parse_metrics(text):
    """Prometheus text -> {name{labels}: value} for sglang:* samples."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("sglang:"):
            continue
        try:
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
        except ValueError:
            continue
    return out


def graph_passes(metrics):
    """sglang:cuda_graph_passes_total by mode, summed over other labels."""
    passes = {}
    for key, value in metrics.items():
        if key.startswith("sglang:cuda_graph_passes_total{") and 'mode="' in key:
            mode = key.split('mode="', 1)[1].split('"', 1)[0]
            passes[mode] = passes.get(mode, 0.0) + value
    return passes
