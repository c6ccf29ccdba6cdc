"""The monitoring pack read by real parts on a real systemd host: Debian's Prometheus, promtool
and node_exporter. The rules promtool tests are the ones the role wrote for the serving release;
Prometheus scrapes the stand-in through the role's file-based targets and the drift check's
textfile through node_exporter; lowering the stand-in's speed below the release's floor fires
the throughput alert. Every wait is on progress, bounded generously for a loaded host."""

import base64
import io
import json
import os
import sys
import tarfile
import time
import urllib.parse
from pathlib import Path

import yaml

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
from support import alert_tests  # noqa: E402

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "scripts"))
import monitoring_docs  # noqa: E402  (the pack's settings, as the role passes them)
from support.runner import api, podman_exec  # noqa: E402

CONTAINER = "sglang-default"
HOST = "sglang-default"
BASE = "/opt/sglang"
RULES = f"/etc/prometheus/sglang/rules/{HOST}.rules.yml"
ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])


def _yaml(path):
    return yaml.safe_load((ROOT / path).read_text(encoding="utf-8"))


# What the role read: its defaults, this scenario's host_vars, the profile's floor.
VARS = {**_yaml("roles/sglang/defaults/main.yml"), **_yaml(f"molecule/default/host_vars/{HOST}.yml")}
SETTINGS = {key: VARS[f"sglang_monitoring_{name}"]
            for key, name in monitoring_docs.SETTINGS.items()}
FLOORS = {"min_decode_tok_s": _yaml("roles/sglang/profiles/qwen3.6-27b-tp2-mtp.yml")["smoke"]["min_decode_tok_s"]}
BOUND_S = 600  # generous: a loaded CI host; each wait prints what it waited for


def prom(host, query):
    """The instant vector of `query` from the host's Prometheus: [(labels, value)]."""
    url = "http://127.0.0.1:9090/api/v1/query?query=" + urllib.parse.quote(query)
    answer = json.loads(host.check_output(f"curl -sf '{url}'"))
    return [(r["metric"], float(r["value"][1])) for r in answer["data"]["result"]]


def alerts(host):
    answer = json.loads(host.check_output("curl -sf http://127.0.0.1:9090/api/v1/alerts"))
    return answer["data"]["alerts"]


def wait_for(what, probe, bound=BOUND_S):
    started, last = time.monotonic(), None
    while time.monotonic() - started < bound:
        last = probe()
        if last:
            print(f"{what}: after {time.monotonic() - started:.1f} s: {last}")
            return last
        time.sleep(1)
    raise AssertionError(f"{what}: not seen in {bound} s (last: {last})")


def test_promtool_checks_and_tests_the_rules_the_role_wrote_for_the_serving_release(host, tmp_path):
    rules = yaml.safe_load(host.file(RULES).content_string)
    release = json.loads(host.file(f"{BASE}/current/manifest.json").content_string)
    release["id"] = host.check_output(f"basename $(readlink -f {BASE}/current)")
    # test_drain.py deployed another release and rolled back: the pack follows what serves.
    labelled = {r["labels"]["release"] for g in rules["groups"] for r in g["rules"]}
    assert labelled == {release["id"]}, (labelled, release["id"])
    tests = alert_tests.promtool_tests(rules, RULES, HOST, release, FLOORS, SETTINGS)
    # Split by the alerts each case judges (a rules file of those, cut from the role's): the
    # same verdicts, a fraction of promtool's work; carried into the host as a tarball.
    files = alert_tests.split(tests, rules, tmp_path, named="/tmp/alert-tests")
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w") as tar:
        for path in sorted(tmp_path.iterdir()):
            tar.add(path, arcname=path.name)
    out = podman_exec(CONTAINER, ["sh", "-c", "rm -rf /tmp/alert-tests && mkdir /tmp/alert-tests && "
                                  "base64 -d | tar -x -C /tmp/alert-tests && "
                                  "promtool check rules " + RULES + " && "
                                  "promtool test rules " + " ".join(files)],
                      base64.b64encode(packed.getvalue()).decode())
    print(out.stdout + out.stderr)
    fires, quiet = alert_tests.counts(tests)
    print(f"{len(tests['tests'])} promtool cases: {fires} where an alert fires, {quiet} where it "
          "stays quiet (bursty light load, zero traffic, counter resets, scrape gaps, a load "
          "swinging around the capacity, sparse slow requests, critical before warning among them)")
    assert out.returncode == 0 and not alert_tests.not_passed(out.stdout, files)


def test_prometheus_scrapes_the_release_and_node_exporter_the_drift_check(host):
    release = host.check_output(f"basename $(readlink -f {BASE}/current)")
    up = wait_for("stand-in up in Prometheus", lambda: [
        labels for labels, value in prom(host, 'up{job="sglang"}') if value == 1])
    assert up[0]["sglang_host"] == HOST and up[0]["release"] == release
    host.check_output("systemctl start sglang-drift.service")
    checked = wait_for("drift check published through node_exporter", lambda: [
        labels for labels, value in prom(host, f'sglang_drift_check_success{{release="{release}"}}')
        if value == 1])
    assert checked[0]["job"] == "node" and checked[0]["sglang_host"] == HOST
    settings = {labels["setting"]: (labels["recorded"], labels["live"], value)
                for labels, value in prom(host, "sglang_drift")}
    print(f"drift series: {settings}")
    assert settings["decode_cuda_graph"] == ("on", "on", 0.0)
    assert settings["speculative"][2] == 0.0 and settings["attention_backend"][2] == 0.0
    assert host.service("sglang-drift.timer").is_enabled


def test_the_throughput_alert_fires_once_the_stand_in_is_slower_than_the_floor(host):
    fast = json.loads(api(CONTAINER, "/standin/knobs", body={"tok_s": 55}))["tok_s"]
    # One stream at a time (the floor's load) for as long as the test waits.
    load = ("import json, time, urllib.request\n"
            "key = open('/tmp/monitoring-key').read().strip()\n"
            "while True:\n"
            "    req = urllib.request.Request('http://127.0.0.1:30000/v1/completions',\n"
            "        data=json.dumps({'prompt': 'a', 'max_tokens': 40, 'stream': True}).encode(),\n"
            "        headers={'Content-Type': 'application/json', 'Authorization': 'Bearer ' + key})\n"
            "    urllib.request.urlopen(req, timeout=60).read()\n")
    key = json.loads(host.file(f"{BASE}/secrets.json").content_string)["api-key"]
    podman_exec(CONTAINER, ["sh", "-c", "umask 077; cat > /tmp/monitoring-key"], key)
    podman_exec(CONTAINER, ["sh", "-c", "cat > /tmp/monitoring-load.py"], load)
    host.check_output("systemd-run --unit monitoring-load python3 /tmp/monitoring-load.py")
    try:
        wait_for("decode speed per user seen at the release's pace", lambda: [
            round(v, 1) for _l, v in prom(host, _per_user()) if v > FLOORS["min_decode_tok_s"]])
        assert not [a for a in alerts(host) if a["labels"]["alertname"] == "SGLangBelowFloor"]
        slowed = json.loads(api(CONTAINER, "/standin/knobs", body={"tok_s": 20}))
        assert slowed["tok_s"] == 20
        firing = wait_for("SGLangBelowFloor firing", lambda: [
            a for a in alerts(host)
            if a["labels"]["alertname"] == "SGLangBelowFloor" and a["state"] == "firing"])
        print(f"per user now: {prom(host, _per_user())}")
        print(f"alert: {firing[0]['labels']} {firing[0]['annotations']['description']}")
        assert firing[0]["labels"]["severity"] == "critical"
        assert firing[0]["labels"]["sglang_host"] == HOST
    finally:
        api(CONTAINER, "/standin/knobs", body={"tok_s": fast})
        host.run("systemctl stop monitoring-load; rm -f /tmp/monitoring-key")


def _per_user():
    sel, window = f'job="sglang",sglang_host="{HOST}"', SETTINGS["window"]
    return (f"sum(rate(sglang:inter_token_latency_seconds_count{{{sel}}}[{window}])) / "
            f"sum(rate(sglang:inter_token_latency_seconds_sum{{{sel}}}[{window}]))")
