"""The stand-in must be exact where benchmarks measure it, and shaped like real SGLang."""

import json
import re
import signal
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from sglang_standin import args as argmod
from sglang_standin.engine import Engine, Knobs, PrefixCache


def test_config_file_and_cli_merge_with_cli_winning(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model-path: /m\ntp_size: 2\nenable-metrics: true\n")
    args = argmod.load_args(["--config", str(cfg), "--tp-size", "4", "--disable-cuda-graph"])
    assert args == {"model-path": "/m", "tp-size": "4", "enable-metrics": True,
                    "disable-cuda-graph": True}


def test_config_equals_form_is_refused_like_sglang_would_ignore_it():
    with pytest.raises(argmod.ArgsError, match="--config PATH"):
        argmod.parse_argv(["--config=/x.yaml"])


def test_model_path_is_required():
    with pytest.raises(argmod.ArgsError, match="model-path"):
        argmod.load_args(["--port", "1"])


@pytest.mark.parametrize("chunk", [1, 3, 4])
def test_schedule_gives_exact_ttft_and_tpot(chunk):
    engine = Engine({"model-path": "/m"}, Knobs(tok_s=50, ttft_ms=300, tokens_per_chunk=chunk))
    events = list(engine.schedule(256))
    assert sum(n for _, n in events) == 256
    assert events[0] == (0.3, 1)
    last = events[-1][0]
    # bench_serving: TPOT = (latency - TTFT) / (output tokens - 1)
    assert (last - 0.3) / 255 == pytest.approx(1 / 50)
    assert all(n == chunk for _, n in events[1:-1])


def test_server_info_new_and_legacy_shapes():
    args = {"model-path": "/m", "tp-size": 2, "speculative-algorithm": "NEXTN",
            "speculative-num-steps": 3, "cuda-graph-max-bs-decode": 32}
    new = Engine(args, Knobs(shape="0.5.23")).server_info()
    assert new["cuda_graph_config"]["decode"] == {"backend": "full", "max_bs": 32}
    assert new["speculative_algorithm"] == "EAGLE"
    assert new["speculative_num_draft_tokens"] == 4
    assert "disable_cuda_graph" not in new
    # The tokenizer SGLang's benchmark is handed (the role reads it here): the model's unless set.
    assert new["tokenizer_path"] == "/m"
    assert Engine({**args, "tokenizer-path": "/t"}, Knobs()).server_info()["tokenizer_path"] == "/t"
    old = Engine({**args, "disable-piecewise-cuda-graph": True}, Knobs(shape="0.5.12"))
    info = old.server_info()
    assert info["disable_cuda_graph"] is False
    assert info["disable_piecewise_cuda_graph"] is True
    assert "cuda_graph_config" not in info


def test_resolved_knob_overrides_what_is_reported():
    knobs = Knobs.from_env({"SGLANG_STANDIN_RESOLVED": '{"tp_size": 1}',
                            "SGLANG_STANDIN_TOKENS_PER_CHUNK": "4"})
    assert knobs.accept_length == 4.0
    assert Engine({"model-path": "/m", "tp-size": 2}, knobs).server_info()["tp_size"] == 1


def test_http_stream_usage_and_metrics(standin):
    url, engine = standin(**{"speculative-algorithm": "NEXTN"})
    body = json.dumps({"prompt": "a b c", "max_tokens": 10, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as resp:
        events = [line[6:] for line in resp.read().decode().splitlines()
                  if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert text.split() == ["tok"] * 10
    assert chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 10,
                                   "total_tokens": 13}
    with urllib.request.urlopen(url + "/metrics") as resp:
        metrics = resp.read().decode()
    assert _value(metrics, "sglang:generation_tokens_total", is_streaming="true") == 10
    # 9 tokens after the first, 3 per chunk: three decode passes, one prefill
    assert _value(metrics, "sglang:cuda_graph_passes_total", mode="decode_cuda_graph") == 3
    assert _value(metrics, "sglang:cuda_graph_passes_total", mode="prefill_cuda_graph") == 1
    assert _value(metrics, "sglang:spec_accept_length") == 3.0


def test_the_performance_model_sets_the_speed_from_the_arguments():
    from sglang_standin import perf

    args = {"model-path": "/m", "speculative-algorithm": "NEXTN", "speculative-num-steps": 2,
            "speculative-num-draft-tokens": 3}
    knobs = Knobs.from_env({"SGLANG_STANDIN_PERF_MODEL": "1"})
    engine = Engine(args, knobs)
    assert knobs.tok_s == perf.tok_s_per_user(args, 1) > 80
    assert knobs.accept_length == perf.accept_length(args) == 2.575
    events = list(engine.schedule(64))
    assert sum(n for _, n in events) == 64
    # One user alone: the modelled TTFT, then tokens at the modelled speed.
    assert events[0][0] == perf.ttft_ms(0) / 1000.0
    assert (events[-1][0] - events[0][0]) == pytest.approx(63 / perf.tok_s_per_user(args, 0))


def test_sigterm_drains_like_sglang_health_503_requests_finish_then_exit(tmp_path):
    """SGLang 0.5.23 on SIGTERM (tokenizer_manager.py sigterm_handler/sigterm_watchdog):
    /health 503, the requests it holds finish, then it exits 0."""
    import os
    import subprocess
    import sys
    import threading
    import time
    import urllib.error

    from support import free_port
    port = free_port()
    env = dict(os.environ, SGLANG_STANDIN_TOK_S="20", SGLANG_STANDIN_TTFT_MS="50",
               PYTHONPATH=str(Path(__file__).resolve().parents[1] / "standin"))
    server = subprocess.Popen([sys.executable, "-m", "sglang_standin", "--model-path", "/m",
                               "--port", str(port)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        for line in server.stderr:  # waits on progress: the line that says it serves
            if "serving" in line:
                break
        url = f"http://127.0.0.1:{port}"
        answers = []

        def long_request():
            body = json.dumps({"prompt": "hi", "max_tokens": 40}).encode()
            req = urllib.request.Request(url + "/v1/completions", body,
                                         {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as resp:
                answers.append(json.loads(resp.read())["usage"]["completion_tokens"])

        client = threading.Thread(target=long_request)
        client.start()
        running = re.compile(r"^sglang:num_running_reqs\{[^}]*\} 1\.0$", re.M)
        while not running.search(urllib.request.urlopen(url + "/metrics").read().decode()):
            time.sleep(0.05)  # until the request is in flight (40 tokens at 20 tok/s: 2 s)
        server.send_signal(signal.SIGTERM)
        with pytest.raises(urllib.error.HTTPError) as health:
            while True:
                urllib.request.urlopen(url + "/health", timeout=5)
                time.sleep(0.05)
        assert health.value.code == 503
        client.join(timeout=60)
        assert answers == [40]  # finished, not cut
        assert server.wait(timeout=60) == 0
    finally:
        server.kill()
        server.wait()


def test_the_speed_knob_changes_while_serving_and_metrics_show_tok_s_per_user(standin):
    """POST /standin/knobs (stand-in only) slows a serving release; the inter-token histogram
    then shows it as SGLang's does: rate(count) / rate(sum) is tokens per second per stream."""
    url, _engine = standin(knobs=Knobs(ttft_ms=5, tok_s=400, tokens_per_chunk=2))

    def per_user_after(tokens, tok_s):
        """(tok/s per user the histogram shows, the fastest the knob allows). The stream keeps
        its schedule from the request's start, as a server whose first token came late still
        ends on time: a first chunk a loaded host sent late shortens the decode by that much
        (its TTFT above the knob's), never more."""
        before = _histograms(url)
        body = json.dumps({"prompt": "a", "max_tokens": tokens, "stream": True}).encode()
        req = urllib.request.Request(url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req) as resp:
            resp.read()
        after = _histograms(url)
        delta = {name: after[name] - before.get(name, 0.0) for name in after}
        late = max(delta["time_to_first_token_seconds_sum"] - 0.005, 0.0)
        fastest = (tokens - 1) / max((tokens - 1) / tok_s - late, 1e-3)
        return (delta["inter_token_latency_seconds_count"]
                / delta["inter_token_latency_seconds_sum"]), fastest

    fast, fast_bound = per_user_after(41, 400)
    assert _post(url + "/standin/knobs", {"tok_s": 100}) == {
        "tok_s": 100.0, "ttft_ms": 5.0, "accept_length": 3.0}
    slow, slow_bound = per_user_after(41, 100)
    print(f"tok/s per user: {fast:.1f} (knob 400, at most {fast_bound:.1f} after its first "
          f"chunk), {slow:.1f} (knob 100, at most {slow_bound:.1f})")
    assert 300 < fast <= fast_bound * 1.01 and 80 < slow <= slow_bound * 1.01, (fast, slow)
    refused = urllib.request.Request(url + "/standin/knobs", data=b'{"crash_after": 1}')
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(refused)
    assert err.value.code == 400


def _histograms(url):
    """{name without `sglang:`: value} of the sums and counts of the stand-in's histograms."""
    with urllib.request.urlopen(url + "/metrics") as resp:
        text = resp.read().decode()
    return {line.split("{")[0].removeprefix("sglang:"): float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("sglang:") and line.split("{")[0].endswith(("_sum", "_count"))}


def _post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as resp:
        return json.loads(resp.read())


# --- a workload, not a prompt: prefix cache, prefill, a knee, text-dependent accept --------

def test_a_repeated_prompt_hits_the_prefix_cache_and_its_first_token_comes_sooner():
    engine = Engine({"model-path": "/m"}, Knobs(ttft_ms=50, prefill_tok_s=1000))
    story = " ".join(f"w{i}" for i in range(400))
    alive, cached = engine.admit(400, story)
    assert alive and cached == 0 and engine.prefill_s(400, cached) == 0.4
    first = next(engine.schedule(16, engine.prefill_s(400, cached)))[0]
    _alive, cached = engine.admit(400, story)
    again = next(engine.schedule(16, engine.prefill_s(400, cached)))[0]
    assert cached == 400 and (first, again) == (0.45, 0.05)
    # A prompt that shares a prefix prefills only the rest.
    _alive, cached = engine.admit(500, story + " " + " ".join(f"x{i}" for i in range(100)))
    assert cached == 400 and engine.prefill_s(500, cached) == 0.1
    assert _value(engine.metrics(), "sglang:cache_hit_rate") == pytest.approx(800 / 1300)


def test_the_prefix_cache_forgets_the_least_recently_used_past_its_capacity():
    cache = PrefixCache(capacity=10)
    assert cache.admit(list("abcde")) == 0 and cache.admit(list("vwxyz")) == 0
    assert cache.admit(list("abcde")) == 5  # used again: kept, the other goes first
    assert cache.admit(list("klmno")) == 0 and cache.admit(list("vwxyz")) == 0


@pytest.mark.parametrize("running, per_user", [(1, 50.0), (8, 50.0), (16, 25.0), (32, 12.5)])
def test_past_the_knee_per_user_decode_falls_and_the_total_stays(running, per_user):
    engine = Engine({"model-path": "/m"}, Knobs(tok_s=50, knee=8))
    assert engine.per_user_tok_s(running) == per_user
    assert engine.per_user_tok_s(running) * running == min(running, 8) * 50


def test_the_accept_length_depends_on_the_text_and_the_server_reports_its_mean():
    args = {"model-path": "/m", "speculative-algorithm": "NEXTN"}
    engine = Engine(args, Knobs(accept_length=3.0, accept_spread=0.3))
    texts = [f"prompt number {i}" for i in range(50)]
    lengths = [engine.accept_length_of(t) for t in texts]
    assert lengths == [engine.accept_length_of(t) for t in texts]  # the same text, the same
    assert 2.1 <= min(lengths) < 2.8 and 3.2 < max(lengths) <= 3.9, (min(lengths), max(lengths))
    for text, length in zip(texts, lengths):
        engine.finished(3, 16, 0, 0.3, 0.1, True, length)
    assert abs(engine.observed_accept_length() - sum(lengths) / 50) < 1e-3
    # Without the spread every text gets the knob.
    plain = Engine(args, Knobs(accept_length=3.0))
    assert {plain.accept_length_of(t) for t in texts} == {3.0}


def test_histograms_have_sglangs_buckets_and_label_text_so_quantiles_read_as_from_sglang():
    engine = Engine({"model-path": "/m"}, Knobs())
    for ttft in (0.05, 0.3, 0.3, 1.5):
        engine.first_token(ttft, stream=True)
        for _chunk in range(5):
            engine.streamed(0.04, 2)  # 20 ms a token, 10 tokens a request
    text = engine.metrics()
    ttft = "sglang:time_to_first_token_seconds_bucket"
    assert _value(text, ttft, le="0.1", is_streaming="true") == 1
    # prometheus_client writes a bound as a float, as SGLang's exposition has it: 2.0, not 2.
    assert _value(text, ttft, le="0.4") == 3 and _value(text, ttft, le="2.0") == 4
    assert 'le="2"' not in text
    buckets = [line for line in text.splitlines()
               if line.startswith("sglang:inter_token_latency_seconds_bucket")]
    assert len(buckets) == 24  # 23 of SGLang's bounds and +Inf
    itl = "sglang:inter_token_latency_seconds_bucket"
    assert _value(text, itl, le="+Inf") == 40 and _value(text, itl, le="0.02") == 40
    assert _value(text, itl, le="0.015") == 0


def test_over_http_a_long_answer_grows_the_inter_token_count_as_it_streams_and_tokens_at_its_end(
        standin):
    """SGLang's moments (tokenizer_manager.py, collect_metrics): while an answer streams, only
    the inter-token histogram and the decode passes grow; its generation tokens, request count
    and end-to-end latency are counted when it finishes."""
    import threading
    import time

    url, _engine = standin(knobs=Knobs(ttft_ms=5, tok_s=100, tokens_per_chunk=2))
    body = json.dumps({"prompt": "a", "max_tokens": 201, "stream": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    client = threading.Thread(target=lambda: urllib.request.urlopen(req, timeout=120).read())
    client.start()

    def scrape():
        with urllib.request.urlopen(url + "/metrics") as resp:
            return resp.read().decode()

    while not _value(scrape(), "sglang:inter_token_latency_seconds_count"):
        time.sleep(0.02)  # waits on progress: the first streamed chunk after the first token
    during = scrape()
    client.join(timeout=120)
    after = scrape()
    assert _value(during, "sglang:generation_tokens_total") == 0
    assert _value(during, "sglang:num_requests_total") == 0
    assert 0 < _value(during, "sglang:inter_token_latency_seconds_count") < 200
    assert _value(during, "sglang:num_running_reqs") == 1
    assert _value(after, "sglang:generation_tokens_total") == 201
    assert _value(after, "sglang:inter_token_latency_seconds_count") == 200
    assert _value(after, "sglang:e2e_request_latency_seconds_count") == 1


def _value(text, name, **match):
    """The sum of the samples of `name` in an exposition text whose labels include `match`."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == name and all(sample.labels.get(k) == v
                                              for k, v in match.items()))


def test_over_http_past_the_knee_each_stream_is_slower(standin):
    """Four streams at once on a knee of 2 get half the knob's speed each."""
    from ansible_collections.sglang.deploy.plugins.module_utils import sglang_bench

    url, _engine = standin(knobs=Knobs(ttft_ms=5, tok_s=200, tokens_per_chunk=1, knee=2))
    body = {"model": "m", "prompt": "hello there", "max_tokens": 41, "stream": True,
            "stream_options": {"include_usage": True}}
    alone = sglang_bench.run_level(url + "/v1/completions", body, 1, 2)
    crowded = sglang_bench.run_level(url + "/v1/completions", body, 4, 4)
    print(f"tok/s per user: alone {alone['decode_tok_s_per_user']}, four at once "
          f"{crowded['decode_tok_s_per_user']} (knob 200, knee 2)")
    assert alone["decode_tok_s_per_user"] > 150
    assert crowded["decode_tok_s_per_user"] < 0.7 * alone["decode_tok_s_per_user"]
