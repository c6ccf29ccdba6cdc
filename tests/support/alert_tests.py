"""promtool unit tests for a rendered rules file: each alert fires on series that should fire it
and stays quiet on series that should not.

The series are built from the release's figures and the settings, computed here on their own
(not read back from the rules' expressions), so a threshold the pack got wrong fails a case.
Used by molecule/default/tests/test_monitoring.py with the promtool of the molecule host.
"""

import re

import yaml

EVAL_S = 1800  # every case is judged once its rates and `for` have settled
UNITS = {"s": 1, "m": 60, "h": 3600}


def seconds(duration):
    """A Prometheus duration such as 30s, 5m, 1h as seconds."""
    return int(duration[:-1]) * UNITS[duration[-1]]


class Clock:
    """Samples every `step` seconds (at least three in a rate window) up past EVAL_S."""

    def __init__(self, window):
        self.step = max(1, min(60, seconds(window) // 3))
        self.steps = EVAL_S // self.step + 10

    def const(self, value):
        return f"{value:g}x{self.steps}"

    def counter(self, per_second):
        """A counter growing by `per_second` (one increment per sample)."""
        return f"0+{per_second * self.step:g}x{self.steps}"


def _speed(t, sel, tok_s, load):
    """Decode at `tok_s` per stream with `load` requests running: SGLang's inter-token histogram
    grows its sum by the decode seconds, its count by the tokens."""
    return [{"series": f"sglang:inter_token_latency_seconds_count{{{sel}}}",
             "values": t.counter(tok_s)},
            {"series": f"sglang:inter_token_latency_seconds_sum{{{sel}}}", "values": t.counter(1)},
            {"series": f"sglang:num_running_reqs{{{sel}}}", "values": t.const(load)}]


def _ttft(t, sel, seconds_each, load=1):
    return [{"series": f"sglang:time_to_first_token_seconds_sum{{{sel}}}",
             "values": t.counter(seconds_each)},
            {"series": f"sglang:time_to_first_token_seconds_count{{{sel}}}", "values": t.counter(1)},
            {"series": f"sglang:num_running_reqs{{{sel}}}", "values": t.const(load)}]


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

    def case(self, name, series, fires, kept=None, **select):
        """One test: `series` in, `name` firing (with the labels the expression keeps from
        `kept`, a series' text) or quiet."""
        rule = self.rule(name, **select)
        expected = []
        if fires:
            kept_labels = _labels(kept) if kept else {}
            labels = {**kept_labels, **rule["labels"]}
            annotations = {k: re.sub(r"\{\{ \$labels\.(\w+) \}\}",
                                     lambda m: kept_labels.get(m.group(1), ""), v)
                           for k, v in rule["annotations"].items()}
            expected = [{"exp_labels": labels, "exp_annotations": annotations}]
        self.tests.append({
            "name": f"{name} {'fires' if fires else 'stays quiet'}: "
                    + ", ".join(f"{s['series']}={s['values']}" for s in series)[:300],
            "interval": f"{self.clock.step}s",
            "input_series": series,
            "alert_rule_test": [{"eval_time": f"{EVAL_S}s", "alertname": name,
                                 "exp_alerts": expected}]})


def promtool_tests(rules, rules_file, host, release, floors, settings):
    """The promtool test file (a dict) for `rules` as sglang_monitoring_pack rendered them."""
    t = Clock(settings["window"])
    c = Cases(rules, host, t)
    sel, drift_sel = c.sel, f'sglang_host="{host}"'
    up = f"up{{{sel}}}"
    c.case("SGLangDown", [{"series": up, "values": t.const(0)}], True, kept=up)
    c.case("SGLangDown", [{"series": up, "values": t.const(1)}], False)

    levels = sorted(release["smoke"]["levels"], key=lambda lv: lv["concurrency"])
    floor = floors["min_decode_tok_s"]
    lightest = levels[0]["concurrency"]
    c.case("SGLangBelowFloor", _speed(t, sel, floor * 0.8, lightest), True)
    c.case("SGLangBelowFloor", _speed(t, sel, floor * 1.05, lightest), False)
    # Slow because loaded: not below the floor, which holds at the smoke test's first level.
    c.case("SGLangBelowFloor", _speed(t, sel, floor * 0.5, lightest + 3), False)

    below = 0
    for level in levels:
        n, threshold = level["concurrency"], level["decode_tok_s_per_user"] * (1 - settings["tolerance"])
        load = n if below == 0 else (below + n) / 2
        c.case("SGLangSlowerThanProven", _speed(t, sel, threshold * 0.95, load), True,
               concurrency=str(n))
        c.case("SGLangSlowerThanProven", _speed(t, sel, threshold * 1.05, load), False,
               concurrency=str(n))
        below = n
    # Beyond the heaviest load the release proved: no expectation.
    c.case("SGLangSlowerThanProven", _speed(t, sel, 1, levels[-1]["concurrency"] + 8), False,
           concurrency=str(levels[-1]["concurrency"]))

    worst = max(lv["ttft_ms_p99"] for lv in levels) / 1000 * settings["ttft_factor"]
    c.case("SGLangSlowFirstToken", _ttft(t, sel, worst * 1.1), True)
    c.case("SGLangSlowFirstToken", _ttft(t, sel, worst * 0.9), False)

    accept = release["smoke"]["accept_length"] * settings["accept_fraction"]
    tokens = {"series": f"sglang:generation_tokens_total{{{sel}}}", "values": t.counter(50)}
    idle = {"series": f"sglang:generation_tokens_total{{{sel}}}", "values": t.const(5000)}
    gauge = f"sglang:spec_accept_length{{{sel}}}"
    c.case("SGLangAcceptLengthLow", [{"series": gauge, "values": t.const(accept * 0.9)}, tokens], True)
    c.case("SGLangAcceptLengthLow", [{"series": gauge, "values": t.const(accept * 1.1)}, tokens], False)
    # An idle server's last accept length says nothing about now.
    c.case("SGLangAcceptLengthLow", [{"series": gauge, "values": t.const(accept * 0.5)}, idle], False)

    queue = f"sglang:num_queue_reqs{{{sel}}}"
    c.case("SGLangQueueGrowing", [{"series": queue, "values": f"0+1x{t.steps}"}], True)
    c.case("SGLangQueueGrowing", [{"series": queue, "values": t.const(6)}], False)

    usage = f"sglang:token_usage{{{sel}}}"
    c.case("SGLangKVCacheFull", [{"series": usage, "values": t.const(min(0.999, settings["kv_usage"] + 0.03))}], True)
    c.case("SGLangKVCacheFull", [{"series": usage, "values": t.const(settings["kv_usage"] - 0.2)}], False)

    drifted = (f'sglang_drift{{{drift_sel},release="{release["id"]}",setting="decode_cuda_graph",'
               'recorded="on",live="off"}')
    c.case("SGLangResolutionDrift", [{"series": drifted, "values": t.const(1)}], True, kept=drifted)
    c.case("SGLangResolutionDrift", [{"series": drifted, "values": t.const(0)}], False)

    success = f'sglang_drift_check_success{{{drift_sel},release="{release["id"]}"}}'
    c.case("SGLangDriftCheckFailing", [{"series": success, "values": t.const(0)}], True, kept=success)
    c.case("SGLangDriftCheckFailing", [{"series": success, "values": t.const(1)}], False)

    stamp = f'sglang_drift_check_timestamp_seconds{{{drift_sel},release="{release["id"]}"}}'
    # promtool's clock starts at 0: a check at every sample keeps the stamp at time().
    c.case("SGLangDriftCheckStale", [{"series": stamp, "values": t.counter(1)}], False)
    c.case("SGLangDriftCheckStale", [{"series": success, "values": t.const(1)}], True)
    return {"rule_files": [rules_file], "evaluation_interval": f"{t.step}s", "tests": c.tests}


def dump(tests):
    return yaml.safe_dump(tests, sort_keys=False, width=200)
