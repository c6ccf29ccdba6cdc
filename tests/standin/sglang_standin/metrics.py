"""The stand-in's `/metrics`, written as SGLang writes it.

Where the env holds the full SGLang install, the series come from SGLang's own collector
classes (`sglang/srt/observability/metrics_collector.py`: TokenizerMetricsCollector and
SchedulerMetricsCollector) through prometheus_client's multiprocess collector, as SGLang's
server exposes them (`sglang/srt/utils/common.py`, add_prometheus_middleware). Elsewhere (an
env with SGLang's sources only) prometheus_client writes the same names, label names and
buckets, copied here from SGLang 0.5.23 and held to SGLang's own text by
tests/integration/test_metrics_conformance.py.

Either way the engine feeds them the events at SGLang's moments
(`sglang/srt/managers/tokenizer_manager.py`, collect_metrics): a first token's time when the
first chunk goes out, the inter-token histogram at every later chunk (its sum grows by the
chunk's interval, its count by the chunk's tokens), and the request's prompt and generation
tokens, request count and latencies only when it finishes; the scheduler's gauges at each
report (here: each scrape), a decode forward pass per chunk.

SGLang's HTTP metrics (`sglang/srt/observability/http_request_metrics.py`, its middleware
track_http_status_code, with --enable-metrics) the same way: SGLang's own `_HttpRequestMetrics`
where the full install is, else prometheus_client with its names and labels; the server counts
them at SGLang's moments (HttpMetrics below).
"""

import os
import tempfile

# The label names SGLang 0.5.23 puts on its series: the tokenizer's
# (metrics_collector.py, tokenizer_metric_labels) and the scheduler's rank 0
# (SchedulerMetricsCollector.create_context).
ENGINE_TYPE = "unified"  # DisaggregationMode.to_engine_type("null")
SCHEDULER_RANKS = {"tp_rank": 0, "pp_rank": 0, "moe_ep_rank": 0}

# SGLang 0.5.23's buckets (metrics_collector.py, TokenizerMetricsCollector.__init__).
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
               0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000,
               8.000)
E2E_BUCKETS = TTFT_BUCKETS + (600, 1200, 1800, 2400)

# The scheduler's gauges the stand-in sets at each report, SchedulerStats' field names.
GAUGES = ("num_running_reqs", "num_queue_reqs", "gen_throughput", "cache_hit_rate",
          "token_usage", "spec_accept_length")
QUEUE_COUNTS = ("num_running_reqs", "num_queue_reqs")  # QueueCount in SchedulerStats


class MetricsError(RuntimeError):
    pass


class HttpMetrics:
    """SGLang's HTTP middleware's moments (http_request_metrics.py, track_http_status_code),
    over its `_HttpRequestMetrics` or the copy: a request counted and active when it reaches the
    middleware (after the API key's, which answers a refused one before it), its answer counted
    with its status once the app has sent all of it (the patched call_next awaits the whole
    response, a stream's last chunk included), active no more then; a request whose app raised
    has no answer counted. `endpoint` is the route's path (for a path no route serves, the
    path itself, as _get_fastapi_request_path gives)."""

    def __init__(self, metrics):
        self.m = metrics

    def begin(self, endpoint, method, routing_key=None):
        self.m.requests_total.labels(endpoint=endpoint, method=method).inc()
        self.m.requests_active.labels(endpoint=endpoint, method=method).inc()
        if routing_key:
            self.m.routing_keys_active.inc(routing_key)

    def answered(self, endpoint, method, status):
        self.m.responses_total.labels(endpoint=endpoint, method=method,
                                      status_code=str(status)).inc()

    def end(self, endpoint, method, routing_key=None):
        self.m.requests_active.labels(endpoint=endpoint, method=method).dec()
        if routing_key:
            self.m.routing_keys_active.dec(routing_key)


class _RefCountedGauge:
    """SGLang's RefCountedGauge: the gauge counts distinct keys with a request active."""

    def __init__(self, gauge):
        self._gauge, self._refcount = gauge, {}

    def inc(self, key):
        if key in self._refcount:
            self._refcount[key] += 1
        else:
            self._refcount[key] = 1
            self._gauge.inc()

    def dec(self, key):
        if key in self._refcount:
            self._refcount[key] -= 1
            if self._refcount[key] == 0:
                del self._refcount[key]
                self._gauge.dec()


class _CopiedHttpMetrics:
    """_HttpRequestMetrics of SGLang 0.5.23: its names, label names and documentation."""

    def __init__(self, registry):
        from prometheus_client import Counter, Gauge

        self.requests_total = Counter(
            "sglang:http_requests_total", "Total number of HTTP requests by endpoint and method",
            ["endpoint", "method"], registry=registry)
        self.responses_total = Counter(
            "sglang:http_responses_total",
            "Total number of HTTP responses by endpoint and status code",
            ["endpoint", "status_code", "method"], registry=registry)
        self.requests_active = Gauge(
            "sglang:http_requests_active", "Number of currently active HTTP requests",
            ["endpoint", "method"], registry=registry)
        self.routing_keys_active = _RefCountedGauge(Gauge(
            "sglang:routing_keys_active", "Number of unique routing keys with active requests",
            registry=registry))


def create(model_name, choice=None):
    """The collectors for a server of `model_name`: SGLang's own where they import
    (`choice` "auto", the default), "sglang" to insist on them, "prometheus_client" for the
    copy. Call before anything imports prometheus_client: the multiprocess directory is read
    at its import."""
    choice = choice or os.environ.get("SGLANG_STANDIN_METRICS", "") or "auto"
    if choice not in ("auto", "sglang", "prometheus_client"):
        raise MetricsError(f"SGLANG_STANDIN_METRICS={choice!r}: auto, sglang or "
                           "prometheus_client")
    if choice != "prometheus_client":
        try:
            return SGLangCollectors(model_name)
        except Exception as exc:  # noqa: BLE001 - any import or set-up failure: say it, fall back
            if choice == "sglang":
                raise MetricsError(f"SGLang's metrics collectors cannot run here: {exc}") \
                    from exc
    return CopiedCollectors(model_name)


class SGLangCollectors:
    """SGLang's own collector classes, exposed through the multiprocess collector as SGLang's
    server does; one per process (they register in prometheus_client's default registry)."""

    source = "sglang"

    def __init__(self, model_name):
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="standin-prom-")
        from importlib.metadata import version

        from sglang.srt import runtime_context
        from sglang.srt.observability import metrics_collector as mc
        from sglang.srt.server_args import ServerArgs

        # The collectors read the published config (get_observability, get_serving); the raw
        # arguments suffice for them, without the resolution a GPU would need.
        runtime_context._CONTEXT.set_server_args(
            ServerArgs(model_path=model_name, served_model_name=model_name))
        self.version = version("sglang")
        self._mc = mc
        self.labels = {"model_name": model_name, "engine_type": ENGINE_TYPE}
        self.tokenizer = mc.TokenizerMetricsCollector(server_args=None, labels=self.labels)
        self.scheduler = mc.SchedulerMetricsCollector(
            labels={**self.labels, **SCHEDULER_RANKS}, server_args=None)
        # As SGLang's lifespan does with --enable-metrics (http_server.py); once a process.
        from sglang.srt.observability import http_request_metrics

        http_request_metrics.init_http_request_metrics()
        self.http = HttpMetrics(http_request_metrics._http_request_metrics)

    def report(self, values):
        stats = self._mc.SchedulerStats()
        for name, value in values.items():
            setattr(stats, name, self._mc.QueueCount(total=int(value))
                    if name in QUEUE_COUNTS else value)
        self.scheduler.log_stats(stats)

    def exposition(self):
        from prometheus_client import CollectorRegistry, generate_latest, multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry).decode()


class CopiedCollectors:
    """The series the deployment reads, as SGLang 0.5.23 names, labels and buckets them, by
    prometheus_client (a registry of its own, so that one process holds several)."""

    source = "prometheus_client"
    version = "0.5.23"

    def __init__(self, model_name):
        from prometheus_client import (CollectorRegistry, Counter, Gauge, Histogram,
                                       disable_created_metrics)

        # A plain registry writes a `_created` series beside each counter and histogram;
        # SGLang's multiprocess exposition has none.
        disable_created_metrics()
        self.registry = CollectorRegistry()
        self.labels = {"model_name": model_name, "engine_type": ENGINE_TYPE}
        base, stream = list(self.labels), [*self.labels, "is_streaming"]
        ranks = [*base, *SCHEDULER_RANKS]

        def counter(name, labels):
            return Counter(f"sglang:{name}", name, labels, registry=self.registry)

        def histogram(name, labels, buckets):
            return Histogram(f"sglang:{name}", name, labels, buckets=buckets,
                             registry=self.registry)

        self.prompt_tokens = counter("prompt_tokens", stream)
        self.generation_tokens = counter("generation_tokens", stream)
        self.requests = counter("num_requests", stream)
        self.aborted = counter("num_aborted_requests", base)
        self.cached_tokens = counter("cached_tokens", [*base, "cache_source"])
        self.ttft = histogram("time_to_first_token_seconds", stream, TTFT_BUCKETS)
        self.itl = histogram("inter_token_latency_seconds", base, ITL_BUCKETS)
        self.tpot = histogram("request_time_per_output_token_seconds", stream, ITL_BUCKETS)
        self.e2e = histogram("e2e_request_latency_seconds", stream, E2E_BUCKETS)
        self.graph_passes = counter("cuda_graph_passes", [*ranks, "mode"])
        self.gauges = {name: Gauge(f"sglang:{name}", name, ranks, registry=self.registry)
                       for name in GAUGES}
        self.ranks = {**self.labels, **SCHEDULER_RANKS}
        self.tokenizer, self.scheduler = self, self
        self.http = HttpMetrics(_CopiedHttpMetrics(self.registry))

    # -- TokenizerMetricsCollector's methods, as SGLang 0.5.23 defines them ------------------
    def observe_time_to_first_token(self, labels, value, *, stream):
        self.ttft.labels(**labels, is_streaming=_flag(stream)).observe(value)

    def observe_inter_token_latency(self, labels, interval, num_new_tokens):
        if num_new_tokens <= 0:
            return
        # SGLang's fast path: the sum by the interval, one bucket by the tokens.
        child = self.itl.labels(**labels)
        child._sum.inc(interval)
        for i, bound in enumerate(child._upper_bounds):
            if interval / num_new_tokens <= bound:
                child._buckets[i].inc(num_new_tokens)
                break

    def observe_one_finished_request(self, labels, prompt_tokens, generation_tokens,
                                     cached_tokens, e2e_latency, has_grammar,
                                     cached_tokens_details=None, spec_verify_ct=0,
                                     is_streaming=False, time_per_output_token=None):
        del has_grammar, cached_tokens_details, spec_verify_ct  # the stand-in has none
        stream = {**labels, "is_streaming": _flag(is_streaming)}
        self.prompt_tokens.labels(**stream).inc(prompt_tokens)
        self.generation_tokens.labels(**stream).inc(generation_tokens)
        if cached_tokens > 0:
            self.cached_tokens.labels(**labels, cache_source="total").inc(cached_tokens)
        self.requests.labels(**stream).inc(1)
        self.e2e.labels(**stream).observe(float(e2e_latency))
        if time_per_output_token is not None:
            self.tpot.labels(**stream).observe(float(time_per_output_token))

    def observe_one_aborted_request(self, labels):
        self.aborted.labels(**labels).inc(1)

    # -- SchedulerMetricsCollector's ---------------------------------------------------------
    def increment_decode_cuda_graph_pass(self, value):
        self.graph_passes.labels(**self.ranks,
                                 mode="decode_cuda_graph" if value else "decode_none").inc(1)

    def increment_prefill_cuda_graph_pass(self, value):
        self.graph_passes.labels(**self.ranks,
                                 mode="prefill_cuda_graph" if value else "prefill_none").inc(1)

    def report(self, values):
        for name, value in values.items():
            self.gauges[name].labels(**self.ranks).set(value)

    def exposition(self):
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()


def _flag(value):
    return "true" if value else "false"
