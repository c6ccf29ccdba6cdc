"""The observability pack of the serving release: Prometheus targets, alert rules whose
thresholds are that release's own proven figures, and a Grafana dashboard.

Generic panels say a server is slow; these rules say it is slower than the release proved it
could be in its smoke test, at the load it was measured at, and name the figure. A deploy or a
rollback renders the pack again from the release that then serves. Unit-tested in
tests/unit/test_sglang_monitoring.py; promtool runs the rules in the molecule default scenario.
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors

JOB = "sglang"
ROUTER_JOB = "sglang-router"
DASHBOARD_UID = "sglang-deploy"


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


def _load(sel, window):
    """Requests running on average over the window (the load a figure was proven at)."""
    return f"sum(avg_over_time(sglang:num_running_reqs{{{sel}}}[{window}]))"


def _g(value):
    return f"{value:g}"


def _levels(smoke):
    """(concurrency, level) of the release's smoke test, lowest first, with tok/s measured."""
    levels = [lv for lv in (smoke or {}).get("levels") or []
              if isinstance(lv, dict) and lv.get("concurrency")]
    return sorted(((int(lv["concurrency"]), lv) for lv in levels), key=lambda pair: pair[0])


class _Pack:
    """The rules of one host, with the evidence each threshold came from."""

    def __init__(self, release, host, settings):
        self.release, self.host, self.s = release, host, settings
        self.sel = f'job="{JOB}",sglang_host="{host}"'
        self.rid = release.get("id") or "?"
        self.proof = (f"release {self.rid} (sglang {release.get('sglang_version', '?')}, "
                      f"proven {release.get('proven', '?')})")
        self.alerts, self.records, self.thresholds = [], [], []

    def alert(self, name, expr, severity, summary, evidence, **labels):
        self.alerts.append({
            "alert": name, "expr": expr, "for": self.s["for"],
            "labels": {"severity": severity, "sglang_host": self.host, "release": self.rid,
                       **labels},
            "annotations": {"summary": summary, "description": evidence}})
        self.thresholds.append(f"{name}: {evidence}")

    def record(self, name, value, **labels):
        """A series holding a figure of the release, for the dashboard to draw beside the live one."""
        self.records.append({"record": name, "expr": f"vector({_g(value)})",
                             "labels": dict(labels, sglang_host=self.host, release=self.rid)})


def _speed_rules(pack, floors):
    s, sel, window = pack.s, pack.sel, pack.s["window"]
    levels = _levels(pack.release.get("smoke"))
    tok_s = _per_user_tok_s(sel, window)
    floor = floors.get("min_decode_tok_s")
    lightest = levels[0][0] if levels else 1
    if floor:
        pack.record("sglang:release_floor_tok_s_per_user", floor)
        pack.alert("SGLangBelowFloor",
                   f"({tok_s}) < {_g(floor)} and on() ({_load(sel, window)}) <= {lightest}",
                   "critical", f"{pack.host}: tokens per user below the floor",
                   f"below {_g(floor)} tok/s per user at up to {lightest} requests in flight: the "
                   f"floor every release of this host must meet (sglang_smoke_min_decode_tok_s); "
                   f"{pack.proof}")
    below = 0
    for concurrency, level in levels:
        proven = level.get("decode_tok_s_per_user")
        if proven:
            threshold = round(proven * (1 - s["tolerance"]), 2)
            pack.record("sglang:release_proven_tok_s_per_user", proven,
                        concurrency=str(concurrency))
            pack.alert("SGLangSlowerThanProven",
                       f"({tok_s}) < {_g(threshold)} and on() ({_load(sel, window)}) > {below} "
                       f"and on() ({_load(sel, window)}) <= {concurrency}",
                       "warning", f"{pack.host}: slower than its release proved at this load",
                       f"below {_g(threshold)} tok/s per user with {below}-{concurrency} requests "
                       f"in flight: {pack.proof} measured {_g(proven)} at concurrency "
                       f"{concurrency}, less {s['tolerance']:.0%} (sglang_monitoring_tolerance)",
                       concurrency=str(concurrency))
        below = concurrency
    _ttft_rules(pack, floors, levels, lightest)


def _ttft_rules(pack, floors, levels, lightest):
    sel, window = pack.sel, pack.s["window"]
    ttft = _mean_ttft_s(sel, window)
    cap = floors.get("max_ttft_ms")
    if cap:
        pack.alert("SGLangFirstTokenAboveCap",
                   f"({ttft}) > {_g(cap / 1000)} and on() ({_load(sel, window)}) <= {lightest}",
                   "critical", f"{pack.host}: first token slower than the cap",
                   f"mean TTFT above {_g(cap)} ms at up to {lightest} requests in flight "
                   f"(sglang_smoke_max_ttft_ms); {pack.proof}")
    p99 = [lv.get("ttft_ms_p99") for _c, lv in levels if lv.get("ttft_ms_p99")]
    if p99:
        worst, factor = max(p99), pack.s["ttft_factor"]
        pack.record("sglang:release_proven_ttft_seconds", worst / 1000)
        pack.alert("SGLangSlowFirstToken", f"({ttft}) > {_g(round(worst * factor / 1000, 4))}",
                   "warning", f"{pack.host}: first tokens much slower than proven",
                   f"mean TTFT above {_g(factor)} x the worst p99 its smoke test measured "
                   f"({_g(worst)} ms, sglang_monitoring_ttft_factor); {pack.proof}")


def _accept_rule(pack):
    measured = (pack.release.get("smoke") or {}).get("accept_length")
    if not measured:
        return
    threshold = round(measured * pack.s["accept_fraction"], 3)
    sel, window = pack.sel, pack.s["window"]
    pack.record("sglang:release_proven_accept_length", measured)
    pack.alert("SGLangAcceptLengthLow",
               f"max(avg_over_time(sglang:spec_accept_length{{{sel}}}[{window}])) < "
               f"{_g(threshold)} and on() sum(rate(sglang:generation_tokens_total{{{sel}}}"
               f"[{window}])) > 0",
               "warning", f"{pack.host}: speculative decoding accepts fewer tokens than proven",
               f"MTP accept length below {_g(threshold)}: {pack.proof} measured {_g(measured)}, "
               f"x {pack.s['accept_fraction']:g} (sglang_monitoring_accept_fraction); long "
               "contexts or a changed workload lower it")


def _health_rules(pack):
    sel, s = pack.sel, pack.s
    pack.alert("SGLangDown", f"up{{{sel}}} == 0", "critical", f"{pack.host}: SGLang is down",
               f"Prometheus cannot scrape {pack.host}'s /metrics; {pack.proof} should serve")
    pack.alert("SGLangQueueGrowing",
               f"sum(sglang:num_queue_reqs{{{sel}}}) > 0 and "
               f"deriv(sum(sglang:num_queue_reqs{{{sel}}})[{s['window']}:]) > 0",
               "warning", f"{pack.host}: requests queue up",
               "the waiting queue is not empty and grows: more load than the release serves")
    pack.alert("SGLangKVCacheFull", f"max(sglang:token_usage{{{sel}}}) > {_g(s['kv_usage'])}",
               "warning", f"{pack.host}: KV cache nearly full",
               f"KV cache usage above {s['kv_usage']:.0%} (sglang_monitoring_kv_usage): "
               "requests get retracted or wait")
    host = f'sglang_host="{pack.host}"'
    pack.alert("SGLangResolutionDrift", f"sglang_drift{{{host}}} == 1", "critical",
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


SETTINGS = {"for": str, "window": str, "tolerance": float, "ttft_factor": float,
            "accept_fraction": float, "kv_usage": float, "drift_interval_s": int}


def _settings(settings):
    missing = sorted(set(SETTINGS) - set(settings or {}))
    if missing:
        raise AnsibleFilterError(f"sglang_monitoring_pack: settings lack {missing}")
    try:
        return {k: cast(settings[k]) for k, cast in SETTINGS.items()}
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"sglang_monitoring_pack: a setting is not a number: {exc}") \
            from None


def sglang_monitoring_pack(release, target, floors=None, settings=None):
    """The serving release's observability pack: {targets, rules, thresholds}.

    `release` is the release's manifest (sglang_release state=info), `target` is {host,
    address, labels}: the inventory name, the host:port Prometheus scrapes, extra labels.
    `floors` is {min_decode_tok_s, max_ttft_ms}; `settings` the sglang_monitoring_* tuning.
    Rules without the figure they need (a release proven without a smoke test) are left out,
    and `thresholds` says so: a threshold comes only from a figure the release recorded.

    Args:
        release: the serving release's manifest: the entry of sglang_release state=info's
            releases whose id is current (its id, smoke figures, sglang_version, profile).
        target: {host, address, labels}: the role passes inventory_hostname and the host:port
            Prometheus scrapes; labels, optional, are added to the target's.
        floors: {min_decode_tok_s, max_ttft_ms}: sglang_smoke_min_decode_tok_s and
            sglang_smoke_max_ttft_ms, else the profile's smoke ones; a null one adds no rule.
        settings: the sglang_monitoring_* tuning: {for, window, tolerance, ttft_factor,
            accept_fraction, kv_usage, drift_interval_s}, every key required.
    """
    if not isinstance(release, dict) or not release.get("id"):
        raise AnsibleFilterError("sglang_monitoring_pack: no serving release (current names none)")
    pack = _Pack(release, str(target["host"]), _settings(settings))
    floors = floors or {}
    _health_rules(pack)
    _speed_rules(pack, floors)
    _accept_rule(pack)
    if not (release.get("smoke") or {}).get("levels"):
        pack.thresholds.append(f"no speed rules: release {pack.rid} recorded no smoke figures "
                               "(proven without a smoke test)")
    labels = {"sglang_host": pack.host, "release": pack.rid,
              "sglang_version": str(release.get("sglang_version") or ""),
              "profile": str(release.get("profile") or "")}
    labels.update({str(k): str(v) for k, v in (target.get("labels") or {}).items()})
    return {
        "targets": [{"targets": [str(target["address"])], "labels": labels}],
        "rules": {"groups": [
            {"name": f"sglang-{pack.host}-release", "rules": pack.records},
            {"name": f"sglang-{pack.host}", "rules": pack.alerts},
        ]},
        "thresholds": pack.thresholds,
    }


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


def sglang_monitoring_dashboard(window="5m"):
    """A Grafana dashboard (provisioning JSON) for every host the pack describes: the live
    figures beside the serving release's proven ones (the pack's recording rules), picked by
    the `sglang_host` variable.

    Args:
        window: the range of the live rates (sglang_monitoring_window), a Prometheus duration.
    """
    sel = f'job="{JOB}",sglang_host=~"$sglang_host"'
    host = 'sglang_host=~"$sglang_host"'
    panels = [
        _panel(1, "Tokens per second per user", [
            (_per_user_tok_s(sel, window, by="sglang_host"), "{{sglang_host}} live"),
            (f"sglang:release_proven_tok_s_per_user{{{host}}}",
             "{{sglang_host}} proven at concurrency {{concurrency}} ({{release}})"),
            (f"sglang:release_floor_tok_s_per_user{{{host}}}", "{{sglang_host}} floor")],
            (0, 0, 12, 8), "none", "Live decode speed per stream against the release's smoke test"),
        _panel(2, "Time to first token (mean)", [
            (_mean_ttft_s(sel, window, by="sglang_host"), "{{sglang_host}} live"),
            (f"sglang:release_proven_ttft_seconds{{{host}}}", "{{sglang_host}} proven p99")],
            (12, 0, 12, 8), "s"),
        _panel(3, "MTP accept length", [
            (f"max by (sglang_host) (sglang:spec_accept_length{{{sel}}})", "{{sglang_host}} live"),
            (f"sglang:release_proven_accept_length{{{host}}}", "{{sglang_host}} proven")],
            (0, 8, 8, 8)),
        _panel(4, "Requests", [
            (f"sum by (sglang_host) (sglang:num_running_reqs{{{sel}}})", "{{sglang_host}} running"),
            (f"sum by (sglang_host) (sglang:num_queue_reqs{{{sel}}})", "{{sglang_host}} queued")],
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
    ]
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
        "panels": panels,
    }


def sglang_monitoring_router_pack(host, address, duration="2m"):
    """The router's pack: its Prometheus target (file-based discovery, job sglang-router,
    labelled with its inventory name) and the rule that it is down.

    Args:
        host: the router's inventory name (inventory_hostname), the label of its target and rule.
        address: the host:port Prometheus scrapes the router's /metrics at
            (sglang_router_monitoring_address, else sglang_router_prometheus_host and port).
        duration: how long the router must be down before the alert fires (the rule's `for`);
            the role leaves the default.
    """
    host = str(host)
    sel = f'job="{ROUTER_JOB}",sglang_router="{host}"'
    return {
        "targets": [{"targets": [str(address)], "labels": {"sglang_router": host}}],
        "rules": {"groups": [{"name": f"sglang-router-{host}", "rules": [{
            "alert": "SGLangRouterDown", "expr": f"up{{{sel}}} == 0", "for": str(duration),
            "labels": {"severity": "critical", "sglang_router": host},
            "annotations": {
                "summary": f"{host}: the SGLang router is down",
                "description": f"Prometheus cannot scrape the router's /metrics on {host}: "
                               "clients reach no replica through it"}}]}]},
    }


class FilterModule:
    def filters(self):
        return {"sglang_monitoring_pack": own_errors(sglang_monitoring_pack),
                "sglang_monitoring_dashboard": own_errors(sglang_monitoring_dashboard),
                "sglang_monitoring_router_pack": own_errors(sglang_monitoring_router_pack)}
