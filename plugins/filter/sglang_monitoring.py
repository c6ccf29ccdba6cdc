"""The observability pack of the serving release: Prometheus targets, alert rules whose
thresholds are that release's own proven figures, and a Grafana dashboard.

Generic panels say a server is slow; these rules say it is slower than the release proved it
could be at its workload (its proof: SGLang's serving benchmark, level by level, up to its proven
capacity), at the load it serves now, and name the figure. A deploy or a rollback renders the
pack again from the release that then serves. Unit-tested in tests/unit/test_sglang_monitoring.py;
promtool runs the rules against series in the molecule default scenario
(tests/support/alert_tests.py). Each alert's runbook is a section of docs/alerts.md.

The load a figure is judged at is the most requests that ran at once in the window (max over
time), not their time average: decode speed is token-weighted (the inter-token histogram), so a
burst of 16 streams in a quiet minute decodes at the speed of 16, and is judged against what the
release proved at 16, not at 1. Traffic sparser than the window is judged over three windows
(at least two requests finished there); a load that swings above and below the proven capacity
within a window is held to the token rate the proof promises at each moment's load. A critical
that has a warning at its signal never fires before it (WARNED_BY).
"""

import re

from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import to_nice_json, to_nice_yaml

from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors

JOB = "sglang"
ROUTER_JOB = "sglang-router"
DASHBOARD_UID = "sglang-deploy"
# The project's own recording rules (the SLO ratios), apart from SGLang's `sglang:` names.
NS = "sglang_deploy"
# Multi-window burn rates (the SRE workbook's "alerting on SLOs", table 5-8): a page when the
# budget of 30 days would be gone in 2 days (14.4 x, over 1 h and 5 m), a ticket in 5 (6 x, over
# 6 h and 30 m).
BURNS = (("critical", 14.4, "1h", "5m"), ("warning", 6, "6h", "30m"))
# The warning also holds the page's fast burn and waits as long: a page never comes before its
# ticket (the Alertmanager example inhibits the ticket while the page fires).
BURN_WAIT = {"critical": "2m", "warning": "2m"}
# Every window a burn rate reads, shortest first: one recording rule each per ratio.
BURN_WINDOWS = tuple(sorted({w for burn in BURNS for w in burn[2:]},
                            key=lambda w: int(w[:-1]) * {"m": 60, "h": 3600}[w[-1]]))
RUNBOOKS = "https://github.com/sglang-deploy/sglang-deploy/blob/main/docs/alerts.md"
# A critical with a warning at the same signal, held to fire no earlier than it: the warning's
# condition holds whenever the critical's does (a threshold at least as strict, the same bands)
# and it waits less. {critical: (warning, the warning's label that picks the critical's band)}.
# The burn rates' pairs share a name (severity tells them apart).
WARNED_BY = {"SGLangBelowFloor": ("SGLangSlowerThanProven", "concurrency"),
             "SGLangFirstTokenAboveCap": ("SGLangSlowFirstToken", "concurrency")}
# The criticals with no warning below them at their signal (a target gone, a scheduler stuck).
UNWARNED = ("SGLangDown", "SGLangTargetMissing", "SGLangNoProgress", "SGLangResolutionDrift",
            "SGLangRouterDown", "SGLangRouterTargetMissing", "SGLangRouterNoWorkers")
# SGLang 0.5.23's own HTTP metrics (srt/observability/http_request_metrics.py, with
# --enable-metrics): the endpoints that serve requests, not the probes, /metrics or the admin
# ones, so that a scrape or a drain's 503 on /health is no error of the budget.
HTTP_SERVING = ('endpoint=~"/generate|/v1/.+|/invocations|/encode|/classify",'
                'endpoint!~"/v1/models.*|/v1/loads"')


def _rate_ratio(over, under, sel, window, by=""):
    """sum(rate(over)) / sum(rate(under)), summed `by` labels (the dashboard's per host)."""
    total = f"sum by ({by}) " if by else "sum"
    return (f"{total}(rate({over}{{{sel}}}[{window}])) / "
            f"{total}(rate({under}{{{sel}}}[{window}]))")


def _per_user_tok_s(sel, window, by=""):
    """Tokens per second per stream: SGLang's inter-token histogram grows its sum by each decode
    interval and its count by the tokens it brought (metrics_collector.py,
    observe_inter_token_latency); NaN without traffic, which no comparison fires on."""
    return _rate_ratio("sglang:inter_token_latency_seconds_count",
                       "sglang:inter_token_latency_seconds_sum", sel, window, by)


def _mean_ttft_s(sel, window, by=""):
    return _rate_ratio("sglang:time_to_first_token_seconds_sum",
                       "sglang:time_to_first_token_seconds_count", sel, window, by)


def _quantile(name, q, sel, window, by=""):
    """A quantile of one of SGLang's histograms over the window (NaN without observations)."""
    keep = ", ".join(filter(None, ["le", by]))
    return f"histogram_quantile({q:g}, sum by ({keep}) (rate({name}_bucket{{{sel}}}[{window}])))"


def _peak_load(sel, window):
    """The most requests that ran at once in the window (sampled at each evaluation), at least
    1: a request shorter than the scrape interval streams tokens the gauge never saw."""
    return f"clamp_min(max_over_time(sum(sglang:num_running_reqs{{{sel}}})[{window}:]), 1)"


def _traffic(sel, window):
    """Tokens streaming in the window: SGLang's inter-token histogram grows at every streamed
    chunk (tokenizer_manager.py, collect_metrics), its token counters only when a request
    finishes, so a long answer is traffic while it streams."""
    return f"sum(rate(sglang:inter_token_latency_seconds_count{{{sel}}}[{window}])) > 0"


def _progress(sel, window):
    """Work done in the window, 0 when none: tokens streamed (the inter-token count), decode
    forward passes (sglang:cuda_graph_passes_total, a pass per decode batch whether its requests
    stream or not), tokens of requests that finished. A series SGLang has not written yet counts
    0, so a hung scheduler that never streamed reads 0 too."""
    return " + ".join(
        f"(sum(increase({series}{{{sel}{extra}}}[{window}])) or vector(0))"
        for series, extra in (("sglang:inter_token_latency_seconds_count", ""),
                              ("sglang:cuda_graph_passes_total", ',mode=~"decode_.*"'),
                              ("sglang:generation_tokens_total", "")))


def _le(bound):
    """A selector of the histogram bucket at `bound` that holds whatever text writes it:
    prometheus_client (SGLang's) writes le="4.0", Prometheus 3 normalises every le to that
    form, a hand-written exposition may say le="4"."""
    forms = sorted({_g(bound), repr(float(bound))})
    # A regex (RE2) inside a PromQL string: each of its backslashes written twice.
    return 'le=~"' + "|".join(re.escape(f).replace("\\", "\\\\") for f in forms) + '"'


def _g(value):
    return f"{value:g}"


def _times(duration, k):
    """k times a Prometheus duration such as 5m."""
    return f"{k * int(duration[:-1])}{duration[-1]}"


def _double(duration):
    """Twice a Prometheus duration (a critical's `for`: its warning fires first)."""
    return _times(duration, 2)


def _sparse(window):
    """The window sparse traffic is judged over: three of the rules' windows."""
    return _times(window, 3)


def _seconds(duration):
    return int(duration[:-1]) * {"s": 1, "m": 60, "h": 3600}[duration[-1]]


def _minutes(seconds):
    return f"{seconds:g} s" if seconds < 120 else f"{seconds / 60:g} min"


def _prompts(workload):
    """The prompts a proof's figures were measured with, in words (SGLang's benchmark: random-ids
    lengths uniform in [floor(L x ratio), L], datasets/common.py)."""
    w = workload or {}
    length, ratio = w.get("input_len"), w.get("range_ratio")
    if w.get("dataset") == "custom":
        return f"prompts of the custom dataset {w.get('dataset_path') or '?'}"
    if not length:
        return "prompts of the workload (no input_len recorded)"
    low = max(1, int(length * ratio)) if isinstance(ratio, (int, float)) and ratio < 1 else length
    span = f"{low}-{length}" if low != length else f"{length}"
    what = ("questions" if w.get("dataset") == "generated-shared-prefix" else "prompts")
    return (f"{what} of {span} tokens (workload input_len {length}, range_ratio "
            f"{_g(ratio if ratio is not None else 1)}, dataset {w.get('dataset', '?')})")


def _proven_levels(release):
    """(proof, levels up to the proven capacity that met every SLO, lowest first), or (None, [])."""
    proof = release.get("workload_proof") or {}
    capacity = (proof.get("capacity") or {}).get("concurrency")
    if not capacity:
        return None, []
    levels = [lv for lv in proof.get("levels") or [] if isinstance(lv, dict)
              and lv.get("met") and lv.get("concurrency") and lv["concurrency"] <= capacity]
    return proof, sorted(levels, key=lambda lv: lv["concurrency"])


class _Pack:
    """The rules of one host, with the evidence each threshold came from."""

    def __init__(self, release, host, settings):
        self.release, self.host, self.s = release, host, settings
        self.sel = f'job="{JOB}",sglang_host="{host}"'
        self.rid = release.get("id") or "?"
        self.proof = (f"release {self.rid} (sglang {release.get('sglang_version', '?')}, "
                      f"proven {release.get('proven', '?')})")
        self.alerts, self.records, self.thresholds = [], [], []

    def alert(self, name, expr, severity, summary, evidence, wait=None, **labels):
        self.alerts.append({
            "alert": name, "expr": expr, "for": wait or self.s["for"],
            "labels": {"severity": severity, "sglang_host": self.host, "release": self.rid,
                       **labels},
            "annotations": {"summary": summary, "description": evidence,
                            "runbook_url": f"{self.s['runbook_url']}#{name.lower()}"}})
        self.thresholds.append(f"{name}: {evidence}")

    def record(self, name, value, **labels):
        """A series holding a figure of the release, for the dashboard to draw beside the live one."""
        self.records.append({"record": name, "expr": f"vector({_g(value)})",
                             "labels": dict(labels, sglang_host=self.host, release=self.rid)})


def _at(low, high):
    """The band (low, high] in words."""
    if low + 1 == high:
        return f"{high} request at once" if high == 1 else f"{high} requests at once"
    return f"{low + 1}-{high} requests at once"


def _band(pack, low, high, window=None):
    """The load band (low, high]: the peak load of the window within it, with tokens flowing."""
    sel, window = pack.sel, window or pack.s["window"]
    return (f"on() ({_peak_load(sel, window)}) > {low} and on() ({_peak_load(sel, window)}) "
            f"<= {high} and on() ({_traffic(sel, window)})")


def _judged(pack, condition, low, high, swing=""):
    """`condition(window)` in the band (low, high] over the rules' window; where no token
    streamed in it, over the sparse window (three windows) once two requests finished there, so
    that a slow request every few minutes keeps the alert's `for` instead of resetting it; and
    `swing`, a condition of its own, or'ed in (the top band's load that swings past the
    capacity)."""
    sel, window = pack.sel, pack.s["window"]
    sparse = _sparse(window)
    branches = [f"({condition(window)}) and {_band(pack, low, high)}",
                f"(({condition(sparse)}) and {_band(pack, low, high, sparse)} and on() "
                f"(sum(increase(sglang:num_requests_total{{{sel}}}[{sparse}])) >= 2)) "
                f"unless on() ({_traffic(sel, window)})"]
    if swing:
        branches.append(swing)
    return " or ".join(f"({b})" for b in branches)


def _sparse_words(pack, wait=None):
    """When a condition is judged on sparse traffic, and how soon a rule that waits `wait`
    (default the rules' `for`) fires there."""
    window, wait = pack.s["window"], wait or pack.s["for"]
    sparse = _seconds(_sparse(window))
    return (f"judged over {_sparse(window)} when no token streamed in {window} (2 requests "
            f"finished there): a slow request at least every {_minutes(sparse / 2)} fires within "
            f"{_minutes(_seconds(wait) + sparse / 2)} of the first (and a rule evaluation)")


def _speed_rules(pack, floors, proof, levels):
    s, sel, window = pack.s, pack.sel, pack.s["window"]
    floor = floors.get("min_decode_tok_s")
    lightest = levels[0]["concurrency"] if levels else 1
    if floor:
        pack.record("sglang:release_floor_tok_s_per_user", floor)
        pack.alert("SGLangBelowFloor",
                   _judged(pack, lambda w: f"({_per_user_tok_s(sel, w)}) < {_g(floor)}", 0,
                           lightest),
                   "critical", f"{pack.host}: tokens per user below the floor",
                   f"below {_g(floor)} tok/s per user with at most {_at(0, lightest)}: "
                   f"the floor every release of this host must meet "
                   f"(sglang_smoke_min_decode_tok_s); {pack.proof}; "
                   f"{_sparse_words(pack, _double(s['for']))}; it "
                   "waits twice as long as SGLangSlowerThanProven, which fires first",
                   wait=_double(s["for"]))
    below = 0
    for level in levels:
        n, proven = level["concurrency"], level.get("tok_s_per_user")
        if proven:
            measured = round(proven * (1 - s["tolerance"]), 2)
            # At the floor's band the warning holds at least the floor, so that it fires before
            # SGLangBelowFloor at the same speed (WARNED_BY).
            threshold = max(measured, floor) if floor and below == 0 else measured
            raised = (f", raised to the floor {_g(floor)} so that it fires before "
                      "SGLangBelowFloor" if threshold != measured else "")
            swing, swing_words = "", ""
            if level is levels[-1]:
                swing = _swing(pack, n, threshold)
                swing_words = (f"; a load that swings past {n} and back within {window} is "
                               f"held to {_g(round(threshold * n, 2))} tok/s shared by the most "
                               f"that ran at once ({_g(threshold)} per stream up to {n}, "
                               f"{_g(round(threshold * n, 2))} in all past it)")
            pack.record("sglang:release_proven_tok_s_per_user", proven, concurrency=str(n))
            pack.alert("SGLangSlowerThanProven",
                       _judged(pack, lambda w, t=threshold: f"({_per_user_tok_s(sel, w)}) < {_g(t)}",
                               below, n, swing),
                       "warning", f"{pack.host}: slower than its release proved at this load",
                       f"below {_g(threshold)} tok/s per user with {_at(below, n)}: {pack.proof} "
                       f"measured {_g(proven)} at concurrency {n} ({proof['measured_by']}), less "
                       f"{s['tolerance']:.0%} (sglang_monitoring_tolerance){raised}{swing_words}; "
                       f"{_sparse_words(pack)}", concurrency=str(n))
        _latency_rules(pack, proof, level, below,
                       floors.get("max_ttft_ms") if below == 0 else None)
        below = n


def _swing(pack, capacity, threshold):
    """A window whose load went past the proven capacity and back (its peak above, its least at
    or below it), which no band judges (its peak is past the top one): the proof promises
    `threshold` per stream up to the capacity and, past it, the capacity's streams' worth
    shared by all (the total the release proved there: a batch past it streams more in all, not
    less, as the reference proof's level 32 did). Over the window that is at least `threshold`
    x capacity / peak per stream, token-weighted as the live speed is (each moment's promise
    min(N, capacity) x threshold is at least N x threshold x capacity / peak): read from SGLang's
    own inter-token histogram and the window's peak, no time average of a sampled gauge."""
    sel, window = pack.sel, pack.s["window"]
    running = f"sum(sglang:num_running_reqs{{{sel}}})"
    return (f"(({_per_user_tok_s(sel, window)}) < {_g(round(threshold * capacity, 2))} / "
            f"max_over_time({running}[{window}:])) "
            f"and on() (max_over_time({running}[{window}:]) > {capacity}) "
            f"and on() (min_over_time({running}[{window}:]) <= {capacity}) "
            f"and on() ({_traffic(sel, window)})")


def _latency_rules(pack, proof, level, below, cap_ms=None):
    """TTFT and ITL p99 from SGLang's histograms against the p99 proven at this band; at the
    lightest band the TTFT warning also holds the cap's mean (`cap_ms`), so that it fires before
    SGLangFirstTokenAboveCap (WARNED_BY)."""
    n, sel = level["concurrency"], pack.sel
    prompts = _prompts(proof.get("workload"))
    for name, metric, figure, factor, what in (
            ("SGLangSlowFirstToken", "sglang:time_to_first_token_seconds", "ttft_ms",
             pack.s["ttft_factor"], "first token"),
            ("SGLangSlowTokens", "sglang:inter_token_latency_seconds", "itl_ms",
             pack.s["itl_factor"], "inter-token latency")):
        p99 = ((level.get(figure) or {}).get("p99"))
        # The own bench times each request's mean TPOT, not the gaps between tokens: no ITL
        # quantile to hold the live one to.
        if not p99 or (figure == "itl_ms" and proof["measured_by"] != "sglang.bench_serving"):
            continue
        limit = round(p99 * factor / 1000, 4)
        pack.record(f"sglang:release_proven_{figure[:-3]}_p99_seconds", p99 / 1000,
                    concurrency=str(n))
        cap = cap_ms if figure == "ttft_ms" else None

        def condition(w, metric=metric, limit=limit, cap=cap):
            over = f"({_quantile(metric, 0.99, sel, w)}) > {_g(limit)}"
            return f"{over} or ({_mean_ttft_s(sel, w)}) > {_g(cap / 1000)}" if cap else over
        capped = (f"; or a mean above the cap {_g(cap)} ms (sglang_smoke_max_ttft_ms), so that "
                  "it fires before SGLangFirstTokenAboveCap" if cap else "")
        proven_at = f" with {prompts}" if figure == "ttft_ms" else ""
        pack.alert(name, _judged(pack, condition, below, n),
                   "warning", f"{pack.host}: {what} p99 slower than proven at this load",
                   f"{what} p99 above {_g(limit * 1000)} ms with {_at(below, n)}: "
                   f"{pack.proof} measured p99 {_g(p99)} ms at concurrency {n}{proven_at}, "
                   f"x {_g(factor)} (sglang_monitoring_{figure[:-3]}_factor){capped}; "
                   f"{_sparse_words(pack)}", concurrency=str(n))


def _capacity_rules(pack, proof):
    sel, window = pack.sel, pack.s["window"]
    capacity = proof["capacity"]["concurrency"]
    pack.record("sglang:release_proven_capacity", capacity)
    pack.alert("SGLangAboveProvenCapacity",
               f"min_over_time(sum(sglang:num_running_reqs{{{sel}}})[{window}:]) > {capacity}",
               "warning", f"{pack.host}: more load than the release proved it serves",
               f"more than {capacity} requests running all through {window}: {pack.proof} met its "
               f"SLOs up to {capacity} at its workload ({proof['capacity']['reason']}); add "
               "replicas or shed load")


def _ttft_cap_rule(pack, floors, lightest):
    sel = pack.sel
    cap = floors.get("max_ttft_ms")
    if cap:
        pack.alert("SGLangFirstTokenAboveCap",
                   _judged(pack, lambda w: f"({_mean_ttft_s(sel, w)}) > {_g(cap / 1000)}", 0,
                           lightest),
                   "critical", f"{pack.host}: first token slower than the cap",
                   f"mean TTFT above {_g(cap)} ms with at most {_at(0, lightest)} "
                   f"(sglang_smoke_max_ttft_ms); {pack.proof}; "
                   f"{_sparse_words(pack, _double(pack.s['for']))}; it "
                   "waits twice as long as SGLangSlowFirstToken, which fires first",
                   wait=_double(pack.s["for"]))


def _accept_rule(pack):
    measured = (pack.release.get("smoke") or {}).get("accept_length")
    if not measured:
        return
    threshold = round(measured * pack.s["accept_fraction"], 3)
    sel, window = pack.sel, pack.s["window"]
    pack.record("sglang:release_proven_accept_length", measured)
    pack.alert("SGLangAcceptLengthLow",
               f"max(avg_over_time(sglang:spec_accept_length{{{sel}}}[{window}])) < "
               f"{_g(threshold)} and on() ({_traffic(sel, window)})",
               "warning", f"{pack.host}: speculative decoding accepts fewer tokens than proven",
               f"MTP accept length below {_g(threshold)}: {pack.proof} measured {_g(measured)}, "
               f"x {pack.s['accept_fraction']:g} (sglang_monitoring_accept_fraction); long "
               "contexts or a changed workload lower it")


def _health_rules(pack):
    sel, s, window = pack.sel, pack.s, pack.s["window"]
    pack.alert("SGLangDown", f"up{{{sel}}} == 0", "critical", f"{pack.host}: SGLang is down",
               f"Prometheus cannot scrape {pack.host}'s /metrics; {pack.proof} should serve")
    pack.alert("SGLangTargetMissing", f"absent(up{{{sel}}})", "critical",
               f"{pack.host}: no SGLang target in Prometheus",
               f"Prometheus has no target for {pack.host} (job {JOB}): the file-based target "
               "is gone or unreadable, so no other rule of this host can fire")
    pack.alert("SGLangNoProgress",
               f"min_over_time(sum(sglang:num_running_reqs{{{sel}}})[{window}:]) > 0 and on() "
               f"({_progress(sel, window)}) == 0",
               "critical", f"{pack.host}: requests run but no token comes out",
               f"requests running all through {window} and not one token streamed, decode pass "
               "run or request finished: the scheduler is stuck while /metrics still answers")
    pack.alert("SGLangQueueStuck",
               f"min_over_time(sum(sglang:num_queue_reqs{{{sel}}})[{window}:]) > 0",
               "warning", f"{pack.host}: requests wait all the time",
               f"the waiting queue was never empty in {window}: more load than the release "
               "serves, or a KV cache too small for it")
    pack.alert("SGLangKVCacheFull", f"max(sglang:token_usage{{{sel}}}) > {_g(s['kv_usage'])}",
               "warning", f"{pack.host}: KV cache nearly full",
               f"KV cache usage above {s['kv_usage']:.0%} (sglang_monitoring_kv_usage): "
               "requests get retracted or wait")


def _drift_rules(pack):
    s = pack.s
    host = f'sglang_host="{pack.host}"'
    # Over three runs of the check: a failing run writes no sglang_drift series, and must not
    # reset the alert's `for` (the drift it last saw still stands until a run says otherwise).
    held = f"{3 * int(s['drift_interval_s'])}s"
    pack.alert("SGLangResolutionDrift",
               f"last_over_time(sglang_drift{{{host}}}[{held}]) == 1", "critical",
               f"{pack.host}: SGLang resolved {{{{ $labels.setting }}}} differently",
               "the live server resolves {{ $labels.setting }} as {{ $labels.live }}; "
               f"{pack.proof} was proven with {{{{ $labels.recorded }}}} (drift check, "
               "textfile collector)")
    pack.alert("SGLangDriftCheckFailing", f"sglang_drift_check_success{{{host}}} == 0", "warning",
               f"{pack.host}: the drift check cannot compare",
               "the drift check could not read the server or the release's record "
               "(sglang_drift_check_error names why; journalctl -u <service>-drift)")
    stale = 3 * int(s["drift_interval_s"])
    pack.alert("SGLangDriftCheckStale",
               f"time() - sglang_drift_check_timestamp_seconds{{{host}}} > {stale} or "
               f"absent(sglang_drift_check_timestamp_seconds{{{host}}})", "warning",
               f"{pack.host}: the drift check has not run",
               f"no drift check for {stale} s (3 runs of its timer): is node_exporter's textfile "
               "collector reading the file, and the timer enabled?")


def _slo_rules(pack, proof):
    """Burn rates of the error budgets: aborted requests against sglang_monitoring_availability,
    and first tokens slower than the workload's TTFT objective against its 1% (a p99)."""
    sel, slo = pack.sel, proof.get("slo")
    labels = {"sglang_host": pack.host, "release": pack.rid}
    budget = round(1 - pack.s["availability"], 6)
    pack.records += _burn_records(
        "aborted_ratio", lambda w: f"sum(rate(sglang:num_aborted_requests_total{{{sel}}}[{w}])) / "
                                   f"sum(rate(sglang:num_requests_total{{{sel}}}[{w}]))", labels)
    _burn(pack, "SGLangAbortBudgetBurn", "aborted_ratio", budget,
          f"requests aborted faster than an availability of {pack.s['availability']:.2%} allows "
          "(sglang_monitoring_availability)")
    ttft_ms = (slo or {}).get("ttft_p99_ms")
    bucket = next((b for b in TTFT_BUCKETS_S if ttft_ms and b * 1000 >= ttft_ms), None)
    if not bucket:
        return
    pack.records += _burn_records(
        "ttft_slow_ratio",
        lambda w: f"1 - sum(rate(sglang:time_to_first_token_seconds_bucket{{{sel},"
                  f"{_le(bucket)}}}[{w}])) / "
                  f"sum(rate(sglang:time_to_first_token_seconds_count{{{sel}}}[{w}]))", labels)
    _burn(pack, "SGLangFirstTokenBudgetBurn", "ttft_slow_ratio", 0.01,
          f"first tokens slower than {_g(bucket * 1000)} ms (the workload's TTFT p99 objective, "
          f"{_g(ttft_ms)} ms, at SGLang's next bucket, set for {_prompts(proof.get('workload'))}) "
          "more often than 1% allows")


def _burn_records(ratio, expr, labels):
    """One SLO ratio's recording rules in the project's namespace, one per burn window
    (`expr(window)` is the ratio over it)."""
    return [{"record": f"{NS}:{ratio}:rate{w}", "expr": expr(w), "labels": dict(labels)}
            for w in BURN_WINDOWS]


def _burn_rates(ratio, match, budget):
    """(severity, words, long window, expr) of each burn rate of one ratio's budget: the ratio
    above factor x budget over both windows, `match` the series' labels; the warning holds the
    critical's burn too (with its own), so that it never fires later (BURN_WAIT)."""
    def over(factor, long, short):
        limit = _g(round(factor * budget, 6))
        return (f"{NS}:{ratio}:rate{long}{{{match}}} > {limit} and "
                f"{NS}:{ratio}:rate{short}{{{match}}} > {limit}")
    page = BURNS[0]
    for severity, factor, long, short in BURNS:
        words = f"{factor:g} x the budget over {long} and {short}"
        expr = over(factor, long, short)
        if severity != page[0]:
            words += (f", or {page[1]:g} x over {page[2]} and {page[3]} (the page's burn: this "
                      "ticket never comes later than the page)")
            expr = f"({expr}) or ({over(*page[1:])})"
        yield severity, words, long, expr


def _burn(pack, name, ratio, budget, what):
    for severity, words, long, expr in _burn_rates(ratio, f'sglang_host="{pack.host}"', budget):
        pack.alert(name, expr, severity, f"{pack.host}: error budget burning ({severity})",
                   f"{what}: {words}", wait=BURN_WAIT[severity], window=long)


def _http_rules(pack, router):
    """The burn rate of the 5xx answers of SGLang's own HTTP server (sglang:http_responses_total,
    counted when an answer ends), for a host that clients reach with no router: behind one,
    the router's pack burns the budget of what clients get (it retries elsewhere) and names
    the replica it took out (SGLangRouterWorkerUnhealthy, SGLangRouterCircuitOpen)."""
    if router:
        pack.thresholds.append(
            f"no SGLangHTTPErrorBudgetBurn: {pack.host} is served through the router {router}, "
            "whose pack burns the budget of its 5xx answers (SGLangRouterErrorBudgetBurn)")
        return
    sel = pack.sel
    labels = {"sglang_host": pack.host, "release": pack.rid}
    pack.records += _burn_records(
        "http_5xx_ratio",
        lambda w: f'sum(rate(sglang:http_responses_total{{{sel},{HTTP_SERVING},'
                  f'status_code=~"5.."}}[{w}])) / '
                  f"sum(rate(sglang:http_responses_total{{{sel},{HTTP_SERVING}}}[{w}]))", labels)
    _burn(pack, "SGLangHTTPErrorBudgetBurn", "http_5xx_ratio", round(1 - pack.s["availability"], 6),
          f"5xx answers of SGLang's own HTTP server on its serving endpoints faster than an "
          f"availability of {pack.s['availability']:.2%} allows (sglang_monitoring_availability; "
          "a host with no router)")


# SGLang 0.5.23's TTFT buckets (srt/observability/metrics_collector.py,
# bucket_time_to_first_token): an objective is counted at the first bound at or above it.
TTFT_BUCKETS_S = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)

SETTINGS = {"for": str, "window": str, "tolerance": float, "ttft_factor": float,
            "itl_factor": float, "accept_fraction": float, "kv_usage": float,
            "drift_interval_s": int, "availability": float, "runbook_url": str}


def _settings(settings):
    missing = sorted(set(SETTINGS) - set(settings or {}))
    if missing:
        raise AnsibleFilterError(f"sglang_monitoring_pack: settings lack {missing}")
    try:
        checked = {k: cast(settings[k]) for k, cast in SETTINGS.items()}
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"sglang_monitoring_pack: a setting is not a number: {exc}") \
            from None
    if not 0 < checked["availability"] < 1:
        raise AnsibleFilterError(f"sglang_monitoring_pack: availability {checked['availability']!r}"
                                 " is a fraction between 0 and 1 (0.995: 0.5% may fail)")
    return checked


def sglang_monitoring_pack(release, target, floors=None, settings=None):
    """The serving release's observability pack: {targets, rules, dashboard, thresholds, files}.

    `release` is the release's manifest (sglang_release state=info), `target` is {host,
    address, labels, router}: the inventory name, the host:port Prometheus scrapes, extra
    labels, the router clients reach it through (none: the engine's own 5xx burn rate).
    `floors` is {min_decode_tok_s, max_ttft_ms}; `settings` the sglang_monitoring_* tuning.
    Rules without the figure they need (a release with no proof at a workload) are left out,
    and `thresholds` says so: a threshold comes only from a figure the release recorded.

    Args:
        release (dict): the serving release's manifest: the entry of sglang_release state=info's
            releases whose id is current (its id, workload_proof, smoke, sglang_version, profile).
        target (dict): {host, address, labels, router}: the role passes inventory_hostname and
            the host:port Prometheus scrapes; labels, optional, are added to the target's;
            router, optional, the inventory name of the router clients reach the host through:
            without one the pack burns the budget of SGLang's own 5xx answers
            (SGLangHTTPErrorBudgetBurn), with one the router's pack does.
        floors (dict): {min_decode_tok_s, max_ttft_ms}: sglang_smoke_min_decode_tok_s and
            sglang_smoke_max_ttft_ms, else the profile's smoke ones; a null one adds no rule.
        settings (dict): the sglang_monitoring_* tuning: {for, window, tolerance, ttft_factor,
            itl_factor, accept_fraction, kv_usage, drift_interval_s, availability, runbook_url},
            every key required.
    Returns:
        dict: {targets, rules, dashboard, thresholds, files}: Prometheus file-based discovery
            targets, rule groups, the Grafana dashboard (the same for every host: dashboard()),
            what each threshold comes from, and the three files' text (pack_files).
    """
    if not isinstance(release, dict) or not release.get("id"):
        raise AnsibleFilterError("sglang_monitoring_pack: no serving release (current names none)")
    pack = _Pack(release, str(target["host"]), _settings(settings))
    floors = floors or {}
    proof, levels = _proven_levels(release)
    _health_rules(pack)
    _speed_rules(pack, floors, proof, levels)
    _ttft_cap_rule(pack, floors, levels[0]["concurrency"] if levels else 1)
    if proof:
        _capacity_rules(pack, proof)
    else:
        pack.thresholds.append(
            f"no speed, latency or capacity rules: release {pack.rid} has no proof at a workload "
            "with a proven capacity (deployed with sglang_workload_proof false, or before it)")
    _accept_rule(pack)
    _drift_rules(pack)
    _slo_rules(pack, proof or {})
    _http_rules(pack, str(target.get("router") or ""))
    labels = {"sglang_host": pack.host, "release": pack.rid,
              "sglang_version": str(release.get("sglang_version") or ""),
              "profile": str(release.get("profile") or "")}
    labels.update({str(k): str(v) for k, v in (target.get("labels") or {}).items()})
    out = {
        "targets": [{"targets": [str(target["address"])], "labels": labels}],
        "rules": {"groups": [
            {"name": f"sglang-{pack.host}-release", "rules": pack.records},
            {"name": f"sglang-{pack.host}", "rules": pack.alerts},
        ]},
        "dashboard": dashboard(pack.s["window"]),
        "thresholds": pack.thresholds,
    }
    return dict(out, files=pack_files(out))


def pack_files(pack):
    """The files of a pack as Prometheus and Grafana read them, with Ansible's own JSON and YAML
    writers (what the role wrote before, so a re-run of an unchanged pack finds the same bytes):
    {target: the targets as JSON, rules: the rule groups as YAML, dashboard: the dashboard as
    JSON, where the pack has one}, each ending with a newline."""
    files = {"target": to_nice_json(pack["targets"]) + "\n",
             "rules": to_nice_yaml(pack["rules"], indent=2, width=100, sort_keys=False)}
    if "dashboard" in pack:
        files["dashboard"] = to_nice_json(pack["dashboard"]) + "\n"
    return files


def _panel(pid, title, exprs, pos, unit="short", description=""):
    return {
        "id": pid, "type": "timeseries", "title": title, "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": dict(zip(("x", "y", "w", "h"), pos)),
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": chr(65 + i), "expr": expr, "legendFormat": legend,
                     "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                    for i, (expr, legend) in enumerate(exprs)],
    }


def _p99_panel(pid, title, histogram, figure, window, pos):
    """The live p99 of one of SGLang's latency histograms beside the p99 the proof measured at
    each level (the pack's sglang:release_proven_<figure>_p99_seconds)."""
    sel = f'job="{JOB}",sglang_host=~"$sglang_host"'
    return _panel(pid, title, [
        (_quantile(f"sglang:{histogram}_seconds", 0.99, sel, window, by="sglang_host"),
         "{{sglang_host}} live"),
        (f'sglang:release_proven_{figure}_p99_seconds{{sglang_host=~"$sglang_host"}}',
         "{{sglang_host}} proven at concurrency {{concurrency}}")], pos, "s")


def dashboard(window="5m"):
    """A Grafana dashboard (provisioning JSON) for every host the pack describes: the live
    figures beside the serving release's proven ones (the pack's recording rules), picked by
    the `sglang_host` variable; `window` is the range of the live rates
    (sglang_monitoring_window), a Prometheus duration."""
    return {
        "uid": DASHBOARD_UID, "title": "SGLang (sglang-deploy)", "schemaVersion": 39,
        "tags": ["sglang", "sglang-deploy"], "timezone": "browser", "editable": True,
        "time": {"from": "now-6h", "to": "now"}, "refresh": "30s",
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus",
             "label": "Prometheus"},
            {"name": "sglang_host", "type": "query", "label": "host", "multi": True,
             "includeAll": True, "refresh": 2,
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": f'label_values(up{{job="{JOB}"}}, sglang_host)'},
        ]},
        "annotations": {"list": []},
        "panels": _panels(window),
    }


def _panels(window):
    """The dashboard's panels, each live figure of the hosts `$sglang_host` picks beside the
    serving release's proven one."""
    sel = f'job="{JOB}",sglang_host=~"$sglang_host"'
    host = 'sglang_host=~"$sglang_host"'
    return [
        _panel(1, "Tokens per second per user", [
            (_per_user_tok_s(sel, window, by="sglang_host"), "{{sglang_host}} live"),
            (f"sglang:release_proven_tok_s_per_user{{{host}}}",
             "{{sglang_host}} proven at concurrency {{concurrency}} ({{release}})"),
            (f"sglang:release_floor_tok_s_per_user{{{host}}}", "{{sglang_host}} floor")],
            (0, 0, 12, 8), "none", "Live decode speed per stream against the release's smoke test"),
        _p99_panel(2, "Time to first token (p99)", "time_to_first_token", "ttft", window,
                   (12, 0, 12, 8)),
        _panel(3, "MTP accept length", [
            (f"max by (sglang_host) (sglang:spec_accept_length{{{sel}}})", "{{sglang_host}} live"),
            (f"sglang:release_proven_accept_length{{{host}}}", "{{sglang_host}} proven")],
            (0, 8, 8, 8)),
        _panel(4, "Requests", [
            (f"sum by (sglang_host) (sglang:num_running_reqs{{{sel}}})", "{{sglang_host}} running"),
            (f"sum by (sglang_host) (sglang:num_queue_reqs{{{sel}}})", "{{sglang_host}} queued"),
            (f"sglang:release_proven_capacity{{{host}}}", "{{sglang_host}} proven capacity")],
            (8, 8, 8, 8)),
        _panel(5, "KV cache usage", [
            (f"max by (sglang_host) (sglang:token_usage{{{sel}}})", "{{sglang_host}}")],
            (16, 8, 8, 8), "percentunit"),
        _panel(6, "Output tokens per second (all users)", [
            (f"sum by (sglang_host) (rate(sglang:generation_tokens_total{{{sel}}}[{window}]))",
             "{{sglang_host}}")], (0, 16, 12, 8), "none"),
        _panel(7, "Resolution drift (1 = differs from the release's record)", [
            (f"sglang_drift{{{host}}}", "{{sglang_host}} {{setting}}: {{live}} (recorded "
             "{{recorded}})"),
            (f"1 - sglang_drift_check_success{{{host}}}", "{{sglang_host}} check failing")],
            (12, 16, 12, 8)),
        _p99_panel(8, "Inter-token latency (p99)", "inter_token_latency", "itl", window,
                   (0, 24, 12, 8)),
        _panel(9, "Error budgets (share of requests aborted, over the TTFT objective, or answered 5xx)", [
            (f"{NS}:aborted_ratio:rate{w}{{{host}}}", f"{{{{sglang_host}}}} aborted, {w}")
            for w in BURN_WINDOWS] + [
            (f"{NS}:ttft_slow_ratio:rate{w}{{{host}}}", f"{{{{sglang_host}}}} TTFT over, {w}")
            for w in BURN_WINDOWS] + [
            (f"{NS}:http_5xx_ratio:rate{w}{{{host}}}", f"{{{{sglang_host}}}} 5xx, {w}")
            for w in BURN_WINDOWS],
            (12, 24, 12, 8), "percentunit"),
    ]


def _router_health_rules(host, sel, alert, duration):
    """The router's rules that it is down or gone from Prometheus, has no replica to send
    to, holds one unhealthy or behind an open circuit breaker."""
    health = f"smg_worker_health{{{sel}}}"
    return [
        alert("SGLangRouterDown", f"up{{{sel}}} == 0", "critical",
              f"{host}: the SGLang router is down",
              f"Prometheus cannot scrape the router's /metrics on {host}: clients reach no "
              "replica through it"),
        alert("SGLangRouterTargetMissing", f"absent(up{{{sel}}})", "critical",
              f"{host}: no router target in Prometheus",
              f"Prometheus has no target for the router {host} (job {ROUTER_JOB}): the "
              "file-based target is gone or unreadable, so no other rule of this router can fire"),
        alert("SGLangRouterNoWorkers",
              f'(sum(increase(smg_http_responses_total{{{sel},error_code="no_available_workers"}}'
              f"[{duration}])) > 0) or (count({health} >= 0) > 0 unless count({health} == 1) > 0)",
              "critical", f"{host}: the router has no replica to send to",
              f"{host} answered 503 no_available_workers, or not one replica it holds is "
              "healthy (smg_worker_health): every replica is out of the router (unhealthy, "
              "drained, or never added)"),
        alert("SGLangRouterWorkerUnhealthy", f"{health} == 0", "warning",
              f"{host}: a replica failed the router's health checks",
              f"the router {host} holds {{{{ $labels.worker }}}} unhealthy (smg_worker_health 0) "
              "and sends it nothing; a replica the deploy took out is removed (-1), not unhealthy"),
        alert("SGLangRouterCircuitOpen", f"smg_worker_cb_state{{{sel}}} >= 1", "warning",
              f"{host}: the router's circuit breaker holds a replica out",
              f"the router {host}'s circuit breaker for {{{{ $labels.worker }}}} is open (1) or "
              "half-open (2) (smg_worker_cb_state): its requests failed in a row; half-open "
              "closes only after requests succeed, which a cache-aware policy may not send it"),
    ]


def sglang_monitoring_router_pack(host, address, duration="2m", availability=0.995,
                                  runbook_url=RUNBOOKS):
    """The router's pack: its Prometheus target (file-based discovery, job sglang-router,
    labelled with its inventory name), the rules that it is down or gone from Prometheus, that
    it has no replica to send to, that a replica is unhealthy or its circuit breaker open, and
    the burn rate of its 5xx answers, from sglang-router 0.3.2's own metrics (`smg_*`, read in
    its wheel: `smg_http_responses_total{status_code, error_code}`, `smg_worker_health{worker}`
    1 healthy / 0 unhealthy / -1 removed, `smg_worker_cb_state{worker}` 0 closed / 1 open /
    2 half-open / -1 removed). Every rule carries `sglang_router`, so that one router's
    inhibitions never silence another's (docs/monitoring/alertmanager.yml).

    Args:
        host (str): the router's inventory name (inventory_hostname), the label of its target and
            rule.
        address (str): the host:port Prometheus scrapes the router's /metrics at
            (sglang_router_monitoring_address, else sglang_router_prometheus_host and port).
        duration (str): how long a condition must hold before its alert fires (the rules' `for`).
        availability (float): the share of the router's answers that must not be 5xx
            (sglang_router_monitoring_availability).
        runbook_url (str): each alert's runbook_url is this, `#` and its name in lower case.
    Returns:
        dict: {targets, rules, files}: the router's Prometheus target, its rule groups and the
            text of the two files ({target, rules}: pack_files).
    """
    host = str(host)
    if not 0 < float(availability) < 1:
        raise AnsibleFilterError(f"sglang_monitoring_router_pack: availability {availability!r} is "
                                 "a fraction between 0 and 1")
    sel = f'job="{ROUTER_JOB}",sglang_router="{host}"'
    labels = {"sglang_router": host}

    def alert(name, expr, severity, summary, description, wait=duration, **extra):
        return {"alert": name, "expr": expr, "for": str(wait),
                "labels": {"severity": severity, **labels, **extra},
                "annotations": {"summary": summary, "description": description,
                                "runbook_url": f"{runbook_url}#{name.lower()}"}}

    budget = round(1 - float(availability), 6)
    records = _burn_records(
        "router_5xx_ratio",
        lambda w: f'sum(rate(smg_http_responses_total{{{sel},status_code=~"5.."}}[{w}])) / '
                  f"sum(rate(smg_http_responses_total{{{sel}}}[{w}]))", labels)
    rules = _router_health_rules(host, sel, alert, duration) + [
        alert("SGLangRouterErrorBudgetBurn", expr, severity,
              f"{host}: the router's 5xx burn the budget",
              f"5xx answers faster than an availability of {float(availability):.2%} allows "
              f"(sglang_router_monitoring_availability): {words}",
              wait=BURN_WAIT[severity], window=long)
        for severity, words, long, expr in _burn_rates(
            "router_5xx_ratio", f'sglang_router="{host}"', budget)]
    out = {
        "targets": [{"targets": [str(address)], "labels": labels}],
        "rules": {"groups": [{"name": f"sglang-router-{host}-slo", "rules": records},
                             {"name": f"sglang-router-{host}", "rules": rules}]},
    }
    return dict(out, files=pack_files(out))


class FilterModule:
    def filters(self):
        return {"sglang_monitoring_pack": own_errors(sglang_monitoring_pack),
                "sglang_monitoring_router_pack": own_errors(sglang_monitoring_router_pack)}
