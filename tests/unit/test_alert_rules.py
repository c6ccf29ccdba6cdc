"""promtool runs the alert rules sglang_monitoring_pack renders for the reference release against
series as SGLang writes them (tests/support/alert_tests.py: its labels, its le="4.0", its
counters growing when SGLang grows them), production shapes among them: long answers that do
not finish in the window, bursty light load, counter resets, scrape gaps, a hung scheduler.
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


def test_promtool_passes_every_case_on_the_rules_of_the_reference_release(tmp_path):
    tool = promtool()
    release = json.loads((DATA / "release-reference.json").read_text())
    pack = mon.sglang_monitoring_pack(release, {"host": HOST, "address": "10.0.0.11:30000"},
                                      FLOORS, SETTINGS)
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(pack["rules"], sort_keys=False))
    tests = alert_tests.promtool_tests(pack["rules"], str(rules), HOST, release, FLOORS,
                                       SETTINGS)
    (tmp_path / "tests.yml").write_text(alert_tests.dump(tests))
    checked = subprocess.run([tool, "check", "rules", str(rules)], capture_output=True,
                             text=True, timeout=600)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = subprocess.run([tool, "test", "rules", str(tmp_path / "tests.yml")],
                         capture_output=True, text=True, timeout=600)
    fires, quiet = alert_tests.counts(tests)
    print(f"{len(tests['tests'])} promtool cases: {fires} where an alert fires, {quiet} where "
          "it stays quiet")
    assert ran.returncode == 0 and "SUCCESS" in ran.stdout, (ran.stdout + ran.stderr)[-6000:]
    names = {case["name"] for case in tests["tests"]}
    assert any("long healthy answers" in n for n in names)
