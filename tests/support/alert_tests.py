"""promtool unit tests for a rendered rules file: each alert fires on series that should fire it
and stays quiet on series that should not, including the shapes production has and a toy does
not: bursty light load, zero traffic, a restart that resets the counters, scrape gaps, a queue
that stays full, a scheduler that hangs while /metrics answers, failing drift checks, a load
that swings around the proven capacity, sparse slow traffic, 5xx answers of SGLang's own HTTP
server; and for every critical with a warning at its signal, a case that it never fires before
that warning (WARNED_BY in the filter). router_tests does the same for the router's pack.

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
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "collections"))
from prometheus_client.utils import floatToGoString  # noqa: E402
from sglang_standin.metrics import ENGINE_TYPE, ITL_BUCKETS, SCHEDULER_RANKS, TTFT_BUCKETS  # noqa: E402

# Which critical has a warning at its signal: the filter's own statement, which the ordered
# cases hold it to.
from ansible_collections.sglang.deploy.plugins.filter.sglang_monitoring import (  # noqa: E402
    UNWARNED, WARNED_BY)

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
    # SGLang's HTTP metrics carry their own labels only (http_request_metrics.py).
    if not name.startswith("sglang:") or name.startswith("sglang:http_"):
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

    def counting(self, increments, cycle=True):
        """A counter whose increment at each sample repeats `increments` (`cycle` False: one
        increment a sample, 0 past the list); a None restarts it at 0 (a server restarted:
        SGLang's counters begin again)."""
        total, out = 0.0, []
        for i in range(self.steps + 1):
            inc = increments[i % len(increments)] if cycle else (
                increments[i] if i < len(increments) else 0)
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
    def __init__(self, rules, host, clock, sel=None):
        self.host, self.clock = host, clock
        self.alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
        self.sel = sel or f'job="sglang",sglang_host="{host}"'
        self.tests = []

    def rule(self, name, **labels):
        return next(r for r in self.alerts if r["alert"] == name
                    and all(r["labels"].get(k) == v for k, v in labels.items()))

    def has(self, name):
        return any(r["alert"] == name for r in self.alerts)

    def expected(self, name, kept=None, **select):
        """The alerts of `name` the rules `select` picks fire, with the labels the expression
        keeps from `kept` (a series' text)."""
        rules = [r for r in self.alerts if r["alert"] == name
                 and all(r["labels"].get(k) == v for k, v in select.items())]
        assert rules, (name, select)
        out = []
        for rule in rules:
            kept_labels = _labels(kept) if kept else {}
            annotations = {k: re.sub(r"\{\{ \$labels\.(\w+) \}\}",
                                     lambda m: kept_labels.get(m.group(1), ""), v)
                           for k, v in rule["annotations"].items()}
            out.append({"exp_labels": {**kept_labels, **rule["labels"]},
                        "exp_annotations": annotations})
        return out

    def case(self, name, series, fires, kept=None, why="", clock=None, at=(EVAL_S,), **select):
        """One test: `series` in, `name` firing (the rule `select` picks, with the labels the
        expression keeps from `kept`, a series' text) or quiet, at each time of `at` (seconds).
        `select={}` with several rules of the name (the burn rates' warning and critical): each
        fires."""
        expected = self.expected(name, kept, **select) if fires else []
        if not fires:
            self.expected(name, **select)  # the rule exists
        self.tests.append({
            "name": f"{name}{''.join(f' {v}' for v in select.values())} "
                    f"{'fires' if fires else 'stays quiet'}{': ' + why if why else ''}",
            "interval": f"{(clock or self.clock).step}s",
            "input_series": [dict(s, series=as_sglang_writes(s["series"])) for s in series],
            "alert_rule_test": [{"eval_time": f"{when}s", "alertname": name,
                                 "exp_alerts": expected} for when in at]})

    def ordered(self, critical, warning, series, why, clock=None, kept=None, **band):
        """The critical fires on `series`, and at no evaluation before then is it firing while
        its warning (`warning` with the `band` labels; the same name and severity warning for
        a burn rate) is not."""
        t = clock or self.clock
        step = self.clock.step  # the rules' evaluation interval: ALERTS is written at each
        crit = {"alertname": critical, "alertstate": "firing", "severity": "critical"}
        warn = {"alertname": warning, "alertstate": "firing", "severity": "warning", **band}

        def alerts(labels):
            return "ALERTS{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
        lone = f"{alerts(crit)} unless on() {alerts(warn)}"
        self.tests.append({
            "name": f"{critical} never fires before {warning}{''.join(f' {v}' for v in band.values())}"
                    f": {why}",
            "interval": f"{t.step}s",
            "input_series": [dict(s, series=as_sglang_writes(s["series"])) for s in series],
            # A burn rate's pair shares the name: both fire by then.
            "alert_rule_test": [{"eval_time": f"{EVAL_S}s", "alertname": critical,
                                 "exp_alerts": self.expected(critical, kept) if
                                 critical == warning else
                                 self.expected(critical, kept, severity="critical")}],
            "promql_expr_test": [{"expr": f"count_over_time(({lone})[{EVAL_S}s:{step}s])",
                                  "eval_time": f"{EVAL_S}s", "exp_samples": []}]})


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
        threshold = _threshold(level, settings, floor if below == 0 else None)
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


def _threshold(level, settings, floor=None):
    """The tok/s per user a level's warning holds: what it measured less the tolerance, at the
    floor's band at least the floor (the warning comes before the floor's critical)."""
    measured = level["tok_s_per_user"] * (1 - settings["tolerance"])
    return max(measured, floor) if floor else measured


def _swing_cases(c, release, floors, settings):
    """A load that swings past the proven capacity and back within a window (every 3 minutes
    with a 5m window):
    no window's peak is in a band, yet its streams run slower than the proof promises at each
    moment's load, so the top band's warning fires; at the proof's pace (past the capacity its
    total shared by all) it stays quiet."""
    sel = c.sel
    _proof, cap, levels = _proven(release)
    top = levels[-1]
    threshold = _threshold(top, settings, floors["min_decode_tok_s"] if len(levels) == 1 else None)
    fine = Clock(settings["window"], per_window=20)
    phase_s = seconds(settings["window"]) * 3 // 5
    phase = max(1, phase_s // fine.step)

    def swinging(high, per_user):
        loads = [high] * phase + [cap - 4] * phase
        return [{"series": f"sglang:num_running_reqs{{{sel}}}", "values": fine.each(loads)},
                {"series": f"sglang:inter_token_latency_seconds_count{{{sel}}}",
                 "values": fine.counting([n * per_user(n) * fine.step for n in loads])},
                {"series": f"sglang:inter_token_latency_seconds_sum{{{sel}}}",
                 "values": fine.counting([n * fine.step for n in loads])}]
    c.case("SGLangSlowerThanProven", swinging(cap + 4, lambda n: threshold * 0.6), True,
           clock=fine, concurrency=str(top["concurrency"]),
           why=f"a load swinging {cap + 4} / {cap - 4} every {phase_s / 60:g} min at a bad speed")
    proven = top["tok_s_per_user"]
    for high in (cap + 4, 2 * cap):
        # Past the capacity its streams share the total the proof measured there.
        healthy = swinging(high, lambda n: proven if n <= cap else proven * cap / n)
        for level in levels:
            c.case("SGLangSlowerThanProven", healthy, False, clock=fine,
                   why=f"a load swinging {high} / {cap - 4} at the proof's pace",
                   concurrency=str(level["concurrency"]))


def _requests_every(t, sel, gap_s, tok_s, first_s=60, count=None):
    """Short requests (10 s of decode at `tok_s`, one scrape apart: the running gauge never
    sees them) every `gap_s` seconds from `first_s`, `count` of them (None: all through)."""
    starts = [i for i in range(t.steps + 1) if i * t.step >= first_s
              and (i * t.step - first_s) % gap_s < t.step]
    starts = starts[:count] if count else starts
    inc = [(tok_s * 10, 10, 1) if i in starts else (0, 0, 0) for i in range(t.steps + 1)]
    return [{"series": f"sglang:num_running_reqs{{{sel}}}", "values": t.const(0)},
            {"series": f"sglang:inter_token_latency_seconds_count{{{sel}}}",
             "values": t.counting([x[0] for x in inc], cycle=False)},
            {"series": f"sglang:inter_token_latency_seconds_sum{{{sel}}}",
             "values": t.counting([x[1] for x in inc], cycle=False)},
            {"series": f"sglang:num_requests_total{{{sel}}}",
             "values": t.counting([x[2] for x in inc], cycle=False)}]


def _sparse_cases(c, release, floors, settings):
    """One slow request every few minutes (shorter than a scrape, so the running gauge reads 0)
    at the lightest band: the warning fires within the time its description states (`for` +
    half the sparse window after the first), a request every 4 min within `for`; one slow
    request alone, or sparse requests at the proof's pace, stay quiet."""
    sel = c.sel
    _proof, _cap, levels = _proven(release)
    lightest = levels[0]
    floor = floors["min_decode_tok_s"]
    threshold = _threshold(lightest, settings, floor)
    fine = Clock(settings["window"], per_window=20)
    wait, sparse = seconds(settings["for"]), 3 * seconds(settings["window"])
    stated = wait + sparse // 2
    rule = c.rule("SGLangSlowerThanProven", concurrency=str(lightest["concurrency"]))
    words = f"{stated:g} s" if stated < 120 else f"{stated / 60:g} min"
    assert f"fires within {words} of the first (and a rule evaluation)" in \
        rule["annotations"]["description"], rule["annotations"]["description"]
    first, window = 60, seconds(settings["window"])
    gap = sparse // 2 - window // 10  # a request every 7 min with the default window
    often = window * 4 // 5  # more often than the window: every 4 min with the default
    c.case("SGLangSlowerThanProven", _requests_every(fine, sel, gap, threshold * 0.8, first), True,
           clock=fine, at=(first + stated + c.clock.step,),
           why=f"a slow request every {gap / 60:g} min, within {words} of the first",
           concurrency=str(lightest["concurrency"]))
    c.case("SGLangSlowerThanProven", _requests_every(fine, sel, often, threshold * 0.8, first),
           True, clock=fine, at=(first + wait + c.clock.step,),
           why=f"a slow request every {often / 60:g} min, within {wait / 60:g} min of the first",
           concurrency=str(lightest["concurrency"]))
    c.case("SGLangSlowerThanProven", _requests_every(fine, sel, gap, threshold * 0.8, first, 1),
           False, clock=fine, at=(first + wait + 60, first + stated, EVAL_S),
           why="one slow request alone", concurrency=str(lightest["concurrency"]))
    c.case("SGLangSlowerThanProven", _requests_every(fine, sel, gap, threshold * 1.2, first),
           False, clock=fine, why="sparse requests at the proof's pace",
           concurrency=str(lightest["concurrency"]))
    if floor:
        c.case("SGLangBelowFloor", _requests_every(fine, sel, often, floor * 0.8, first), True,
               clock=fine, why=f"a request below the floor every {often / 60:g} min")


def _order_cases(c, t, release, floors, settings):
    """Every critical with a warning at its signal (WARNED_BY, and each burn rate's pair) on
    series that fire it: at no evaluation is it firing while its warning is not. A critical
    rendered that is in neither WARNED_BY nor UNWARNED fails here: say which it is."""
    sel = c.sel
    _proof, _cap, levels = _proven(release)
    lightest = str(levels[0]["concurrency"])
    criticals = sorted({r["alert"] for r in c.alerts if r["labels"]["severity"] == "critical"})
    paired = {r["alert"] for r in c.alerts if r["labels"]["severity"] == "warning"}
    unsorted = [n for n in criticals if n not in WARNED_BY and n not in UNWARNED
                and n not in paired]
    assert not unsorted, f"criticals neither warned nor in UNWARNED: {unsorted}"
    floor, cap = floors.get("min_decode_tok_s"), floors.get("max_ttft_ms")
    measured = levels[0]["tok_s_per_user"] * (1 - settings["tolerance"])
    for name in criticals:
        if name == "SGLangBelowFloor":
            between = (measured + floor) / 2 if measured < floor else floor * 0.9
            for speed, why in ((between, "between the proven figure less the tolerance and the "
                                "floor"), (floor * 0.7, "far below the floor")):
                c.ordered(name, "SGLangSlowerThanProven", _speed(t, sel, speed, 1),
                          f"{speed:g} tok/s per user, one stream: {why}", concurrency=lightest)
            fine = Clock(settings["window"], per_window=20)
            often = seconds(settings["window"]) * 4 // 5
            c.ordered(name, "SGLangSlowerThanProven",
                      _requests_every(fine, sel, often, floor * 0.7),
                      "sparse requests below the floor", clock=fine, concurrency=lightest)
        elif name == "SGLangFirstTokenAboveCap":
            # Means above the cap whose p99 (in SGLang's buckets) stays under the proven p99
            # x factor where the cap is below it: the p99 alone would not warn.
            value = cap / 1000 * 1.1
            series = (_histogram(t, sel, "sglang:time_to_first_token_seconds", TTFT_BUCKETS,
                                 value, 4)
                      + [{"series": f"sglang:num_running_reqs{{{sel}}}", "values": t.const(1)},
                         _tokens(t, sel, 20)])
            c.ordered(name, "SGLangSlowFirstToken", series,
                      f"first tokens of {value * 1000:g} ms, one stream", concurrency=lightest)
        elif name in paired:
            c.ordered(name, name, _burst(c, t, name), "a fast burn from the start")


def _burst(c, t, name):
    """Series that burn the budget of `name` fast: half the requests fail."""
    sel = c.sel
    if name == "SGLangAbortBudgetBurn":
        return [{"series": f"sglang:num_requests_total{{{sel}}}", "values": t.counter(10)},
                {"series": f"sglang:num_aborted_requests_total{{{sel}}}", "values": t.counter(5)}]
    if name == "SGLangFirstTokenBudgetBurn":
        return _histogram(t, sel, "sglang:time_to_first_token_seconds", TTFT_BUCKETS, 300, 10)
    if name == "SGLangHTTPErrorBudgetBurn":
        return _http(t, sel, 5, 5)
    raise AssertionError(f"no fast burn for {name}: add one")


def _http(t, sel, ok, failed, endpoint="/v1/chat/completions"):
    """SGLang's own HTTP metrics (http_request_metrics.py): `ok` answers 200 and `failed` 503
    a second on `endpoint`, and /metrics scraped."""
    def answered(path, method, status, per_s):
        return {"series": f'sglang:http_responses_total{{{sel},endpoint="{path}",'
                          f'method="{method}",status_code="{status}"}}', "values": t.counter(per_s)}
    return [answered(endpoint, "POST", "200", ok), answered(endpoint, "POST", "503", failed),
            answered("/metrics", "GET", "200", 1 / 15),
            {"series": f'sglang:http_requests_total{{{sel},endpoint="{endpoint}",method="POST"}}',
             "values": t.counter(ok + failed)}]


def _http_cases(c, t):
    """A host with no router: 5xx answers of SGLang's own HTTP server burn the budget; probes
    that answer 503 (a drain) and scrapes are not the serving endpoints."""
    if not c.has("SGLangHTTPErrorBudgetBurn"):
        return
    sel = c.sel
    c.case("SGLangHTTPErrorBudgetBurn", _http(t, sel, 8, 2), True,
           why="20% of the chat answers 503")
    c.case("SGLangHTTPErrorBudgetBurn", _http(t, sel, 10, 0.001), False,
           why="0.01% of the answers 5xx")
    drain = _http(t, sel, 10, 0) + [
        {"series": f'sglang:http_responses_total{{{sel},endpoint="/health",method="GET",'
                   'status_code="503"}', "values": t.counter(5)}]
    c.case("SGLangHTTPErrorBudgetBurn", drain, False, why="/health answers 503 (a drain)")


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
    _swing_cases(c, release, floors, settings)
    _sparse_cases(c, release, floors, settings)
    _http_cases(c, t)
    _order_cases(c, t, release, floors, settings)
    return {"rule_files": [rules_file], "evaluation_interval": f"{t.step}s", "tests": c.tests}


def router_tests(rules, rules_file, router, availability, duration="2m"):
    """The promtool test file (a dict) for the rules sglang_monitoring_router_pack rendered for
    `router`, on series as sglang-router 0.3.2 writes them (smg_worker_health{worker} 1/0/-1,
    smg_worker_cb_state{worker} 0 closed / 1 open / 2 half-open / -1 removed,
    smg_http_responses_total{status_code, error_code}); another router's series fire none of
    this router's rules."""
    t = Clock(duration)
    sel = f'job="sglang-router",sglang_router="{router}"'
    other = 'job="sglang-router",sglang_router="another-router"'
    c = Cases(rules, router, t, sel=sel)
    up = f"up{{{sel}}}"
    c.case("SGLangRouterDown", [{"series": up, "values": t.const(0)}], True, kept=up)
    c.case("SGLangRouterDown", [{"series": up, "values": t.const(1)}], False)
    c.case("SGLangRouterTargetMissing", [{"series": f"up{{{other}}}", "values": t.const(1)}],
           True, kept=up, why="the router's target gone from file_sd")
    c.case("SGLangRouterTargetMissing", [{"series": up, "values": t.const(1)}], False)
    worker = f'{sel},worker="http://10.0.0.11:30000"'
    health, state = f"smg_worker_health{{{worker}}}", f"smg_worker_cb_state{{{worker}}}"
    healthy = {"series": f'smg_worker_health{{{sel},worker="http://10.0.0.12:30000"}}',
               "values": t.const(1)}
    c.case("SGLangRouterWorkerUnhealthy", [{"series": health, "values": t.const(0)}, healthy],
           True, kept=health)
    for value, why in ((1, "healthy"), (-1, "removed by a deploy's drain")):
        c.case("SGLangRouterWorkerUnhealthy", [{"series": health, "values": t.const(value)}],
               False, why=why)
    c.case("SGLangRouterWorkerUnhealthy",
           [{"series": f'smg_worker_health{{{other},worker="http://10.0.0.11:30000"}}',
             "values": t.const(0)}], False, why="another router's replica")
    for value, why in ((1, "open"), (2, "half-open")):
        c.case("SGLangRouterCircuitOpen", [{"series": state, "values": t.const(value)}], True,
               kept=state, why=why)
    for value, why in ((0, "closed"), (-1, "removed")):
        c.case("SGLangRouterCircuitOpen", [{"series": state, "values": t.const(value)}], False,
               why=why)
    no_workers = (f'smg_http_responses_total{{{sel},status_code="503",'
                  'error_code="no_available_workers"}')
    c.case("SGLangRouterNoWorkers", [{"series": no_workers, "values": t.counter(1)}], True,
           why="503 no_available_workers")
    c.case("SGLangRouterNoWorkers",
           [{"series": health, "values": t.const(0)},
            {"series": f'smg_worker_health{{{sel},worker="http://10.0.0.12:30000"}}',
             "values": t.const(0)}], True, why="no replica it holds is healthy")
    c.case("SGLangRouterNoWorkers", [{"series": health, "values": t.const(0)}, healthy], False,
           why="one replica of two healthy")

    def answers(ok, failed, where=sel):
        return [{"series": f'smg_http_responses_total{{{where},status_code="200",error_code=""}}',
                 "values": t.counter(ok)},
                {"series": f'smg_http_responses_total{{{where},status_code="502",'
                           'error_code="backend_error"}', "values": t.counter(failed)}]
    c.case("SGLangRouterErrorBudgetBurn", answers(8, 2), True, why="20% 5xx")
    c.case("SGLangRouterErrorBudgetBurn", answers(10, 0.001 * 10 * (1 - availability)), False,
           why="well within the budget")
    c.case("SGLangRouterErrorBudgetBurn", answers(5, 5, other), False,
           why="another router's 5xx")
    c.ordered("SGLangRouterErrorBudgetBurn", "SGLangRouterErrorBudgetBurn", answers(5, 5),
              "a fast burn from the start")
    return {"rule_files": [rules_file], "evaluation_interval": f"{t.step}s", "tests": c.tests}


def split(tests, rules, directory, named=None):
    """`tests` as one promtool test file per set of alerts its cases judge, each with a rules
    file of only those alerts and the recording rules they read (promtool evaluates every rule
    of its files at every step of every case: the same verdicts, a fraction of the work),
    written in `directory`, naming each other as in `named` (where promtool will read them;
    default `directory`). Returns the test files' paths there, for one `promtool test rules`."""
    directory = Path(directory)
    named = Path(named or directory)
    alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
    records = [r for g in rules["groups"] for r in g["rules"] if "record" in r]
    by_names = {}
    for case in tests["tests"]:
        names = {t["alertname"] for t in case["alert_rule_test"]}
        for expr in case.get("promql_expr_test", []):
            names |= set(re.findall(r'alertname="(\w+)"', expr["expr"]))
        by_names.setdefault(tuple(sorted(names)), []).append(case)
    paths = []
    for i, (names, cases) in enumerate(sorted(by_names.items())):
        kept = [r for r in alerts if r["alert"] in names]
        read = [r for r in records if any(r["record"] in a["expr"] for a in kept)]
        groups = [{"name": "records", "rules": read}] if read else []
        rules_file = directory / f"rules-{i}.yml"
        rules_file.write_text(yaml.safe_dump({"groups": groups + [
            {"name": "alerts", "rules": kept}]}, sort_keys=False))
        test_file = directory / f"tests-{i}.yml"
        test_file.write_text(dump(dict(tests, rule_files=[str(named / rules_file.name)],
                                       tests=cases)))
        paths.append(str(named / test_file.name))
    return paths


def not_passed(output, files):
    """The test files in `files` whose block in `promtool test rules` output does not say
    SUCCESS (each block opens "Unit Testing:  <file>"; a check's "SUCCESS: N rules found"
    counts for no file)."""
    verdicts = dict(re.findall(r"^Unit Testing:\s+(\S+)\n\s+(\w+)", output, re.M))
    return [f for f in files if verdicts.get(f) != "SUCCESS"]


def counts(tests):
    """(cases where an alert fires, cases where it stays quiet)."""
    fires = sum(1 for case in tests["tests"] if case["alert_rule_test"][0]["exp_alerts"])
    return fires, len(tests["tests"]) - fires


def dump(tests):
    return yaml.safe_dump(tests, sort_keys=False, width=200)
