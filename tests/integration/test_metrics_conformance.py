"""The stand-in's /metrics against SGLang's own collectors (sglang/srt/observability/
metrics_collector.py of the full 0.5.23 install, scripts/build-sglang-venv.sh): the same events
fed to SGLang's TokenizerMetricsCollector and SchedulerMetricsCollector and to the stand-in's
copy of their series (tests/standin/sglang_standin/metrics.py), the exposition texts compared
series by series (name, label set, label text such as le="4.0", value) after each event, so a
counter that grows at another moment than SGLang's fails too. The rules and the alert tests
read this text (plugins/filter/sglang_monitoring.py, tests/support/alert_tests.py).

SGLang's HTTP metrics (srt/observability/http_request_metrics.py) the same way, and once more
end to end: SGLang's own middlewares (its HTTP metrics, its API key) on a FastAPI app served by
uvicorn, and the stand-in's server (with SGLang's collectors and with the copy), given the same
requests (a probe, one the API key refuses, a stream scraped while it streams, a 503, a path no
route serves), their `sglang:http_*` series compared at each scrape."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.wheels import full_venv

STANDIN = Path(__file__).resolve().parents[1] / "standin"

# One request's life as SGLang's tokenizer manager reports it (collect_metrics), and the
# scheduler's, each step followed by a scrape: prefill pass, first token (2.5 s: between
# buckets 2 and 4), three streamed chunks (the third slow), the finish, a second request that
# does not stream, an abort; gauges at each report.
FEED = r"""
import json, sys
from sglang_standin import metrics
from sglang_standin.engine import Engine, Knobs
collectors = metrics.create("m", sys.argv[1])
engine = Engine({"model-path": "/nonexistent", "served-model-name": "m",
                 "speculative-algorithm": "NEXTN"}, Knobs(accept_length=2.75), collectors)
texts = {}
def scrape(step):
    texts[step] = engine.metrics()
scrape("start")
engine.admit(40, "a b c")
scrape("admitted")
engine.first_token(2.5, stream=True)
scrape("first token")
for interval, tokens in ((0.06, 3), (0.045, 3), (1.5, 2)):
    engine.streamed(interval, tokens)
    scrape(f"chunk {interval}")
engine.finished(40, 9, 0, 4.2, 2.5, True, 2.75)
scrape("finished")
engine.admit(12, "a b d")
engine.first_token(0.3, stream=False)
engine.finished(12, 5, 2, 0.9, 0.3, False)
scrape("not streamed")
engine.collectors.tokenizer.observe_one_aborted_request(engine.collectors.labels)
scrape("aborted")
http = collectors.http
http.begin("/v1/chat/completions", "POST", "key-1")
scrape("http request in")
http.answered("/v1/chat/completions", "POST", 200)
http.end("/v1/chat/completions", "POST", "key-1")
scrape("http answered")
http.begin("/generate", "POST")
http.answered("/generate", "POST", 503)
http.end("/generate", "POST")
http.begin("/metrics", "GET")
scrape("http 503 and a scrape")
print(json.dumps({"source": collectors.source, "texts": texts}))
"""


def _expose(venv, choice):
    env = dict(os.environ, PYTHONPATH=str(STANDIN), HF_HUB_OFFLINE="1",
               PYTHONWARNINGS="ignore")
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    done = subprocess.run([str(venv / "bin" / "python"), "-c", FEED, choice], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["source"] == choice
    return out["texts"]


def _series(text):
    """{(name, sorted label pairs): value} of an exposition text, label values as written."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture(scope="module")
def texts():
    venv = full_venv("0.5.23")
    return _expose(venv, "sglang"), _expose(venv, "prometheus_client")


def test_every_series_the_stand_in_writes_is_sglangs_after_every_event(texts):
    sglang, copy = texts
    assert list(sglang) == list(copy)
    compared = 0
    for step in sglang:
        theirs, ours = _series(sglang[step]), _series(copy[step])
        missing = sorted(set(ours) - set(theirs))
        assert not missing, f"after {step}: series SGLang does not write: {missing[:5]}"
        differ = {k: (ours[k], theirs[k]) for k in ours if ours[k] != pytest.approx(theirs[k])}
        assert not differ, f"after {step}: (stand-in, SGLang) {differ}"
        compared += len(ours)
    print(f"{compared} series compared over {len(sglang)} scrapes, each equal to SGLang's")


# What the deployment reads (the rules, the dashboard, sglang_stop, the drain, the smoke's
# graph check): each in both texts once a request has finished.
READ = ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
        "sglang:spec_accept_length", "sglang:gen_throughput", "sglang:cache_hit_rate",
        "sglang:generation_tokens_total", "sglang:prompt_tokens_total",
        "sglang:num_requests_total", "sglang:num_aborted_requests_total",
        "sglang:cuda_graph_passes_total", "sglang:time_to_first_token_seconds_bucket",
        "sglang:inter_token_latency_seconds_bucket", "sglang:inter_token_latency_seconds_sum",
        "sglang:inter_token_latency_seconds_count", "sglang:http_requests_total",
        "sglang:http_responses_total", "sglang:http_requests_active")


def test_the_series_the_deployment_reads_are_in_both_with_sglangs_label_text(texts):
    sglang, copy = texts
    for text in (sglang["http 503 and a scrape"], copy["http 503 and a scrape"]):
        names = {name for name, _labels in _series(text)}
        assert not set(READ) - names, sorted(set(READ) - names)
        # prometheus_client writes a bound as a float: 4.0, never 4.
        assert 'le="4.0"' in text and 'le="4"' not in text


def test_generation_tokens_grow_at_the_finish_and_the_inter_token_count_per_chunk(texts):
    """SGLang's moments, read from SGLang's own text: a long answer grows no token counter
    until it ends; only the inter-token histogram (and the decode passes) grow while it
    streams. The rules read progress and speed from those."""
    sglang, _copy = texts

    def total(step, name, **match):
        return sum(v for (n, labels), v in _series(sglang[step]).items()
                   if n == name and all(dict(labels).get(k) == x for k, x in match.items()))

    streaming = ["first token", "chunk 0.06", "chunk 0.045", "chunk 1.5"]
    assert {total(s, "sglang:generation_tokens_total") for s in streaming} == {0}
    assert total("finished", "sglang:generation_tokens_total") == 9
    assert [total(s, "sglang:inter_token_latency_seconds_count") for s in streaming] == \
        [0, 3, 6, 8]
    assert [total(s, "sglang:cuda_graph_passes_total", mode="decode_cuda_graph")
            for s in streaming] == [0, 1, 2, 3]
    # A request that does not stream: its first token is timed, no inter-token gap.
    assert total("not streamed", "sglang:inter_token_latency_seconds_count") == 8
    assert total("not streamed", "sglang:time_to_first_token_seconds_count",
                 is_streaming="false") == 1


def test_the_http_series_count_a_request_when_it_comes_and_its_answer_when_it_ends(texts):
    """SGLang's own _HttpRequestMetrics: a request is counted and active as it comes in, its
    answer (with its status) once it ends; the rules' 5xx ratio reads the answers."""
    sglang, _copy = texts

    def value(step, name, **match):
        return sum(v for (n, labels), v in _series(sglang[step]).items()
                   if n == name and all(dict(labels).get(k) == x for k, x in match.items()))
    chat = {"endpoint": "/v1/chat/completions", "method": "POST"}
    assert value("http request in", "sglang:http_requests_total", **chat) == 1
    assert value("http request in", "sglang:http_requests_active", **chat) == 1
    assert value("http request in", "sglang:http_responses_total", **chat) == 0
    assert value("http answered", "sglang:http_responses_total", status_code="200", **chat) == 1
    assert value("http answered", "sglang:http_requests_active", **chat) == 0
    assert value("http 503 and a scrape", "sglang:http_responses_total", endpoint="/generate",
                 status_code="503") == 1
    assert value("http 503 and a scrape", "sglang:http_requests_active", endpoint="/metrics") == 1


# SGLang's middlewares, as its http_server.py stacks them: the HTTP metrics' middleware at
# import, the /metrics mount and init_http_request_metrics() in the lifespan (with
# --enable-metrics), the API key's middleware at launch (outermost: a refused request never
# reaches the metrics). The routes answer as the stand-in's do.
SGLANG_APP = r"""
import os, sys, tempfile, time
os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="sglang-app-prom-")
import re
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CollectorRegistry, make_asgi_app, multiprocess
from starlette.routing import Mount
from sglang.srt.observability.http_request_metrics import (
    add_http_request_metrics_middleware, init_http_request_metrics)
from sglang.srt.utils.auth import add_api_key_middleware

app = FastAPI()
add_http_request_metrics_middleware(app)
# As the stand-in's knob: a scheduler that no longer answers, /health still 200 (sglang#6624).
state = {"broken": os.environ.get("SGLANG_STANDIN_BROKEN_SCHEDULER") == "1"}

@app.get("/health")
async def health():
    return Response(status_code=200)

@app.post("/v1/completions")
async def completions(request: Request):
    body = await request.json()
    if state["broken"]:
        return JSONResponse({"error": {"message": "scheduler is not responding"}},
                            status_code=503)
    async def chunks():
        import asyncio
        for _ in range(int(body.get("max_tokens", 4))):
            await asyncio.sleep(0.25)
            yield b'data: {"choices": [{"text": "tok "}]}\n\n'
        yield b"data: [DONE]\n\n"
    return StreamingResponse(chunks(), media_type="text/event-stream")

registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
route = Mount("/metrics", make_asgi_app(registry=registry))
route.path_regex = re.compile("^/metrics(?P<path>.*)$")
app.routes.append(route)
init_http_request_metrics()
add_api_key_middleware(app, api_key="k", admin_api_key=None)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""

# The same requests to either server (serving, or with its scheduler broken); the /metrics text
# after each step.
CLIENT = r"""
import json, sys, time, urllib.error, urllib.request
base, broken = sys.argv[1], sys.argv[2] == "broken"
def call(method, path, body=None, key="k"):
    req = urllib.request.Request(base + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": "Bearer " + key} if key else {})})
    try:
        return urllib.request.urlopen(req, timeout=30)
    except urllib.error.HTTPError as exc:
        return exc
for _ in range(600):
    try:
        if call("GET", "/health").status == 200:
            break
    except OSError:
        time.sleep(0.1)
texts = {}
def scrape(step):
    texts[step] = call("GET", "/metrics").read().decode()
scrape("ready")
assert call("GET", "/health").status == 200
assert call("POST", "/v1/completions", {"prompt": "a"}, key="").status == 401
scrape("probe and a refused request")
if broken:
    assert call("POST", "/v1/completions", {"prompt": "a", "max_tokens": 2}).status == 503
    scrape("a 503")
else:
    stream = call("POST", "/v1/completions", {"prompt": "a", "max_tokens": 4, "stream": True})
    assert stream.readline().startswith(b"data: ")
    scrape("mid-stream")
    stream.read()
    time.sleep(0.3)
    scrape("streamed")
    assert call("GET", "/no-such-path").status == 404
    scrape("a 404")
print(json.dumps(texts))
"""


def _http_series(text):
    return {k: v for k, v in _series(text).items() if k[0].startswith("sglang:http_")}


def _serve_and_ask(venv, argv, env, port, mode):
    """The server `argv` runs (the venv's python) asked CLIENT's requests on `port` (`mode`:
    serving or broken): the /metrics text after each step."""
    server = subprocess.Popen([str(venv / "bin" / "python"), *argv], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        asked = subprocess.run([str(venv / "bin" / "python"), "-c", CLIENT,
                                f"http://127.0.0.1:{port}", mode], capture_output=True,
                               text=True, timeout=300)
        assert asked.returncode == 0, asked.stderr[-3000:]
        return json.loads(asked.stdout.strip().splitlines()[-1])
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def _free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("mode", ["serving", "broken"])
def test_the_stand_ins_server_counts_http_as_sglangs_middleware_does(mode):
    venv = full_venv("0.5.23")
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore",
               SGLANG_STANDIN_BROKEN_SCHEDULER="1" if mode == "broken" else "0")
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    port = _free_port()
    theirs = _serve_and_ask(venv, ["-c", SGLANG_APP, str(port)], env, port, mode)
    standin = dict(env, PYTHONPATH=str(STANDIN), SGLANG_STANDIN_TOK_S="4",
                   SGLANG_STANDIN_TOKENS_PER_CHUNK="1", SGLANG_STANDIN_TTFT_MS="50")
    for choice in ("sglang", "prometheus_client"):
        port = _free_port()
        ours = _serve_and_ask(venv, ["-m", "sglang_standin", "--model-path", "/nonexistent",
                                     "--served-model-name", "m", "--host", "127.0.0.1",
                                     "--port", str(port), "--enable-metrics", "--api-key", "k"],
                              dict(standin, SGLANG_STANDIN_METRICS=choice), port, mode)
        assert list(ours) == list(theirs)
        for step in theirs:
            assert _http_series(ours[step]) == _http_series(theirs[step]), (choice, step)
    stream = (("endpoint", "/v1/completions"), ("method", "POST"))

    def answers(step, status):
        return _http_series(theirs[step]).get(
            ("sglang:http_responses_total", tuple(sorted((*stream, ("status_code", status))))))
    # The refused request never reached the metrics.
    assert ("sglang:http_requests_total", stream) not in \
        _http_series(theirs["probe and a refused request"])
    if mode == "broken":
        assert answers("a 503", "503") == 1
        return
    # A stream is active, its answer not counted, until its last chunk.
    assert _http_series(theirs["mid-stream"])[("sglang:http_requests_active", stream)] == 1
    assert answers("mid-stream", "200") is None and answers("streamed", "200") == 1
    assert _http_series(theirs["a 404"])[
        ("sglang:http_responses_total", (("endpoint", "/no-such-path"), ("method", "GET"),
                                         ("status_code", "404")))] == 1
