"""Deadlines, auth refusals, broken bodies and smoke counting against hostile servers.

Each case failed on the code before issue 13 (noted per test): per-socket-operation
timeouts, polling on 401, worker threads killed by odd chunks, tracebacks on bad bodies.
"""

import json
import time

import pytest
from support import load_module
from support.hostile import endless_stream, hang, raw, reply, serve, stream, trickle

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_bench, sglang_http

ready = load_module("sglang_ready")
KEY = "k3y-0123456789abcdef-SECRET"


def ready_params(url, **kw):
    base = {"url": url, "unit": "", "timeout": 1, "poll": 0.05, "model": "m",
            "prompt": "p", "max_tokens": 4, "api_key": KEY}
    return {**base, **kw}


def elapsed(fn, *args, **kw):
    start = time.monotonic()
    try:
        return fn(*args, **kw), time.monotonic() - start
    except Exception as exc:  # noqa: BLE001 - the test looks at the exception and the time
        return exc, time.monotonic() - start


@pytest.mark.parametrize("answer", [hang, trickle(0.2)], ids=["hang", "trickle"])
def test_request_deadline_is_wall_clock(answer):
    """Before: a timeout per socket operation; a byte every 0.2 s kept it alive for ever."""
    with serve(answer) as url:
        exc, took = elapsed(sglang_http.request, url + "/health", timeout=0.5)
    assert isinstance(exc, sglang_http.DeadlineError), exc
    assert "no complete answer within 0.5 s" in str(exc)
    assert took < 2


@pytest.mark.parametrize("answer", [hang, trickle(0.2)], ids=["hang", "trickle"])
def test_ready_returns_at_its_deadline(answer):
    """Before: timeout=5 returned after 121 s (hanging completion), 41 s (trickling /health)."""
    with serve(answer) as url:
        exc, took = elapsed(ready.wait_ready, ready_params(url, timeout=1))
    assert isinstance(exc, ready.Failed) and "not ready after 1 s" in str(exc)
    assert took < 3


@pytest.mark.parametrize("status", [401, 403])
def test_ready_fails_at_once_on_a_refused_key(status):
    """Before: a 401 on /v1/models was 'not ready' and polled until the deadline (1800 s)."""
    with serve(reply(status, b'{"error": "bad key ' + KEY.encode() + b'"}')) as url:
        exc, took = elapsed(ready.wait_ready, ready_params(url, timeout=30, model=""))
    assert isinstance(exc, ready.Failed) and f"HTTP {status}" in str(exc) and "API key" in str(exc)
    assert took < 2
    assert KEY[:8] not in str(exc)


def test_smoke_request_deadline_holds_on_an_endless_stream():
    """Before: timeout=3 waited 25 s per request on an endless stream."""
    with serve(endless_stream()) as url:
        out, took = elapsed(sglang_bench.stream_one, url + "/v1/completions", {}, None, 0.5)
    assert out["ok"] is False and "no complete answer within 0.5 s" in out["error"]
    assert took < 2


@pytest.mark.parametrize("events, error", [
    ([b"[1, 2]"], "not a JSON object"),
    ([b"null"], "not a JSON object"),
    ([b"{garbage"], "not a JSON object"),
    ([b'{"choices": [{"text": "x"}], "usage": [1]}'], "no usage"),
    ([b'{"choices": [{"text": "x"}], "usage": {"completion_tokens": 0}}'], "positive integer"),
    ([b'{"choices": [{"text": "x"}], "usage": {"completion_tokens": -3}}'], "positive integer"),
    ([b'{"choices": [{"text": "x"}], "usage": {"completion_tokens": "abc"}}'], "positive integer"),
    ([b'{"choices": [{"text": "x"}], "usage": {"completion_tokens": 2.5}}'], "positive integer"),
    ([b'{"choices": "x"}', b'{"choices": [null, {"delta": 5}]}'], "no token"),
], ids=["list", "null", "garbage", "usage-list", "zero", "negative", "abc", "float", "choices"])
def test_odd_chunks_are_failed_requests_and_all_are_counted(events, error):
    """Before: lists/null killed the worker thread (ok + failed < sent) and 0 tokens counted ok."""
    with serve(stream(*events)) as url:
        level = sglang_bench.run_level(url + "/v1/completions", {}, 2, 5, None, 5)
    assert level["requests_ok"] == 0
    assert level["requests_failed"] == level["requests_sent"] == 5
    assert any(error in e for e in level["errors"]), level["errors"]


def test_a_good_stream_counts_ok():
    good = b'{"choices": [{"text": "x"}], "usage": {"completion_tokens": 3}}'
    with serve(stream(good)) as url:
        level = sglang_bench.run_level(url + "/v1/completions", {}, 2, 4, None, 5)
    assert level["requests_ok"] == 4 and level["completion_tokens"] == 12


@pytest.mark.parametrize("data", [
    b"HTTP/1.1 abc OK\r\n\r\n",
    b"garbage\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\nshort",
    b"",
], ids=["status-abc", "no-status-line", "incomplete", "closed"])
def test_broken_answers_are_http_errors(data):
    """Before: http.client exceptions other than the ones caught escaped as tracebacks."""
    with serve(raw(data)) as url:
        with pytest.raises(sglang_http.HttpError):
            sglang_http.request(url + "/x", timeout=2)


def test_error_text_is_redacted_before_it_is_cut():
    """Before: text cut at 200 characters after masking showed the head of an echoed key."""
    echo = b"x" * 190 + KEY.encode()
    with serve(reply(500, echo)) as url:
        out = sglang_bench.stream_one(url + "/v1/completions", {}, KEY, 5)
    assert out["ok"] is False
    for i in range(len(KEY) - 7):
        assert KEY[i:i + 8] not in out["error"]


def test_smoke_stops_on_a_refused_key():
    with serve(reply(401, b"no")) as url:
        with pytest.raises(sglang_http.AuthError, match="HTTP 401"):
            sglang_bench.run_level(url + "/v1/completions", {}, 2, 8, KEY, 5)


def test_bad_urls_are_refused_with_a_message():
    for url in ("ftp://x/", "http://", "http://host:99999/", "not a url"):
        with pytest.raises(sglang_http.HttpError, match="(?i)URL|port"):
            sglang_http.request(url, timeout=1)


def test_json_body_roundtrip():
    with serve(reply(200, json.dumps({"a": 1}).encode())) as url:
        assert sglang_http.request(url + "/x", timeout=2) == (200, {"a": 1})
