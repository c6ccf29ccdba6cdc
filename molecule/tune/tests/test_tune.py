"""playbooks/tune.yml against the TEST STAND-IN's performance model, whose best is known:
2 MTP steps (draft tokens 3) at concurrency 1 (tests/standin/sglang_standin/perf.py).

The tests run in order on one host: converge deployed the starting release (3 steps).
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
from support.runner import api, play  # noqa: E402

BASE = "/opt/sglang"
STATE = {}
REPORT = os.environ.get("SGLANG_TUNE_TEST_REPORT") or os.path.join(
    os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp"), "tune-report")
GRID = 4 * 3 * 2 * 2  # host_vars/sglang-tune.yml: the space, the unset settings included


def current(host):
    return host.file(f"{BASE}/current").linked_to.rsplit("/", 1)[1]


def config(host, release):
    return host.check_output(f"cat {BASE}/releases/{release}/config.yaml")


def serves(host):
    answer = json.loads(api(host.backend.get_hostname(), "/v1/completions",
                            {"prompt": "Hi", "max_tokens": 4}))
    return answer["usage"]["completion_tokens"] == 4


def report():
    with open(os.path.join(STATE["dir"], "tune.json"), encoding="utf-8") as handle:
        return json.load(handle)


def tune(run, **extra):
    STATE["dir"] = os.path.join(REPORT, run)  # one directory per run: the evidence stays
    return play("playbooks/tune.yml", {"sglang_tune_report_dir": STATE["dir"], **extra})


def test_a_sweep_cut_short_by_its_budget_leaves_the_start_serving(host):
    STATE["start"] = current(host)
    assert "speculative-num-steps: 3" in config(host, STATE["start"])
    out = tune("interrupted", sglang_tune_max_restarts=2)
    assert out["status"] == "successful", out["msg"]
    rep = report()
    assert "restart budget spent" in rep["stopped"]
    assert [c for c in rep["candidates"] if c["verdict"] == "skipped"]
    assert current(host) == STATE["start"] and serves(host)
    STATE["measured_first"] = {c["key"] for c in rep["candidates"] if c["verdict"] == "measured"}
    assert STATE["measured_first"], "the first sweep measured nothing to resume from"


def test_the_resumed_sweep_finds_the_best_with_fewer_restarts_than_the_grid(host):
    out = tune("resumed")
    assert out["status"] == "successful", out["msg"]
    rep = STATE["report"] = report()
    winner = rep["winner"]
    assert winner["args"]["speculative-num-steps"] == 2
    assert winner["args"]["speculative-num-draft-tokens"] == 3
    assert "attention-backend" not in winner["args"]
    assert rep["grid_size"] == GRID
    assert 0 < rep["restarts"] < GRID / 3
    by_id = {c["id"]: c for c in rep["candidates"]}
    # Resumed: what the first sweep measured is not measured again.
    resumed = {c["key"] for c in rep["candidates"] if c.get("resumed")}
    assert STATE["measured_first"] <= resumed
    # Refused by preflight (the profile expects the decode graph): no release went live.
    refused = by_id["speculative-num-steps=2, disable-cuda-graph=true"]
    assert refused["verdict"] == "refused" and "decode" in refused["reason"]
    manifest = json.loads(host.check_output(
        f"cat {BASE}/releases/{refused['release']}/manifest.json"))
    assert manifest["status"] == "failed" and "preflight" in manifest["reason"]
    assert "activated" not in manifest
    # The candidate that does not start was rolled back from.
    assert by_id["speculative-num-steps=2, attention-backend=fa3"]["verdict"] == "crashed"
    assert "sglang_server_args" in out["stdout"] and "WINNER" in out["stdout"]
    assert os.path.getsize(os.path.join(STATE["dir"], "tune.png")) > 1000
    # Without sglang_tune_apply the starting release serves again.
    assert rep["serving"] == STATE["start"] == current(host) and serves(host)


def test_apply_keeps_the_winner_serving_without_measuring_again(host):
    out = tune("applied", sglang_tune_apply=True)
    assert out["status"] == "successful", out["msg"]
    rep = report()
    assert not [c for c in rep["candidates"] if c["verdict"] == "measured"
                and not c.get("resumed")]
    assert rep["winner"]["key"] == STATE["report"]["winner"]["key"]
    serving = current(host)
    assert serving == rep["winner"]["release"] != STATE["start"]
    assert "speculative-num-steps: 2" in config(host, serving)
    assert serves(host)
