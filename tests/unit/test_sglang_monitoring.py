"""The observability pack: thresholds come from the serving release's own figures (its proof at
the workload, up to its proven capacity; its resolution) and the floors, each alert says which;
nothing is made up where the release recorded no figure. promtool runs these rules against
series in the molecule default scenario (molecule/default/tests/test_monitoring.py).

release-reference.json's proof is illustrative (figures of the shape SGLang's benchmark gives
for the reference profile, capacity 16), not a measurement."""

import copy
import json
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.filter import sglang_monitoring as mon

RELEASE = json.loads((Path(__file__).parent / "data/monitoring/release-reference.json").read_text())
TARGET = {"host": "gpu1", "address": "10.0.0.11:30000"}
FLOORS = {"min_decode_tok_s": 45, "max_ttft_ms": None}
SETTINGS = {"for": "10m", "window": "5m", "tolerance": 0.25, "ttft_factor": 2, "itl_factor": 2,
            "accept_fraction": 0.8, "kv_usage": 0.95, "drift_interval_s": 300,
            "availability": 0.995, "runbook_url": "https://example.org/docs/alerts.md"}
PEAK = 'clamp_min(max_over_time(sum(sglang:num_running_reqs{job="sglang",sglang_host="gpu1"})[5m:]), 1)'
SPARSE_PEAK = PEAK.replace("[5m:]", "[15m:]")


def alerts(pack):
    return {rule["alert"] + "".join(f"@{rule['labels'][k]}" for k in ("concurrency", "severity")
                                    if k in rule["labels"] and (k == "concurrency" or "Burn" in rule["alert"])): rule
            for group in pack["rules"]["groups"] for rule in group["rules"] if "alert" in rule}


def records(pack):
    return [rule for group in pack["rules"]["groups"] for rule in group["rules"] if "record" in rule]


def test_thresholds_are_the_proofs_figures_at_each_load_band_up_to_the_proven_capacity():
    pack = mon.sglang_monitoring_pack(RELEASE, TARGET, FLOORS, SETTINGS)
    rules = alerts(pack)
    # 53.8 tok/s per user at concurrency 1, 33.5 at 8, 24.1 at 16 (the capacity); less 25%;
    # at the floor's band at least the floor (45 > 40.35), so that it warns before the floor.
    assert "< 45) and on() (" + PEAK + ") > 0 and on() (" + PEAK + ") <= 1 and on()" in \
        rules["SGLangSlowerThanProven@1"]["expr"]
    assert "less 25% (sglang_monitoring_tolerance), raised to the floor 45" in \
        rules["SGLangSlowerThanProven@1"]["annotations"]["description"]
    # A window with no token streamed is judged over three (two requests finished there).
    assert ("< 45) and on() (" + SPARSE_PEAK + ") > 0") in rules["SGLangSlowerThanProven@1"]["expr"]
    assert "[15m])) >= 2)) unless on() (sum(rate(sglang:inter_token_latency_seconds_count" in \
        rules["SGLangSlowerThanProven@1"]["expr"]
    assert "a slow request at least every 7.5 min fires within 17.5 min of the first" in \
        rules["SGLangSlowerThanProven@1"]["annotations"]["description"]
    assert "< 25.12) and on() (" + PEAK + ") > 1 and on() (" + PEAK + ") <= 8" in \
        rules["SGLangSlowerThanProven@8"]["expr"]
    # The top band also judges a load that swings past the capacity and back within a window:
    # 18.08 per stream up to 16 running, 16 x 18.08 in all past it, so per stream at least
    # 289.28 / the window's peak.
    top = rules["SGLangSlowerThanProven@16"]
    assert ('[5m]))) < 289.28 / max_over_time(sum(sglang:num_running_reqs{job="sglang",'
            'sglang_host="gpu1"})[5m:])) and on() (max_over_time(') in top["expr"]
    assert "[5m:]) > 16) and on() (min_over_time(" in top["expr"]
    assert "held to 289.28 tok/s shared by the most that ran at once" in \
        top["annotations"]["description"]
    assert "swing" not in rules["SGLangSlowerThanProven@8"]["annotations"]["description"]
    # Traffic is tokens streaming (the inter-token count grows at each chunk), not requests
    # finishing: a long answer's tokens are counted by SGLang only when it ends.
    assert ") <= 16 and on() (sum(rate(sglang:inter_token_latency_seconds_count" in \
        rules["SGLangSlowerThanProven@16"]["expr"]
    assert "SGLangSlowerThanProven@32" not in rules  # beyond the capacity: no promise
    assert "measured 33.5 at concurrency 8 (sglang.bench_serving), less 25%" in \
        rules["SGLangSlowerThanProven@8"]["annotations"]["description"]
    # TTFT and ITL p99 from SGLang's histograms, 2 x the p99 proven at the band.
    assert rules["SGLangSlowFirstToken@8"]["expr"].startswith(
        "(((histogram_quantile(0.99, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket"
        '{job="sglang",sglang_host="gpu1"}[5m])))) > 1.84) and on()')
    # The TTFT threshold names the prompts it was proven with (the workload's input_len).
    assert ("measured p99 920 ms at concurrency 8 with prompts of 512-1024 tokens (workload "
            "input_len 1024, range_ratio 0.5, dataset random-ids)") in \
        rules["SGLangSlowFirstToken@8"]["annotations"]["description"]
    assert "set for prompts of 512-1024 tokens" in \
        rules["SGLangFirstTokenBudgetBurn@critical"]["annotations"]["description"]
    assert ") > 0.176) and on()" in rules["SGLangSlowTokens@16"]["expr"]
    # Beyond the capacity, all through the window: a warning.
    assert rules["SGLangAboveProvenCapacity"]["expr"].endswith("[5m:]) > 16")
    assert rules["SGLangAboveProvenCapacity"]["labels"]["severity"] == "warning"
    # The floor holds at the proof's first level, and waits twice as long as the warnings.
    floor = rules["SGLangBelowFloor"]
    assert "< 45) and on() (" + PEAK + ") > 0 and on() (" + PEAK + ") <= 1" in floor["expr"]
    assert floor["labels"]["severity"] == "critical" and floor["for"] == "20m"
    assert " < 2.496 and on() " in rules["SGLangAcceptLengthLow"]["expr"]
    for name, rule in rules.items():
        assert rule["labels"]["release"] == RELEASE["id"] and rule["labels"]["sglang_host"] == "gpu1"
        assert rule["annotations"]["runbook_url"] == \
            "https://example.org/docs/alerts.md#" + rule["alert"].lower(), name
    assert "SGLangFirstTokenAboveCap" not in rules  # no cap set: no rule
    assert {r["record"]: r["expr"] for r in records(pack)
            if not r["labels"].get("concurrency") and ":" in r["record"]
            and not r["record"].startswith("sglang_deploy:")} == {
        "sglang:release_floor_tok_s_per_user": "vector(45)",
        "sglang:release_proven_capacity": "vector(16)",
        "sglang:release_proven_accept_length": "vector(3.12)"}
    assert any("SGLangBelowFloor: below 45 tok/s per user" in line for line in pack["thresholds"])


def test_health_progress_and_burn_rate_rules():
    rules = alerts(mon.sglang_monitoring_pack(RELEASE, TARGET, FLOORS, SETTINGS))
    assert rules["SGLangTargetMissing"]["expr"] == 'absent(up{job="sglang",sglang_host="gpu1"})'
    progress = rules["SGLangNoProgress"]["expr"]
    for signal in ("sglang:inter_token_latency_seconds_count{", 'mode=~"decode_.*"',
                   "sglang:generation_tokens_total{"):
        assert signal in progress and "or vector(0)" in progress
    assert rules["SGLangQueueStuck"]["expr"].startswith("min_over_time(sum(sglang:num_queue_reqs")
    # 0.5% may be aborted: 14.4 x over 1 h and 5 m pages, 6 x over 6 h and 30 m warns.
    page, ticket = rules["SGLangAbortBudgetBurn@critical"], rules["SGLangAbortBudgetBurn@warning"]
    assert page["expr"] == ('sglang_deploy:aborted_ratio:rate1h{sglang_host="gpu1"} > 0.072 and '
                            'sglang_deploy:aborted_ratio:rate5m{sglang_host="gpu1"} > 0.072')
    # The ticket holds the page's burn too, and waits as long: never later than the page.
    assert ticket["expr"] == ('(sglang_deploy:aborted_ratio:rate6h{sglang_host="gpu1"} > 0.03 and '
                              'sglang_deploy:aborted_ratio:rate30m{sglang_host="gpu1"} > 0.03) or '
                              "(" + page["expr"] + ")")
    assert page["for"] == ticket["for"] == "2m"
    # The workload's TTFT objective (3000 ms) at SGLang's next bucket (4 s), 1% may miss it,
    # selected as SGLang and Prometheus 3 write it (4.0) and as Prometheus 2 keeps a "4".
    assert 'le=~"4|4\\\\.0"' in next(r["expr"] for r in records(
        mon.sglang_monitoring_pack(RELEASE, TARGET, FLOORS, SETTINGS))
        if r["record"] == "sglang_deploy:ttft_slow_ratio:rate5m")
    assert rules["SGLangFirstTokenBudgetBurn@critical"]["expr"].endswith("> 0.144")


def test_a_host_with_no_router_burns_the_budget_of_sglangs_own_5xx_answers():
    """SGLang 0.5.23's http_request_metrics.py: sglang:http_responses_total{endpoint, method,
    status_code}, its serving endpoints only (not /health's 503 of a drain, not /metrics)."""
    pack = mon.sglang_monitoring_pack(RELEASE, TARGET, FLOORS, SETTINGS)
    rules = alerts(pack)
    ratio = next(r["expr"] for r in records(pack)
                 if r["record"] == "sglang_deploy:http_5xx_ratio:rate5m")
    assert ratio == (
        'sum(rate(sglang:http_responses_total{job="sglang",sglang_host="gpu1",'
        'endpoint=~"/generate|/v1/.+|/invocations|/encode|/classify",'
        'endpoint!~"/v1/models.*|/v1/loads",status_code=~"5.."}[5m])) / '
        'sum(rate(sglang:http_responses_total{job="sglang",sglang_host="gpu1",'
        'endpoint=~"/generate|/v1/.+|/invocations|/encode|/classify",'
        'endpoint!~"/v1/models.*|/v1/loads"}[5m]))')
    assert rules["SGLangHTTPErrorBudgetBurn@critical"]["expr"].endswith(
        'sglang_deploy:http_5xx_ratio:rate5m{sglang_host="gpu1"} > 0.072')
    # Behind a router the router's pack burns the budget of what clients get.
    behind = mon.sglang_monitoring_pack(RELEASE, dict(TARGET, router="router1"), FLOORS, SETTINGS)
    assert not [n for n in alerts(behind) if n.startswith("SGLangHTTPErrorBudgetBurn")]
    assert not [r for r in records(behind) if "http_5xx" in r["record"]]
    assert any(line.startswith("no SGLangHTTPErrorBudgetBurn: gpu1 is served through the router "
                               "router1") for line in behind["thresholds"])


def test_a_critical_with_a_warning_at_its_signal_is_never_stricter_than_it():
    """WARNED_BY: the warning's threshold at the critical's band is at least as strict, and it
    waits less; promtool holds the order on series (tests/unit/test_alert_rules.py)."""
    pack = mon.sglang_monitoring_pack(RELEASE, TARGET, dict(FLOORS, max_ttft_ms=500), SETTINGS)
    rules = alerts(pack)
    wait = {"10m": 10, "20m": 20, "2m": 2}
    for critical, (warning, label) in mon.WARNED_BY.items():
        crit, warn = rules[critical], rules[f"{warning}@1"]
        assert wait[warn["for"]] < wait[crit["for"]], (critical, warning)
        assert f"fires first" in crit["annotations"]["description"]
    assert "or (sum(rate(sglang:time_to_first_token_seconds_sum" in \
        rules["SGLangSlowFirstToken@1"]["expr"]
    assert "or (sum(rate(sglang:time_to_first_token_seconds_sum" not in \
        rules["SGLangSlowFirstToken@8"]["expr"]


def test_the_target_carries_the_release_and_the_address_prometheus_scrapes():
    pack = mon.sglang_monitoring_pack(RELEASE, dict(TARGET, labels={"rack": "b7"}), FLOORS, SETTINGS)
    assert pack["targets"] == [{"targets": ["10.0.0.11:30000"], "labels": {
        "sglang_host": "gpu1", "release": RELEASE["id"], "sglang_version": "0.5.23",
        "profile": "qwen3.6-27b-tp2-mtp", "rack": "b7"}}]


def test_the_files_are_the_pack_as_prometheus_and_grafana_read_it():
    """The role writes (and a re-run compares) the pack's files as the filter gives them: each
    reads back as the structure it came from, and ends with a newline."""
    for pack, names in ((mon.sglang_monitoring_pack(RELEASE, TARGET, FLOORS, SETTINGS),
                         {"target": "targets", "rules": "rules", "dashboard": "dashboard"}),
                        (mon.sglang_monitoring_router_pack("router1", "127.0.0.1:29000", "2m"),
                         {"target": "targets", "rules": "rules"})):
        files = pack["files"]
        assert set(files) == set(names)
        assert all(text.endswith("\n") and not text.endswith("\n\n") for text in files.values())
        assert json.loads(files["target"]) == pack["targets"]
        assert yaml.safe_load(files["rules"]) == pack["rules"]
        if "dashboard" in files:
            assert json.loads(files["dashboard"]) == pack["dashboard"]


def test_a_release_with_no_proof_gets_no_speed_rules_and_says_so():
    release = {k: v for k, v in RELEASE.items() if k not in ("workload_proof", "smoke")}
    pack = mon.sglang_monitoring_pack(release, TARGET, {}, SETTINGS)
    names = {rule["alert"] for group in pack["rules"]["groups"] for rule in group["rules"]
             if "alert" in rule}
    assert names == {"SGLangDown", "SGLangTargetMissing", "SGLangNoProgress", "SGLangQueueStuck",
                     "SGLangKVCacheFull", "SGLangResolutionDrift", "SGLangDriftCheckFailing",
                     "SGLangDriftCheckStale", "SGLangAbortBudgetBurn",
                     "SGLangHTTPErrorBudgetBurn"}
    assert any(line.startswith("no speed, latency or capacity rules: release "
                               "20261203T101500Z-4f2a9c1e has no proof") for line in pack["thresholds"])


def test_a_proof_by_the_own_bench_gets_no_itl_rule():
    release = copy.deepcopy(RELEASE)
    release["workload_proof"]["measured_by"] = "own bench"
    rules = alerts(mon.sglang_monitoring_pack(release, TARGET, FLOORS, SETTINGS))
    assert not [name for name in rules if name.startswith("SGLangSlowTokens")]
    assert "SGLangSlowFirstToken@1" in rules


def test_a_ttft_cap_and_no_speculative_decoding():
    release = copy.deepcopy(RELEASE)
    release["smoke"]["accept_length"] = None
    rules = alerts(mon.sglang_monitoring_pack(release, TARGET, {"max_ttft_ms": 800}, SETTINGS))
    assert "SGLangAcceptLengthLow" not in rules and "SGLangBelowFloor" not in rules
    assert ") > 0.8) and on() (" in rules["SGLangFirstTokenAboveCap"]["expr"]


def test_the_drift_rules_hold_through_failing_runs_and_go_stale_after_three_runs():
    rules = alerts(mon.sglang_monitoring_pack(RELEASE, TARGET, FLOORS, dict(SETTINGS, drift_interval_s=60)))
    assert rules["SGLangResolutionDrift"]["expr"] == \
        'last_over_time(sglang_drift{sglang_host="gpu1"}[180s]) == 1'
    assert "> 180 or absent(" in rules["SGLangDriftCheckStale"]["expr"]


@pytest.mark.parametrize("release, settings, message", [
    ({}, SETTINGS, "no serving release"),
    (RELEASE, {k: v for k, v in SETTINGS.items() if k != "window"}, "settings lack ['window']"),
    (RELEASE, dict(SETTINGS, tolerance="a lot"), "a setting is not a number"),
    (RELEASE, dict(SETTINGS, availability=99.5), "availability 99.5 is a fraction"),
])
def test_bad_inputs_say_what_to_change(release, settings, message):
    with pytest.raises(AnsibleFilterError, match=message.replace("[", r"\[")):
        mon.sglang_monitoring_pack(release, TARGET, FLOORS, settings)


def test_the_rules_file_is_what_prometheus_reads():
    """Group names unique, every rule an alert or a record, labels and annotations strings."""
    rules = mon.sglang_monitoring_pack(RELEASE, TARGET, FLOORS, SETTINGS)["rules"]
    text = yaml.safe_dump(rules, sort_keys=False)
    groups = yaml.safe_load(text)["groups"]
    assert len({g["name"] for g in groups}) == len(groups) == 2
    for rule in (r for g in groups for r in g["rules"]):
        assert ("alert" in rule) != ("record" in rule)
        assert all(isinstance(v, str) for v in rule.get("labels", {}).values())
        assert all(isinstance(v, str) for v in rule.get("annotations", {}).values())


def test_the_dashboard_draws_the_live_figures_beside_the_releases():
    pack = mon.sglang_monitoring_pack(RELEASE, TARGET, FLOORS, SETTINGS)
    board = pack["dashboard"]
    assert board == mon.dashboard(SETTINGS["window"])
    assert "[7m]" in json.dumps(mon.sglang_monitoring_pack(RELEASE, TARGET, FLOORS,
                                                           dict(SETTINGS, window="7m"))["dashboard"])
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    recorded = {r["record"] for r in records(pack)}
    assert recorded <= {e.split("{")[0] for e in exprs}
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    assert board["templating"]["list"][1]["query"] == 'label_values(up{job="sglang"}, sglang_host)'
    json.dumps(board)


def test_the_files_in_docs_are_what_the_role_renders_for_the_reference_profile():
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "scripts/monitoring_docs.py"), "--check"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_router_pack_names_the_router_and_alerts_on_its_own_metrics():
    pack = mon.sglang_monitoring_router_pack("router1", "127.0.0.1:29000", "2m")
    assert pack["targets"] == [{"targets": ["127.0.0.1:29000"], "labels": {"sglang_router": "router1"}}]
    records, rules = (g["rules"] for g in pack["rules"]["groups"])
    down, missing, none, unhealthy, circuit, page, ticket = rules
    assert down["alert"] == "SGLangRouterDown" and down["for"] == "2m"
    assert down["expr"] == 'up{job="sglang-router",sglang_router="router1"} == 0'
    assert missing["expr"] == 'absent(up{job="sglang-router",sglang_router="router1"})'
    # sglang-router 0.3.2 answers 503 with error_code no_available_workers (read from one), and
    # writes smg_worker_health{worker} 1/0 (-1 once removed), smg_worker_cb_state{worker}
    # 0 closed, 1 open, 2 half-open (its wheel's metric descriptions).
    assert 'error_code="no_available_workers"' in none["expr"]
    assert ('count(smg_worker_health{job="sglang-router",sglang_router="router1"} >= 0) > 0 '
            'unless count(smg_worker_health{job="sglang-router",sglang_router="router1"} == 1) > 0'
            ) in none["expr"]
    assert unhealthy["expr"] == 'smg_worker_health{job="sglang-router",sglang_router="router1"} == 0'
    assert circuit["expr"] == 'smg_worker_cb_state{job="sglang-router",sglang_router="router1"} >= 1'
    assert "{{ $labels.worker }}" in circuit["annotations"]["description"]
    for rule in rules:
        assert rule["labels"]["sglang_router"] == "router1", rule["alert"]
    assert page["labels"]["severity"] == "critical" and page["expr"].endswith("> 0.072")
    assert ticket["labels"]["severity"] == "warning" and "rate6h" in ticket["expr"]
    assert {r["record"] for r in records} == {f"sglang_deploy:router_5xx_ratio:rate{w}"
                                              for w in ("5m", "30m", "1h", "6h")}
    assert 'status_code=~"5.."' in records[0]["expr"]
    with pytest.raises(AnsibleFilterError, match="availability 2"):
        mon.sglang_monitoring_router_pack("router1", "a:1", "2m", 2)


DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_alert_has_a_runbook_and_the_alertmanager_example_names_real_alerts():
    """Each alert the packs can write has its section in docs/alerts.md (its runbook_url's
    anchor); the Alertmanager example's inhibitions name alerts the packs write."""
    import re

    release = copy.deepcopy(RELEASE)
    pack = mon.sglang_monitoring_pack(release, TARGET, dict(FLOORS, max_ttft_ms=800), SETTINGS)
    router = mon.sglang_monitoring_router_pack("r1", "127.0.0.1:29000")
    names = {r["alert"] for p in (pack, router) for g in p["rules"]["groups"] for r in g["rules"]
             if "alert" in r}
    sections = set(re.findall(r"^## (\w+)$", (DOCS / "alerts.md").read_text(), re.M))
    assert names == sections, (names - sections, sections - names)
    example = yaml.safe_load((DOCS / "monitoring/alertmanager.yml").read_text())
    named = set()
    for rule in example["inhibit_rules"]:
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            key, _op, value = re.match(r'(\w+)(=~|!~|=)"(.*)"', matcher).groups()
            if key == "alertname":
                named |= {n for n in names if re.fullmatch(value, n)}
                assert any(re.fullmatch(value, n) for n in names), matcher
    assert {"SGLangDown", "SGLangTargetMissing", "SGLangNoProgress"} <= named


def _matches(matchers, labels):
    """Alertmanager's matchers (`name=value`, `!=`, `=~`, `!~`, regexes anchored) on labels, a
    label an alert lacks read as empty."""
    import re

    for matcher in matchers:
        key, op, value = re.match(r'(\w+)(=~|!~|!=|=)"(.*)"', matcher).groups()
        have = labels.get(key, "")
        ok = {"=": have == value, "!=": have != value, "=~": bool(re.fullmatch(value, have)),
              "!~": not re.fullmatch(value, have)}[op]
        if not ok:
            return False
    return True


def _inhibited(rules, source, target):
    return source is not target and any(
        _matches(r["source_matchers"], source) and _matches(r["target_matchers"], target)
        and all(source.get(k, "") == target.get(k, "") for k in r["equal"]) for r in rules)


def test_one_hosts_or_routers_inhibition_never_silences_anothers():
    """The Alertmanager example's inhibit rules applied, as Alertmanager applies them, to every
    alert of two replicas and two routers all firing at once: an alert inhibits only alerts of
    its own host or router, and there the ones it should (docs/alerts.md, Inhibitions)."""
    inhibit = yaml.safe_load((DOCS / "monitoring/alertmanager.yml").read_text())["inhibit_rules"]
    firing = []
    for host in ("gpu1", "gpu2"):
        pack = mon.sglang_monitoring_pack(RELEASE, dict(TARGET, host=host),
                                          dict(FLOORS, max_ttft_ms=800), SETTINGS)
        firing += [dict(r["labels"], alertname=r["alert"]) for g in pack["rules"]["groups"]
                   for r in g["rules"] if "alert" in r]
    for router in ("router1", "router2"):
        pack = mon.sglang_monitoring_router_pack(router, "127.0.0.1:29000")
        firing += [dict(r["labels"], alertname=r["alert"], worker="http://10.0.0.11:30000")
                   for g in pack["rules"]["groups"] for r in g["rules"] if "alert" in r]

    def owner(alert):
        return alert.get("sglang_host") or alert.get("sglang_router")
    assert all(bool(a.get("sglang_host")) != bool(a.get("sglang_router")) for a in firing)
    crossed = [(s["alertname"], owner(s), t["alertname"], owner(t)) for s in firing for t in firing
               if owner(s) != owner(t) and _inhibited(inhibit, s, t)]
    assert not crossed, crossed[:5]

    def one(name, who, **labels):
        return next(a for a in firing if a["alertname"] == name and owner(a) == who
                    and all(a.get(k) == v for k, v in labels.items()))
    for source, target in (
            (one("SGLangDown", "gpu1"), one("SGLangSlowerThanProven", "gpu1", concurrency="8")),
            (one("SGLangAbortBudgetBurn", "gpu1", severity="critical"),
             one("SGLangAbortBudgetBurn", "gpu1", severity="warning")),
            (one("SGLangRouterDown", "router1"), one("SGLangRouterCircuitOpen", "router1")),
            (one("SGLangRouterErrorBudgetBurn", "router1", severity="critical"),
             one("SGLangRouterErrorBudgetBurn", "router1", severity="warning"))):
        assert _inhibited(inhibit, source, target), (source, target)
    assert not _inhibited(inhibit, one("SGLangRouterDown", "router1"),
                          one("SGLangRouterDown", "router1"))
