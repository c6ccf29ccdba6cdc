"""promtool unit tests for a rendered rules file: each alert fires on series that should fire it
and stays quiet on series that should not, including the shapes production has and a toy does
not: bursty light load, zero traffic, a restart that resets the counters, scrape gaps, a queue
that stays full, a scheduler that hangs while /metrics answers, failing drift checks.

The series are built from the release's proof and the settings, computed here on their own (not
read back from the rules' expressions), so a threshold the pack got wrong fails a case.
The series are written as SGLang writes them (the stand-in's copy of its names, labels and
buckets, held to SGLang's own collectors by tests/integration/test_metrics_conformance.py): each
`sglang:` series carries SGLang's labels (model_name, engine_type, is_streaming, the scheduler's
ranks) and a bucket bound is written by prometheus_client, as SGLang's is (le="4.0").
Used by molecule/default/tests/test_monitoring.py with the promtool of the molecule host, and by
tests/unit/test_alert_tests.py where a promtool is at hand.
"""

import re
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "standin"))
from prometheus_client.utils import floatToGoString  # noqa: E402
from sglang_standin.metrics import ENGINE_TYPE, ITL_BUCKETS, SCHEDULER_RANKS, TTFT_BUCKETS  # noqa: E402

# The labels SGLang puts on each family the cases write (metrics_collector.py 0.5.23).
MODEL = "qwen3.6-27b"
STREAMING = ("sglang:generation_tokens_total", "sglang:prompt_tokens_total",
             "sglang:num_requests_total", "sglang:time_to_first_token_seconds")
SCHEDULER = ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
             "sglang:spec_accept_length", "sglang:gen_throughput", "sglang:cuda_graph_passes_total")


def as_sglang_writes(series):
    """`series` ("name{labels}") with the labels SGLang's collectors add to that family."""
    name, _, rest = series.partition("{")
    family = re.sub(r"_(bucket|sum|count)$", "", name)
    if not name.startswith("sglang:"):
        return series
    extra = {"model_name": MODEL, "engine_type": ENGINE_TYPE}
    if family in STREAMING:
        extra["is_streaming"] = "true"
    if family in SCHEDULER:
        extra.update({k: str(v) for k, v in SCHEDULER_RANKS.items()})
    added = ",".join(f'{k}="{v}"' for k, v in extra.items())
    return f"{name}{{{added},{rest}" if rest else f"{name}{{{added}}}"


EVAL_S = 1800  # every case is judged once its rates and `for` have settled
UNITS = {"s": 1, "m": 60, "h": 3600}


def seconds(duration):
    """A Prometheus duration such as 30s, 5m, 1h as seconds."""
    return int(duration[:-1]) * UNITS[duration[-1]]


class Clock:
    """Samples every `step` seconds (at least three in a rate window) up past EVAL_S."""

    def __init__(self, window, per_window=3):
        self.step = max(1, min(60, seconds(window) // per_window))
        self.steps = EVAL_S // self.step + 10

    def const(self, value):
        return f"{value:g}x{self.steps}"

    def counter(self, per_second):
        """A counter growing by `per_second` (one increment per sample)."""
        return f"0+{per_second * self.step:g}x{self.steps}"

    def each(self, values):
        """One value per sample, repeating `values` (None: a scrape that did not happen;
        "stale": a scrape that no longer had the series, as Prometheus marks it)."""
        out = [values[i % len(values)] for i in range(self.steps + 1)]
        return " ".join("_" if v is None else v if isinstance(v, str) else f"{v:g}" for v in out)

    def counting(self, increments):
        """A counter whose increment at each sample repeats `increments`; a None restarts it
        at 0 (a server restarted: SGLang's counters begin again)."""
        total, out = 0.0, []
        for i in range(self.steps + 1):
            inc = increments[i % len(increments)]
            total = 0.0 if inc is None else total + inc
            out.append(total)
        return " ".join(f"{v:g}" for v in out)


def _tokens(t, sel, per_second):
    """Tokens streaming: SGLang's inter-token count grows at each chunk."""
    return {"series": f"sglang:inter_token_latency_seconds_count{{{sel}}}",
            "values": t.counter(per_second)}


def _speed(t, sel, tok_s, load):
    """Decode at `tok_s` per stream with `load` requests running: SGLang's inter-token histogram
    grows its sum by the decode seconds, its count by the tokens."""
    return [{"series": f"sglang:inter_token_latency_seconds_count{{{sel}}}",
             "values": t.counter(tok_s * load)},
            {"series": f"sglang:inter_token_latency_seconds_sum{{{sel}}}", "values": t.counter(load)},
            {"series": f"sglang:num_running_reqs{{{sel}}}", "values": t.const(load)},
            {"series": f"sglang:generation_tokens_total{{{sel}}}",
             "values": t.counter(tok_s * load)}]


def _long_answers(t, sel, tok_s, load):
    """`load` answers of tens of thousands of tokens streaming at `tok_s` each all through the
    case: not one finishes, so SGLang's token counters stay where they were; the inter-token
    histogram and the decode passes (a pass a chunk of 3) grow."""
    return [{"series": f"sglang:inter_token_latency_seconds_count{{{sel}}}",
             "values": t.counter(tok_s * load)},
            {"series": f"sglang:inter_token_latency_seconds_sum{{{sel}}}", "values": t.counter(load)},
            {"series": f'sglang:cuda_graph_passes_total{{{sel},mode="decode_cuda_graph"}}',
             "values": t.counter(tok_s / 3)},
            {"series": f"sglang:num_running_reqs{{{sel}}}", "values": t.const(load)},
            {"series": f"sglang:generation_tokens_total{{{sel}}}", "values": t.const(5000)}]


def _histogram(t, sel, name, buckets, value, per_second):
    """`per_second` observations of `value` seconds each into a histogram of SGLang's `buckets`."""
    series = [{"series": f'{name}_bucket{{{sel},le="{floatToGoString(b)}"}}',
               "values": t.counter(per_second if value <= b else 0)} for b in buckets]
    return series + [{"series": f'{name}_bucket{{{sel},le="+Inf"}}', "values": t.counter(per_second)},
                     {"series": f"{name}_count{{{sel}}}", "values": t.counter(per_second)},
                     {"series": f"{name}_sum{{{sel}}}", "values": t.counter(per_second * value)}]


def _above(buckets, limit):
    """A value whose p99 (interpolated in its bucket) is above `limit`: in the first bucket that
    starts at or above it."""
    low = next(b for b in buckets if b >= limit)
    high = next(b for b in buckets if b > low)
    return (low + high) / 2


def _below(buckets, limit):
    """A value whose p99 is at most `limit`: in a bucket that ends at or below it."""
    high = max(b for b in buckets if b <= limit)
    low = max([0] + [b for b in buckets if b < high])
    return (low + high) / 2


def _labels(text):
    return dict(re.findall(r'(\w+)="([^"]*)"', text))


class Cases:
    def __init__(self, rules, host, clock):
        self.host, self.clock = host, clock
        self.alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
        self.sel = f'job="sglang",sglang_host="{host}"'
        self.tests = []

    def rule(self, name, **labels):
        return next(r for r in self.alerts if r["alert"] == name
                    and all(r["labels"].get(k) == v for k, v in labels.items()))

    def case(self, name, series, fires, kept=None, why="", clock=None, **select):
        """One test: `series` in, `name` firing (the rule `select` picks, with the labels the
        expression keeps from `kept`, a series' text) or quiet. `select={}` with several rules
        of the name (the burn rates' warning and critical): each fires."""
        rules = [r for r in self.alerts if r["alert"] == name
                 and all(r["labels"].get(k) == v for k, v in select.items())]
        assert rules, (name, select)
        expected = []
        for rule in rules if fires else []:
            kept_labels = _labels(kept) if kept else {}
            annotations = {k: re.sub(r"\{\{ \$labels\.(\w+) \}\}",
                                     lambda m: kept_labels.get(m.group(1), ""), v)
                           for k, v in rule["annotations"].items()}
            expected.append({"exp_labels": {**kept_labels, **rule["labels"]},
                             "exp_annotations": annotations})
        self.tests.append({
            "name": f"{name}{''.join(f' {v}' for v in select.values())} "
                    f"{'fires' if fires else 'stays quiet'}{': ' + why if why else ''}",
            "interval": f"{(clock or self.clock).step}s",
            "input_series": [dict(s, series=as_sglang_writes(s["series"])) for s in series],
            "alert_rule_test": [{"eval_time": f"{EVAL_S}s", "alertname": name,
                                 "exp_alerts": expected}]})


def _proven(release):
    proof = release["workload_proof"]
    cap = proof["capacity"]["concurrency"]
    levels = sorted((lv for lv in proof["levels"] if lv["met"] and lv["concurrency"] <= cap),
                    key=lambda lv: lv["concurrency"])
    return proof, cap, levels


def _speed_cases(c, t, release, floors, settings):
    sel = c.sel
    _proof, cap, levels = _proven(release)
    floor, lightest = floors["min_decode_tok_s"], levels[0]["concurrency"]
    c.case("SGLangBelowFloor", _speed(t, sel, floor * 0.8, lightest), True)
    c.case("SGLangBelowFloor", _speed(t, sel, floor * 1.05, lightest), False)
    c.case("SGLangBelowFloor", _speed(t, sel, floor * 0.5, lightest + 3), False,
           why="slow because loaded beyond the floor's load")
    below = 0
    for level in levels:
        n = level["concurrency"]
        threshold = level["tok_s_per_user"] * (1 - settings["tolerance"])
        for load in sorted({below + 1, n}):
            c.case("SGLangSlowerThanProven", _speed(t, sel, threshold * 0.95, load), True,
                   why=f"{load} running", concurrency=str(n))
            c.case("SGLangSlowerThanProven", _speed(t, sel, threshold * 1.05, load), False,
                   why=f"{load} running", concurrency=str(n))
        below = n
    top = levels[-1]
    c.case("SGLangSlowerThanProven", _speed(t, sel, 1, cap + 8), False,
           why="beyond the proven capacity: no promise", concurrency=str(top["concurrency"]))
    # Long answers at the capacity (minutes each, several at once): no request finishes in
    # the window, so no token counter grows. Healthy: no page and no silence; slow: the speed
    # alert fires within its `for`.
    n, proven = top["concurrency"], top["tok_s_per_user"]
    threshold = proven * (1 - settings["tolerance"])
    healthy_long = _long_answers(t, sel, proven, n)
    c.case("SGLangNoProgress", healthy_long, False, why="long healthy answers, none finishing")
    c.case("SGLangSlowerThanProven", healthy_long, False, why="long healthy answers",
           concurrency=str(n))
    c.case("SGLangSlowerThanProven", _long_answers(t, sel, threshold * 0.9, n), True,
           why="slow long answers, none finishing", concurrency=str(n))
    # Bursty light traffic: a burst at the capacity for a 30th of the window, twice a window,
    # idle between (sampled 30 times a window). Its tokens decode at the speed proven there;
    # the time-averaged load is about 1, the peak is the burst's: neither the floor nor the
    # lightest band judges them.
    fine = Clock(settings["window"], per_window=30)
    burst = [1] + [0] * 14
    speed = top["tok_s_per_user"]
    bursty = [{"series": f"sglang:num_running_reqs{{{sel}}}",
               "values": fine.each([cap * b for b in burst])},
              {"series": f"sglang:inter_token_latency_seconds_count{{{sel}}}",
               "values": fine.counting([speed * cap * fine.step * b for b in burst])},
              {"series": f"sglang:inter_token_latency_seconds_sum{{{sel}}}",
               "values": fine.counting([cap * fine.step * b for b in burst])},
              {"series": f"sglang:generation_tokens_total{{{sel}}}",
               "values": fine.counting([speed * cap * fine.step * b for b in burst])}]
    c.case("SGLangBelowFloor", bursty, False, why="bursty light load at the capacity", clock=fine)
    for n in (lightest, top["concurrency"]):
        c.case("SGLangSlowerThanProven", bursty, False, why="bursty light load", clock=fine,
               concurrency=str(n))
    # A restart mid-way (counters begin again) and scrapes that did not happen, at a healthy
    # speed: no alert from the reset or the gaps.
    healthy = levels[0]["tok_s_per_user"]
    restarted = [{"series": f"sglang:inter_token_latency_seconds_count{{{sel}}}",
                  "values": t.counting([healthy * t.step] * 20 + [None] + [healthy * t.step] * 20)},
                 {"series": f"sglang:inter_token_latency_seconds_sum{{{sel}}}",
                  "values": t.counting([t.step] * 20 + [None] + [t.step] * 20)},
                 {"series": f"sglang:num_running_reqs{{{sel}}}", "values": t.each([1, 1, None])},
                 {"series": f"sglang:generation_tokens_total{{{sel}}}",
                  "values": t.counting([healthy * t.step] * 20 + [None] + [healthy * t.step] * 20)}]
    c.case("SGLangSlowerThanProven", restarted, False, why="counter resets and scrape gaps",
           concurrency=str(lightest))
    c.case("SGLangNoProgress", restarted, False, why="counter resets and scrape gaps")
    idle = [{"series": f"up{{{sel}}}", "values": t.const(1)},
            {"series": f"sglang:num_running_reqs{{{sel}}}", "values": t.const(0)},
            {"series": f"sglang:generation_tokens_total{{{sel}}}", "values": t.const(9000)},
            {"series": f"sglang:inter_token_latency_seconds_count{{{sel}}}", "values": t.const(9000)},
            {"series": f"sglang:inter_token_latency_seconds_sum{{{sel}}}", "values": t.const(200)}]
    for name, labels in (("SGLangBelowFloor", {}), ("SGLangNoProgress", {}),
                         ("SGLangSlowerThanProven", {"concurrency": str(lightest)}),
                         ("SGLangAboveProvenCapacity", {})):
        c.case(name, idle, False, why="zero traffic", **labels)


def _latency_cases(c, t, release, settings):
    proof, _cap, levels = _proven(release)
    for level in levels:
        n = level["concurrency"]
        for name, metric, buckets, figure, factor in (
                ("SGLangSlowFirstToken", "sglang:time_to_first_token_seconds", TTFT_BUCKETS,
                 "ttft_ms", settings["ttft_factor"]),
                ("SGLangSlowTokens", "sglang:inter_token_latency_seconds", ITL_BUCKETS,
                 "itl_ms", settings["itl_factor"])):
            if figure == "itl_ms" and proof["measured_by"] != "sglang.bench_serving":
                continue
            limit = level[figure]["p99"] * factor / 1000
            # Tokens stream: the inter-token histogram's own count where it is the one judged.
            load = [{"series": f"sglang:num_running_reqs{{{c.sel}}}", "values": t.const(n)}]
            if metric != "sglang:inter_token_latency_seconds":
                load.append(_tokens(t, c.sel, 20 * n))
            c.case(name, _histogram(t, c.sel, metric, buckets, _above(buckets, limit), 4) + load,
                   True, concurrency=str(n))
            c.case(name, _histogram(t, c.sel, metric, buckets, _below(buckets, limit), 4) + load,
                   False, concurrency=str(n))


def _capacity_cases(c, t, release):
    _proof, cap, _levels = _proven(release)
    running = f"sglang:num_running_reqs{{{c.sel}}}"
    c.case("SGLangAboveProvenCapacity", [{"series": running, "values": t.const(cap + 1)}], True)
    c.case("SGLangAboveProvenCapacity", [{"series": running, "values": t.const(cap)}], False)
    c.case("SGLangAboveProvenCapacity", [{"series": running, "values": t.each([cap + 4, cap - 4])}],
           False, why="above it in bursts only")
    stuck = [{"series": running, "values": t.const(3)},
             {"series": f"sglang:generation_tokens_total{{{c.sel}}}", "values": t.const(5000)}]
    c.case("SGLangNoProgress", stuck, True, why="a hung scheduler whose /metrics answer")
    c.case("SGLangNoProgress", [{"series": running, "values": t.const(3)}, _tokens(t, c.sel, 60)],
           False)
    queue = f"sglang:num_queue_reqs{{{c.sel}}}"
    c.case("SGLangQueueStuck", [{"series": queue, "values": t.const(6)}], True,
           why="a queue that stays full and does not grow")
    c.case("SGLangQueueStuck", [{"series": queue, "values": t.each([6, 0])}], False,
           why="a queue that empties")


def _health_cases(c, t, release, settings):
    sel, drift_sel = c.sel, f'sglang_host="{c.host}"'
    up = f"up{{{sel}}}"
    c.case("SGLangDown", [{"series": up, "values": t.const(0)}], True, kept=up)
    c.case("SGLangDown", [{"series": up, "values": t.const(1)}], False)
    other = 'up{job="sglang",sglang_host="another-host"}'
    c.case("SGLangTargetMissing", [{"series": other, "values": t.const(1)}], True, kept=up,
           why="the host's target gone from file_sd")
    c.case("SGLangTargetMissing", [{"series": up, "values": t.const(0)}], False)

    accept = release["smoke"]["accept_length"] * settings["accept_fraction"]
    tokens = _tokens(t, sel, 50)
    idle = {"series": f"sglang:generation_tokens_total{{{sel}}}", "values": t.const(5000)}
    gauge = f"sglang:spec_accept_length{{{sel}}}"
    c.case("SGLangAcceptLengthLow", [{"series": gauge, "values": t.const(accept * 0.9)}, tokens], True)
    c.case("SGLangAcceptLengthLow", [{"series": gauge, "values": t.const(accept * 1.1)}, tokens], False)
    c.case("SGLangAcceptLengthLow", [{"series": gauge, "values": t.const(accept * 0.5)}, idle], False,
           why="an idle server's last accept length says nothing about now")

    usage = f"sglang:token_usage{{{sel}}}"
    c.case("SGLangKVCacheFull", [{"series": usage, "values": t.const(min(0.999, settings["kv_usage"] + 0.03))}], True)
    c.case("SGLangKVCacheFull", [{"series": usage, "values": t.const(settings["kv_usage"] - 0.2)}], False)

    drifted = (f'sglang_drift{{{drift_sel},release="{release["id"]}",setting="decode_cuda_graph",'
               'recorded="on",live="off"}')
    c.case("SGLangResolutionDrift", [{"series": drifted, "values": t.const(1)}], True, kept=drifted)
    c.case("SGLangResolutionDrift", [{"series": drifted, "values": t.const(0)}], False)
    # A failing check run writes no sglang_drift series (node_exporter's scrape then marks it
    # stale): the drift the last good run saw still stands.
    runs = max(1, int(settings["drift_interval_s"]) // t.step)
    c.case("SGLangResolutionDrift",
           [{"series": drifted, "values": t.each([1] + ["stale"] * runs)}],
           True, kept=drifted, why="failing check runs between the ones that saw it")

    success = f'sglang_drift_check_success{{{drift_sel},release="{release["id"]}"}}'
    c.case("SGLangDriftCheckFailing", [{"series": success, "values": t.const(0)}], True, kept=success)
    c.case("SGLangDriftCheckFailing", [{"series": success, "values": t.const(1)}], False)

    stamp = f'sglang_drift_check_timestamp_seconds{{{drift_sel},release="{release["id"]}"}}'
    # promtool's clock starts at 0: a check at every sample keeps the stamp at time().
    c.case("SGLangDriftCheckStale", [{"series": stamp, "values": t.counter(1)}], False)
    c.case("SGLangDriftCheckStale", [{"series": success, "values": t.const(1)}], True)


def _burn_cases(c, t, release):
    sel = c.sel
    served = {"series": f"sglang:num_requests_total{{{sel}}}", "values": t.counter(10)}
    for share, fires in ((0.2, True), (0.001, False)):
        aborted = {"series": f"sglang:num_aborted_requests_total{{{sel}}}",
                   "values": t.counter(10 * share)}
        c.case("SGLangAbortBudgetBurn", [served, aborted], fires, why=f"{share:.1%} aborted")
    slo = release["workload_proof"]["slo"].get("ttft_p99_ms")
    bucket = next(b for b in TTFT_BUCKETS if b * 1000 >= slo)
    for share, fires in ((0.3, True), (0.002, False)):
        slow = _histogram(t, sel, "sglang:time_to_first_token_seconds", TTFT_BUCKETS,
                          bucket * 1.5, 10 * share)
        fast = _histogram(t, sel, "sglang:time_to_first_token_seconds", TTFT_BUCKETS,
                          bucket / 4, 10 * (1 - share))
        both = [dict(s, values=_sum(s["values"], f["values"])) for s, f in zip(slow, fast)]
        c.case("SGLangFirstTokenBudgetBurn", both, fires, why=f"{share:.1%} over the objective")


def _sum(a, b):
    """Two series of the `0+NxM` form added."""
    (sa, ia, na), (sb, ib, _nb) = (re.fullmatch(r"([0-9.e+-]+)\+([0-9.e+-]+)x(\d+)", v).groups()
                                   for v in (a, b))
    return f"{float(sa) + float(sb):g}+{float(ia) + float(ib):g}x{na}"


def promtool_tests(rules, rules_file, host, release, floors, settings):
    """The promtool test file (a dict) for `rules` as sglang_monitoring_pack rendered them."""
    t = Clock(settings["window"])
    c = Cases(rules, host, t)
    _health_cases(c, t, release, settings)
    _speed_cases(c, t, release, floors, settings)
    _latency_cases(c, t, release, settings)
    _capacity_cases(c, t, release)
    _burn_cases(c, t, release)
    return {"rule_files": [rules_file], "evaluation_interval": f"{t.step}s", "tests": c.tests}


def counts(tests):
    """(cases where an alert fires, cases where it stays quiet)."""
    fires = sum(1 for case in tests["tests"] if case["alert_rule_test"][0]["exp_alerts"])
    return fires, len(tests["tests"]) - fires


def dump(tests):
    return yaml.safe_dump(tests, sort_keys=False, width=200)
