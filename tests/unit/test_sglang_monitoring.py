"""The observability pack: thresholds come from the serving release's own figures (its smoke
test, its resolution) and the floors, each alert says which; nothing is made up where the
release recorded no figure. promtool runs these rules against series in the molecule default
scenario (molecule/default/tests/test_monitoring.py)."""

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
SETTINGS = {"for": "10m", "window": "5m", "tolerance": 0.25, "ttft_factor": 3,
            "accept_fraction": 0.8, "kv_usage": 0.95, "drift_interval_s": 300}


def alerts(pack):
    return {rule["alert"] + (f"@{rule['labels']['concurrency']}" if "concurrency" in rule["labels"]
                             else ""): rule
            for group in pack["rules"]["groups"] for rule in group["rules"] if "alert" in rule}


def records(pack):
    return [rule for group in pack["rules"]["groups"] for rule in group["rules"] if "record" in rule]


def test_thresholds_are_the_releases_figures_at_the_load_they_were_measured_at():
    pack = mon.sglang_monitoring_pack(RELEASE, TARGET, FLOORS, SETTINGS)
    rules = alerts(pack)
    # 53.8 tok/s per user at concurrency 1, 36.5 at 4; less 25%.
    assert "< 40.35 and on()" in rules["SGLangSlowerThanProven@1"]["expr"]
    assert "> 0 and on()" in rules["SGLangSlowerThanProven@1"]["expr"]
    assert "< 27.38 and on()" in rules["SGLangSlowerThanProven@4"]["expr"]
    assert "> 1 and on()" in rules["SGLangSlowerThanProven@4"]["expr"]
    assert "measured 36.5 at concurrency 4, less 25%" in \
        rules["SGLangSlowerThanProven@4"]["annotations"]["description"]
    # The floor holds at the load it is measured at (the smoke test's first level).
    assert rules["SGLangBelowFloor"]["expr"].endswith("< 45 and on() (sum(avg_over_time("
                                                      'sglang:num_running_reqs{job="sglang",'
                                                      'sglang_host="gpu1"}[5m]))) <= 1')
    # 3 x the worst p99 TTFT (512.7 ms) and 0.8 x the accept length 3.12.
    assert rules["SGLangSlowFirstToken"]["expr"].endswith(") > 1.5381")
    assert "max(avg_over_time(sglang:spec_accept_length" in rules["SGLangAcceptLengthLow"]["expr"]
    assert " < 2.496 and on() " in rules["SGLangAcceptLengthLow"]["expr"]
    for rule in rules.values():
        assert rule["labels"]["release"] == RELEASE["id"] and rule["labels"]["sglang_host"] == "gpu1"
        assert rule["for"] == "10m"
    assert "SGLangFirstTokenAboveCap" not in rules  # no cap set: no rule
    assert {r["record"]: r["expr"] for r in records(pack) if not r["labels"].get("concurrency")} == {
        "sglang:release_floor_tok_s_per_user": "vector(45)",
        "sglang:release_proven_ttft_seconds": "vector(0.5127)",
        "sglang:release_proven_accept_length": "vector(3.12)"}
    assert any("SGLangBelowFloor: below 45 tok/s per user" in line for line in pack["thresholds"])


def test_the_target_carries_the_release_and_the_address_prometheus_scrapes():
    pack = mon.sglang_monitoring_pack(RELEASE, dict(TARGET, labels={"rack": "b7"}), FLOORS, SETTINGS)
    assert pack["targets"] == [{"targets": ["10.0.0.11:30000"], "labels": {
        "sglang_host": "gpu1", "release": RELEASE["id"], "sglang_version": "0.5.23",
        "profile": "qwen3.6-27b-tp2-mtp", "rack": "b7"}}]


def test_a_release_proven_without_a_smoke_test_gets_no_speed_rules_and_says_so():
    release = {k: v for k, v in RELEASE.items() if k != "smoke"}
    pack = mon.sglang_monitoring_pack(release, TARGET, {}, SETTINGS)
    names = set(alerts(pack))
    assert names == {"SGLangDown", "SGLangQueueGrowing", "SGLangKVCacheFull",
                     "SGLangResolutionDrift", "SGLangDriftCheckFailing", "SGLangDriftCheckStale"}
    assert pack["thresholds"][-1].startswith("no speed rules: release 20261203T101500Z-4f2a9c1e "
                                             "recorded no smoke figures")


def test_a_ttft_cap_and_no_speculative_decoding():
    release = copy.deepcopy(RELEASE)
    release["smoke"]["accept_length"] = None
    rules = alerts(mon.sglang_monitoring_pack(release, TARGET, {"max_ttft_ms": 800}, SETTINGS))
    assert "SGLangAcceptLengthLow" not in rules and "SGLangBelowFloor" not in rules
    assert ") > 0.8 and on() (" in rules["SGLangFirstTokenAboveCap"]["expr"]


def test_the_drift_rules_select_this_hosts_textfile_series_and_go_stale_after_three_runs():
    rules = alerts(mon.sglang_monitoring_pack(RELEASE, TARGET, FLOORS, dict(SETTINGS, drift_interval_s=60)))
    assert rules["SGLangResolutionDrift"]["expr"] == 'sglang_drift{sglang_host="gpu1"} == 1'
    assert "> 180 or absent(" in rules["SGLangDriftCheckStale"]["expr"]


@pytest.mark.parametrize("release, settings, message", [
    ({}, SETTINGS, "no serving release"),
    (RELEASE, {k: v for k, v in SETTINGS.items() if k != "window"}, "settings lack ['window']"),
    (RELEASE, dict(SETTINGS, tolerance="a lot"), "a setting is not a number"),
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
    board = mon.sglang_monitoring_dashboard("5m")
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    recorded = {r["record"] for r in records(mon.sglang_monitoring_pack(RELEASE, TARGET, FLOORS, SETTINGS))}
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


def test_the_router_pack_names_the_router_and_alerts_when_it_is_down():
    pack = mon.sglang_monitoring_router_pack("router1", "127.0.0.1:29000", "2m")
    assert pack["targets"] == [{"targets": ["127.0.0.1:29000"], "labels": {"sglang_router": "router1"}}]
    (rule,) = pack["rules"]["groups"][0]["rules"]
    assert rule["alert"] == "SGLangRouterDown" and rule["for"] == "2m"
    assert rule["expr"] == 'up{job="sglang-router",sglang_router="router1"} == 0'
