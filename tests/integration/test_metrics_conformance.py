"""The stand-in's /metrics against SGLang's own collectors (sglang/srt/observability/
metrics_collector.py of the full 0.5.23 install, scripts/build-sglang-venv.sh): the same events
fed to SGLang's TokenizerMetricsCollector and SchedulerMetricsCollector and to the stand-in's
copy of their series (tests/standin/sglang_standin/metrics.py), the exposition texts compared
series by series (name, label set, label text such as le="4.0", value) after each event, so a
counter that grows at another moment than SGLang's fails too. The rules and the alert tests
read this text (plugins/filter/sglang_monitoring.py, tests/support/alert_tests.py)."""

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
        "sglang:inter_token_latency_seconds_count")


def test_the_series_the_deployment_reads_are_in_both_with_sglangs_label_text(texts):
    sglang, copy = texts
    for text in (sglang["aborted"], copy["aborted"]):
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
