"""promtool runs the alert rules sglang_monitoring_pack renders for the reference release against
series as SGLang writes them (tests/support/alert_tests.py: its labels, its le="4.0", its
counters growing when SGLang grows them), production shapes among them: long answers that do
not finish in the window, bursty light load, a load that swings around the proven capacity,
sparse slow traffic, counter resets, scrape gaps, a hung scheduler, SGLang's own 5xx answers;
for every critical with a warning at its signal, that it never fires first. The router's
rules the same way, on sglang-router 0.3.2's series.
The same cases run in molecule's default scenario on the rules the role wrote on a host.
promtool is Debian's (scripts/install-host-packages.sh unpacks it into the cache; $PROMTOOL
names another)."""

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from support import alert_tests
from support.wheels import CACHE

from ansible_collections.sglang.deploy.plugins.filter import sglang_monitoring as mon

DATA = Path(__file__).parent / "data/monitoring"
HOST = "gpu1"
FLOORS = {"min_decode_tok_s": 45, "max_ttft_ms": None}
SETTINGS = {"for": "10m", "window": "5m", "tolerance": 0.25, "ttft_factor": 2, "itl_factor": 2,
            "accept_fraction": 0.8, "kv_usage": 0.95, "drift_interval_s": 300,
            "availability": 0.995, "runbook_url": "https://example.org/docs/alerts.md"}


def promtool():
    found = os.environ.get("PROMTOOL") or shutil.which("promtool") or next(
        iter(sorted(glob.glob(str(CACHE / "promtool" / "*" / "promtool")), reverse=True)), None)
    if not found:
        pytest.skip("no promtool: scripts/install-host-packages.sh (make host-packages) "
                    "unpacks Debian's into the cache")
    return found


def _promtool(tool, tmp_path, rules, tests):
    """promtool's check of `rules` and its run of `tests`, split by the alerts each case judges
    (alert_tests.split: the same verdicts, a fraction of promtool's work)."""
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    checked = subprocess.run([tool, "check", "rules", str(path)], capture_output=True,
                             text=True, timeout=600)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    files = alert_tests.split(tests, rules, tmp_path)
    ran = subprocess.run([tool, "test", "rules", *files], capture_output=True, text=True,
                         timeout=600)
    fires, quiet = alert_tests.counts(tests)
    print(f"{len(tests['tests'])} promtool cases: {fires} where an alert fires, {quiet} where "
          "it stays quiet")
    assert ran.returncode == 0 and not alert_tests.not_passed(ran.stdout, files), \
        (ran.stdout + ran.stderr)[-6000:]
    return {case["name"] for case in tests["tests"]}


# The profile's floor with no TTFT cap (the reference), and a cap below the proven p99 x factor
# at the lightest level (620 ms), where a p99 alone would not warn before the cap's critical.
@pytest.mark.parametrize("floors", [FLOORS, dict(FLOORS, max_ttft_ms=500)],
                         ids=["floor", "floor-and-ttft-cap"])
def test_promtool_passes_every_case_on_the_rules_of_the_reference_release(tmp_path, floors):
    tool = promtool()
    release = json.loads((DATA / "release-reference.json").read_text())
    pack = mon.sglang_monitoring_pack(release, {"host": HOST, "address": "10.0.0.11:30000"},
                                      floors, SETTINGS)
    tests = alert_tests.promtool_tests(pack["rules"], "rules.yml", HOST, release, floors,
                                       SETTINGS)
    if floors.get("max_ttft_ms"):
        # The cap changes the first-token rules only: the rest ran with the floor alone.
        tests["tests"] = [t for t in tests["tests"] if "FirstToken" in t["name"]]
    names = _promtool(tool, tmp_path, pack["rules"], tests)
    ordered = {n.split(" never fires before ")[0] for n in names if " never fires before " in n}
    if floors.get("max_ttft_ms"):
        assert ordered == {"SGLangFirstTokenAboveCap", "SGLangFirstTokenBudgetBurn"}
        return
    assert any("long healthy answers" in n for n in names)
    assert any("swinging" in n and "fires" in n for n in names)
    assert any("slow request every 7 min" in n for n in names)
    assert any(n.startswith("SGLangHTTPErrorBudgetBurn fires") for n in names)
    # Every critical with a warning at its signal has its ordered case.
    criticals = {r["alert"] for g in pack["rules"]["groups"] for r in g["rules"]
                 if "alert" in r and r["labels"]["severity"] == "critical"}
    assert criticals - set(mon.UNWARNED) == ordered, (criticals, ordered)


def test_promtool_passes_every_case_on_the_rules_of_a_router(tmp_path):
    tool = promtool()
    pack = mon.sglang_monitoring_router_pack("router1", "127.0.0.1:29000", "2m", 0.995)
    tests = alert_tests.router_tests(pack["rules"], "rules.yml", "router1", 0.995)
    names = _promtool(tool, tmp_path, pack["rules"], tests)
    assert {n.split(" ")[0] for n in names} == {
        r["alert"] for g in pack["rules"]["groups"] for r in g["rules"] if "alert" in r}


def test_a_file_passes_only_on_its_own_verdict_in_promtools_output(tmp_path):
    """not_passed reads promtool's verdict per test file: the check's "SUCCESS: N rules found"
    passes no file, a failing file is named, a file promtool never reached is named."""
    tool = promtool()
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [
        {"alert": "Up", "expr": "up == 1"}]}]}))
    files = []
    for name, fires in (("good", [{"exp_labels": {"job": "j"}}]), ("bad", [])):
        path = tmp_path / f"{name}.yml"
        path.write_text(yaml.safe_dump({"rule_files": [str(rules)], "tests": [{
            "interval": "1m", "input_series": [{"series": 'up{job="j"}', "values": "1x3"}],
            "alert_rule_test": [{"eval_time": "2m", "alertname": "Up", "exp_alerts": fires}]}]}))
        files.append(str(path))
    checked = subprocess.run([tool, "check", "rules", str(rules)], capture_output=True, text=True,
                             timeout=600)
    ran = subprocess.run([tool, "test", "rules", *files], capture_output=True, text=True,
                         timeout=600)
    output = checked.stdout + ran.stdout
    assert "SUCCESS: 1 rules found" in output and ran.returncode != 0
    never_run = str(tmp_path / "absent.yml")
    assert alert_tests.not_passed(output, files + [never_run]) == [files[1], never_run]
    assert alert_tests.not_passed(checked.stdout, files[:1]) == files[:1]
