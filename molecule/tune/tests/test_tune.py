"""playbooks/tune.yml against the TEST STAND-IN's performance model, whose best is known:
2 MTP steps (draft tokens 3) at concurrency 1 (tests/standin/sglang_standin/perf.py). Every
candidate is measured at the workload of host_vars/sglang-tune.yml by the serving bench (the own
bench: molecule's hosts cannot run SGLang's) and scored on its proven capacity, then its output
tok/s within the SLOs (goodput) at the objective's concurrency.

Converge deployed the starting release (3 steps). Each sweep is a module-scoped fixture that
runs once, after the sweep it builds on, and returns what it saw right after: the tests assert
on that, in whatever order they run.
"""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
from support.runner import api, play  # noqa: E402

BASE = "/opt/sglang"
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


def report(run):
    with open(os.path.join(REPORT, run, "tune.json"), encoding="utf-8") as handle:
        return json.load(handle)


def tune(run, **extra):
    """playbooks/tune.yml, its report in a directory of its own (the evidence stays)."""
    out = play("playbooks/tune.yml", {"sglang_tune_report_dir": os.path.join(REPORT, run), **extra})
    return out, report(run) if out["status"] == "successful" else None


@pytest.fixture(scope="module")
def start(host):
    """The release converge left serving, before any sweep."""
    release = current(host)
    return {"release": release, "config": config(host, release)}


@pytest.fixture(scope="module")
def interrupted(host, start):
    """A sweep cut short by its restart budget."""
    out, rep = tune("interrupted", sglang_tune_max_restarts=2)
    return {"out": out, "report": rep, "current": current(host), "serves": serves(host)}


@pytest.fixture(scope="module")
def resumed(host, interrupted):
    """The same sweep again: it resumes from what the first one measured."""
    out, rep = tune("resumed")
    seen = {"out": out, "report": rep, "current": current(host), "serves": serves(host),
            "chart": os.path.join(REPORT, "resumed", "tune.png")}
    refused = {c["id"]: c for c in (rep or {}).get("candidates", [])}.get(
        "speculative-num-steps=2, disable-cuda-graph=true")
    if refused and refused.get("release"):
        seen["refused_manifest"] = json.loads(host.check_output(
            f"cat {BASE}/releases/{refused['release']}/manifest.json"))
    winner = (rep or {}).get("winner") or {}
    if winner.get("release"):
        seen["winner_manifest"] = json.loads(host.check_output(
            f"cat {BASE}/releases/{winner['release']}/manifest.json"))
    return seen


@pytest.fixture(scope="module")
def applied(host, resumed):
    """The sweep with sglang_tune_apply: the winner stays serving."""
    out, rep = tune("applied", sglang_tune_apply=True)
    serving = current(host)
    return {"out": out, "report": rep, "current": serving, "config": config(host, serving),
            "serves": serves(host)}


def test_a_sweep_cut_short_by_its_budget_leaves_the_start_serving(start, interrupted):
    assert "speculative-num-steps: 3" in start["config"]
    out, rep = interrupted["out"], interrupted["report"]
    assert out["status"] == "successful", out["msg"]
    assert "restart budget spent" in rep["stopped"]
    assert [c for c in rep["candidates"] if c["verdict"] == "skipped"]
    assert interrupted["current"] == start["release"] and interrupted["serves"]
    measured_first = {c["key"] for c in rep["candidates"] if c["verdict"] == "measured"}
    assert measured_first, "the first sweep measured nothing to resume from"


def test_the_resumed_sweep_finds_the_best_with_fewer_restarts_than_the_grid(
        start, interrupted, resumed):
    out, rep = resumed["out"], resumed["report"]
    assert out["status"] == "successful", out["msg"]
    winner = rep["winner"]
    assert winner["args"]["speculative-num-steps"] == 2
    assert winner["args"]["speculative-num-draft-tokens"] == 3
    assert "attention-backend" not in winner["args"]
    assert rep["grid_size"] == GRID
    assert 0 < rep["restarts"] < GRID / 3
    by_id = {c["id"]: c for c in rep["candidates"]}
    # Resumed: what the first sweep measured is not measured again.
    measured_first = {c["key"] for c in interrupted["report"]["candidates"]
                      if c["verdict"] == "measured"}
    resumed_keys = {c["key"] for c in rep["candidates"] if c.get("resumed")}
    assert measured_first <= resumed_keys
    # Refused by preflight (the profile expects the decode graph): no release went live.
    refused = by_id["speculative-num-steps=2, disable-cuda-graph=true"]
    assert refused["verdict"] == "refused" and "decode" in refused["reason"]
    manifest = resumed.get("refused_manifest")
    assert manifest, f"no manifest for the refused candidate's release: {refused}"
    assert manifest["status"] == "failed" and "preflight" in manifest["reason"]
    assert "activated" not in manifest
    # The candidate that does not start was rolled back from.
    assert by_id["speculative-num-steps=2, attention-backend=fa3"]["verdict"] == "crashed"
    assert "sglang_server_args" in out["stdout"] and "WINNER" in out["stdout"]
    assert os.path.getsize(resumed["chart"]) > 1000
    # Without sglang_tune_apply the starting release serves again.
    assert rep["serving"] == start["release"] == resumed["current"] and resumed["serves"]


def test_every_candidate_is_scored_on_its_capacity_and_goodput_at_the_workload(resumed):
    """The same workload for every candidate, at the tuner's levels (the objective's
    concurrency, 1); a measured candidate has a proven capacity and a score, the winner's beats
    the start's beyond the noise, and the finalists were measured at the chart's levels too."""
    out, rep = resumed["out"], resumed["report"]
    assert out["status"] == "successful", out["msg"]
    leaderboard = next(e["event_data"]["res"]["msg"] for e in out["events"]
                       if e["event"] == "runner_on_ok"
                       and e["event_data"].get("task") == "Show the leaderboard")
    print("\n" + "\n".join(leaderboard))
    assert leaderboard[0].startswith("objective: the proven capacity up to concurrency 1")
    assert leaderboard[1].split()[3:5] == ["capacity", "TTFT"]
    assert rep["objective"]["metric"] == "output_tok_s" and rep["levels"] == [1]
    assert rep["workload"]["output_len"] == 48 and rep["slo"]["ttft_p99_ms"] == 3000
    start = next(c for c in rep["candidates"] if c["verdict"] == "incumbent")
    assert len(start["runs"]) == 2 and all(isinstance(r, float) for r in start["runs"])
    measured = [c for c in rep["candidates"] if c["verdict"] in ("measured", "incumbent")]
    for cand in measured:
        assert cand["capacity"] == 1 and cand["score"] > 0, cand
        assert cand["level"]["concurrency"] == 1 and cand["level"]["errors"] == 0, cand
        assert cand["level"]["ttft_ms"]["p99"] > 0 and cand["level"]["tok_s_per_user"] > 0, cand
    winner = rep["winner"]
    assert winner["final_capacity"] == 1
    # Against the start's second figures when it was a finalist, else its first.
    base = next((f["final_score"] for f in rep["finalists"] if f["key"] == start["key"]),
                start["score"])
    assert winner["final_score"] > base * (1 + rep["noise"]), (winner, start)
    assert [lv["concurrency"] for lv in winner["final_levels"]] == [1, 4]
    # The candidate's release keeps its measurement, not as the deploy's proof.
    manifest = resumed.get("winner_manifest") or {}
    assert manifest.get("tune_proof", {}).get("measured_by") == "own bench", manifest.keys()
    assert [lv["concurrency"] for lv in manifest["tune_proof"]["levels"]] == [1]
    assert "smoke" not in manifest and "workload_proof" not in manifest


def test_apply_keeps_the_winner_serving_without_measuring_again(start, resumed, applied):
    out, rep = applied["out"], applied["report"]
    assert out["status"] == "successful", out["msg"]
    assert not [c for c in rep["candidates"] if c["verdict"] == "measured"
                and not c.get("resumed")]
    assert rep["winner"]["key"] == resumed["report"]["winner"]["key"]
    serving = applied["current"]
    assert serving == rep["winner"]["release"] != start["release"]
    assert "speculative-num-steps: 2" in applied["config"]
    assert applied["serves"]
