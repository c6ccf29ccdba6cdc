"""The tuner's search (the collection's plugins/filter/sglang_tune.py), driven the way roles/sglang_tune/tasks/*.yml
drive it, against the stand-in's performance model (tests/standin/sglang_standin/perf.py). Each
measurement is shaped as sglang_serving_bench returns it (levels with ttft_ms {p50, p90, p99},
tok_s_per_user, output_tok_s, errors, met, misses, slo_attainment)."""

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from sglang_standin import perf
from support import load_module

from ansible_collections.sglang.deploy.plugins.filter import sglang_tune as t

PROFILE = yaml.safe_load(open(  # noqa: SIM115 - a test reads the shipped profile
    __import__("pathlib").Path(__file__).resolve().parents[2]
    / "roles/sglang/profiles/qwen3.6-27b-tp2-mtp.yml", encoding="utf-8"))
ARGS = {**PROFILE["args"], "model-path": "/m"}
SPACE = {"args": {"speculative-num-steps": [1, 2, 3, 4], "attention-backend": ["triton", "fa3"],
                  "disable-cuda-graph": [False, True], "cuda-graph-max-bs": [8]}}
OBJ = {"metric": "output_tok_s", "concurrency": 1}


def spec(**over):
    base = {"space": SPACE, "constraints": PROFILE["tune"]["constraints"], "objective": OBJ,
            "max_restarts": 30, "max_wall_s": 3600, "noise_repeats": 2, "finalists": 2,
            "min_gain": 0.03}
    base.update(over)
    return base


def plan(**over):
    return t.sglang_tune_plan(spec(**over), ARGS, {})


def level(value, concurrency=1, ttft=250.0, errors=0, met=True, attainment=None):
    """One level as sglang_serving_bench returns it: `value` tok/s per user."""
    return {"concurrency": concurrency, "requests": 8, "completed": 8 - errors, "errors": errors,
            "ttft_ms": {"p50": ttft, "p90": ttft, "p99": ttft},
            "itl_ms": {"p50": 1000 / value, "p90": 1000 / value, "p99": 1000 / value},
            "e2e_ms": {"p50": None, "p90": None, "p99": None}, "tok_s_per_user": value,
            "output_tok_s": value * concurrency, "accept_length": 2.5, "goodput_rps": None,
            "slo_attainment": attainment, "met": met, "misses": [] if met else ["slow"]}


def score(measured, objective=OBJ, min_gain=0.03):
    """sglang_tune_score with a plan of this objective."""
    return t.sglang_tune_score(measured, {"objective": objective, "min_gain": min_gain})


def proof(value, concurrency=1, ttft=250.0, **lv):
    """A measurement of the serving bench at one level."""
    return {"measured_by": "own bench", "levels": [level(value, concurrency, ttft, **lv)],
            "capacity": {"concurrency": concurrency, "reason": ""}}


def sweep(p, jitter=0.01, known=None):
    """What tune.yml does, with the stand-in's model as the host: returns (winner, results,
    restarts). A candidate with disable-cuda-graph is refused (preflight), fa3 crashes."""
    known = dict(known or {})
    calls = {"n": 0}

    def measure(cand):
        calls["n"] += 1
        sign = 1 if calls["n"] % 2 else -1  # deterministic wobble of +-jitter
        return perf.tok_s_per_user(cand["args"]) * (1 + sign * jitter)

    [start] = t.sglang_tune_candidates(p, {"args": ARGS, "env": {}}, None, [], "0.5.23", "h", {})
    figures = t.sglang_tune_score([proof(measure(start)), proof(measure(start))], p)
    noise = figures["noise"]
    start.update(figures, verdict="incumbent", release="r0")
    incumbent, results, restarts = start, [start], 0
    for knob in p["knobs"]:
        knob_results = []
        for cand in t.sglang_tune_candidates(p, incumbent, knob["name"], list(known),
                                             "0.5.23", "h"):
            if cand["skip"] == "identical":
                res = {**cand, "verdict": "identical"}
            elif cand["skip"] == "measured":
                res = {**known[cand["key"]], "resumed": True}
            elif not t.sglang_tune_budget(restarts, 0, 1, p["max_restarts"], 3600)["ok"]:
                res = {**cand, "verdict": "skipped"}
            elif cand["args"].get("disable-cuda-graph") is True:
                res = {**cand, "verdict": "refused"}
            elif perf.startup_error(cand["args"]):
                restarts += 2
                res = {**cand, "verdict": "crashed"}
            else:
                restarts += 1
                res = {**cand, "verdict": "measured", "release": cand["key"],
                       **t.sglang_tune_score(proof(measure(cand)), p)}
            if res["verdict"] in ("measured", "crashed") and not res.get("resumed"):
                known[res["key"]] = res
            knob_results.append(res)
            results.append(res)
        incumbent = t.sglang_tune_best(knob_results, incumbent, noise)
    finals = []
    for fin in t.sglang_tune_finalists(results, p["finalists"]):
        restarts += 1
        final = t.sglang_tune_score(proof(perf.tok_s_per_user(fin["args"])), p)
        finals.append({**fin, "final_score": final["score"], "final_capacity": final["capacity"]})
    outcome = t.sglang_tune_outcome({"plan": p, "base_config": ARGS, "base_env": {},
                                     "start": start, "noise": noise, "results": results,
                                     "incumbent": incumbent, "finals": finals})
    return outcome["winner"], results, restarts, known


def test_the_sweep_finds_the_models_best_with_fewer_restarts_than_the_grid():
    p = plan()
    winner, results, restarts, _ = sweep(p)
    assert p["grid_size"] == 4 * 3 * 2 * 2
    assert winner["args"]["speculative-num-steps"] == 2
    assert winner["args"]["speculative-num-draft-tokens"] == 3  # the constraint
    assert "attention-backend" not in winner["args"]
    assert restarts < p["grid_size"] / 3
    verdicts = {r["id"]: r["verdict"] for r in results}
    assert verdicts["speculative-num-steps=2, disable-cuda-graph=true"] == "refused"
    assert verdicts["speculative-num-steps=2, attention-backend=fa3"] == "crashed"
    assert verdicts["speculative-num-steps=3"] == "identical"
    # Within noise: the graph's max batch size does not matter at concurrency 1.
    assert "cuda-graph-max-bs" not in winner["changes"]


def test_a_resumed_sweep_measures_nothing_twice():
    p = plan()
    _, _, restarts_first, known = sweep(p, jitter=0.0)
    winner, results, restarts, _ = sweep(p, jitter=0.0, known=known)
    assert winner["args"]["speculative-num-steps"] == 2
    assert restarts == p["finalists"]  # only the finalists restart again
    assert restarts < restarts_first
    assert any(r.get("resumed") for r in results)


def test_the_budget_stops_the_sweep_and_the_start_stays_the_winner():
    p = plan(max_restarts=1)
    winner, results, _, _ = sweep(p)
    assert any(r["verdict"] == "skipped" for r in results)
    # Only 1 step was measured (74.5 < 78.2): nothing beat the start.
    assert winner["changes"] == {}


def scored(score, capacity=1):
    return {"score": score, "capacity": capacity}


def test_a_candidate_wins_only_beyond_noise():
    assert t.sglang_tune_beats(scored(104.0), scored(100.0), 0.03)
    assert not t.sglang_tune_beats(scored(103.0), scored(100.0), 0.03)
    assert not t.sglang_tune_beats(scored(None), scored(100.0), 0.03)
    assert t.measured_noise([100.0, 110.0], 0.02) == pytest.approx(0.0952, abs=1e-3)
    assert t.measured_noise([100.0, 100.5], 0.02) == 0.02
    assert t.measured_noise([0.0, 0.0], 0.02) == 0.02
    with pytest.raises(AnsibleFilterError, match="at least twice"):
        t.measured_noise([100.0, None], 0.02)


def test_the_proven_capacity_ranks_before_the_score():
    """A higher capacity wins whatever the score; at the same capacity the score must beat the
    noise; the finalists and the leaderboard put the highest capacity first."""
    assert t.sglang_tune_beats(scored(50.0, 8), scored(100.0, 4), 0.03)
    assert not t.sglang_tune_beats(scored(200.0, 4), scored(100.0, 8), 0.03)
    results = [dict(scored(200.0, 4), id="fast", key="a", verdict="measured", release="r1"),
               dict(scored(90.0, 8), id="wide", key="b", verdict="measured", release="r2"),
               dict(scored(None, None), id="failed", key="c", verdict="measured", release="r3")]
    assert t.sglang_tune_best(results, dict(scored(100.0, 4), id="start"), 0.03)["id"] == "wide"
    assert [r["id"] for r in t.sglang_tune_finalists(results, 3)] == ["wide", "fast"]
    lines = t.leaderboard(results, OBJ)
    assert [line.split()[0] for line in lines[2:]] == ["r2", "r1", "r3"]
    # The winner: the finalists' second figures, capacity first, against the start's.
    start = dict(scored(100.0, 4), key="s", changes={})
    finals = [dict(results[0], final_score=300.0, final_capacity=4, changes={"x": 1}),
              dict(results[1], final_score=80.0, final_capacity=8, changes={"x": 1, "y": 2})]
    assert t.pick_winner(finals, start, 0.03)["id"] == "wide"
    finals[1]["final_capacity"] = 4
    assert t.pick_winner(finals, start, 0.03)["id"] == "fast"


def test_noise_large_enough_keeps_the_incumbent():
    winner, _, _, _ = sweep(plan(min_gain=0.2))
    assert winner["changes"] == {}


@pytest.mark.parametrize("over, match", [
    ({"space": {}}, "sglang_tune_space is empty"),
    ({"space": {"args": {"speculative-num-steps": 3}}}, "non-empty list"),
    ({"space": {"args": {"Bad_Name": [1]}}}, "not an SGLang argument name"),
    ({"space": {"args": {"port": [1, 2]}}}, "set 'port' through the variable sglang_port"),
    ({"space": {"args": {"tp-size": [1, 1]}}}, "lists a value twice"),
    ({"space": {"nccl": {}}}, "'args'"),
    ({"space": {"env": {"NCCL P2P": ["1"]}}}, "environment variable"),
    ({"constraints": [{"set": "speculative-num-steps", "from": "x"}]}, "also lists"),
    ({"constraints": [{"set": "a"}]}, "expected"),
    ({"objective": {"metric": "tok_s"}}, "not one of"),
    ({"objective": {"concurrency": 0}}, "concurrency must be"),
    ({"objective": {"ttft_p99_ms_max": -1}}, "positive number"),
    ({"max_restarts": 0}, "sglang_tune_max_restarts must be an integer >= 1"),
    ({"noise_repeats": 1}, "sglang_tune_noise_repeats must be an integer >= 2"),
    ({"min_gain": 2}, "between 0 and 1"),
])
def test_bad_settings_are_refused_saying_what_to_change(over, match):
    with pytest.raises(AnsibleFilterError, match=match):
        plan(**over)


def test_numbers_given_with_e_arrive_as_strings():
    p = plan(max_restarts="2", min_gain="0.05")
    assert p["max_restarts"] == 2 and p["min_gain"] == 0.05
    with pytest.raises(AnsibleFilterError, match="max_restarts"):
        plan(max_restarts="two")


def test_env_knobs_and_keys():
    p = t.sglang_tune_plan(spec(space={"env": {"NCCL_P2P_DISABLE": [0, 1]}}), ARGS, {})
    start = t.make_candidate(p, ARGS, {}, {}, "0.5.23", "h")
    cands = t.sglang_tune_candidates(p, start, "NCCL_P2P_DISABLE", [], "0.5.23", "h")
    assert [c["env"] for c in cands] == [{"NCCL_P2P_DISABLE": "0"}, {"NCCL_P2P_DISABLE": "1"}]
    assert t.changed_env(cands[1], {}) == {"NCCL_P2P_DISABLE": "1"}
    # The key is what was measured: another host or SGLang version measures again.
    again = t.make_candidate(p, ARGS, {}, {"NCCL_P2P_DISABLE": "1"}, "0.5.23", "h")
    other = t.make_candidate(p, ARGS, {}, {"NCCL_P2P_DISABLE": "1"}, "0.5.24", "h")
    assert again["key"] == cands[1]["key"] != other["key"]
    skipped = t.sglang_tune_candidates(p, start, "NCCL_P2P_DISABLE", [again["key"]],
                                            "0.5.23", "h")
    assert [c["skip"] for c in skipped] == [None, "measured"]
    # Each candidate carries the expectations it is deployed with; the start its own.
    steps = t.sglang_tune_plan(spec(space={"args": {"speculative-num-steps": [2]}}), ARGS, {})
    [first] = t.sglang_tune_candidates(steps, {"args": ARGS, "env": {}}, None, [], "0.5.23", "h",
                                       PROFILE["expect"])
    assert first["id"] == "starting configuration" and first["skip"] is None
    assert first["expect"] == PROFILE["expect"]
    [two] = t.sglang_tune_candidates(steps, first, "speculative-num-steps", [], "0.5.23", "h",
                                     PROFILE["expect"])
    assert two["expect"]["speculative"]["num_steps"] == 2


def test_score_respects_the_ttft_ceiling_and_failed_requests():
    obj = {"metric": "output_tok_s", "concurrency": 8, "ttft_p99_ms_max": 500}
    assert score(proof(50, 8, 400), obj)["score"] == 400.0
    assert "above the ceiling" in score(proof(50, 8, 900), obj)["reason"]
    # The ceiling is judged on the TTFT p99 of the objective's level: none measured, none met.
    unmeasured = proof(50, 8, 400)
    unmeasured["levels"][0]["ttft_ms"]["p99"] = None
    assert "above the ceiling" in score(unmeasured, obj)["reason"]
    assert "no level" in score(proof(50, 1), obj)["reason"]
    failed = score(proof(50, 8, errors=2), obj)
    assert failed["score"] is None and failed["reason"] == "2 of 8 requests failed at concurrency 8"


def test_a_candidate_counts_with_a_proven_capacity_and_no_failed_request_at_any_level():
    obj = {"metric": "output_tok_s", "concurrency": 4, "ttft_p99_ms_max": None}
    sweep_ = {"levels": [level(60, 1), level(50, 2), level(40, 4)]}
    out = score(sweep_, obj)
    assert (out["capacity"], out["score"], out["reason"]) == (4, 160.0, "")
    assert out["level"]["concurrency"] == 4 and out["accept_length"] == 2.5
    # A level above the one that missed is luck, not capacity; the score is still read at 4.
    lucky = {"levels": [level(60, 1), level(15, 2, met=False), level(40, 4)]}
    out = score(lucky, obj)
    assert out["capacity"] == 1 and out["score"] == 160.0
    assert out["reason"] == "concurrency 2 missed: slow"
    # No level met: it does not count.
    nothing = score({"levels": [level(10, 1, met=False), level(9, 4, met=False)]},
                                  obj)
    assert nothing["score"] is None and "no proven capacity" in nothing["reason"]
    # A finalist's levels above the objective's: no capacity from them, but a failure counts.
    above = {"levels": [level(60, 1), level(40, 4), level(30, 16)]}
    assert score(above, obj)["capacity"] == 4
    above["levels"][2]["errors"] = 1
    assert score(above, obj)["score"] is None


def test_the_score_counts_the_requests_within_the_slos_goodput():
    obj = {"metric": "output_tok_s", "concurrency": 4, "ttft_p99_ms_max": None}
    # SGLang's benchmark counts the requests within the SLOs (--goodput): 3 of 4.
    sglang = {"levels": [level(60, 1), level(40, 4, met=False, attainment=0.75)]}
    out = score(sglang, obj)
    assert (out["capacity"], out["score"]) == (1, 120.0)
    # The own bench counts none: a level that met all of them counts whole, one that missed none.
    own = {"levels": [level(60, 1), level(40, 4, met=False)]}
    assert score(own, obj)["score"] == 0.0
    assert score({"levels": [level(60, 1), level(40, 4)]}, obj)["score"] == 160.0
    per_user = dict(obj, metric="decode_tok_s_per_user")
    assert score(sglang, per_user)["score"] == 30.0


def test_the_noise_runs_give_the_best_run_and_every_score():
    runs = [proof(50.0), proof(52.0), proof(51.0, errors=1)]
    out = score(runs, OBJ, min_gain=0.01)
    assert out["score"] == 52.0 and out["capacity"] == 1
    assert out["runs"] == [50.0, 52.0, None]
    # The noise: the spread of the runs that count (50 and 52 over their mean), not below min_gain.
    assert out["noise"] == pytest.approx(0.0392, abs=1e-3)
    assert score(runs, OBJ, min_gain=0.05)["noise"] == 0.05
    none = score([proof(50.0, errors=1), proof(50.0)], OBJ)
    assert none["score"] == 50.0 and none["noise"] is None  # one run counts: no noise
    none = score([proof(50.0, errors=1)], OBJ)
    assert none["score"] is None and "failed" in none["reason"] and none["runs"] == [None]


def test_the_tuners_levels_are_the_objectives_and_those_below_it():
    assert plan()["levels"] == [1]
    assert plan(objective={"concurrency": 16})["levels"] == [1, 2, 4, 8, 16]
    assert plan(objective={"concurrency": 16}, workload_levels=[32, 1, 8])["levels"] == [1, 8, 16]
    assert plan(objective={"concurrency": 4}, workload_levels=["2"])["levels"] == [2, 4]
    for bad in ([0], [True], "1,2", [1.5]):
        with pytest.raises(AnsibleFilterError, match="sglang_workload_levels"):
            plan(workload_levels=bad)


def test_a_result_measured_at_another_workload_is_not_resumed():
    """The key holds what a candidate was measured at (workload, SLOs, levels, objective): a
    result of an earlier sweep measured otherwise is measured again, never compared."""
    def key(**over):
        return t.make_candidate(plan(**over), ARGS, {}, {}, "0.5.23", "h")["key"]

    assert key() == key()
    assert key(workload={"input_len": 64}) != key()
    assert key(slo={"ttft_p99_ms": 1000}) != key()
    assert key(objective={"concurrency": 4}) != key()


def test_budget_of_restarts_and_wall_time():
    assert t.sglang_tune_budget(2, 0, 10, 3, 100)["ok"]
    assert "restart budget" in t.sglang_tune_budget(3, 0, 10, 3, 100)["reason"]
    assert "wall time" in t.sglang_tune_budget(0, 0, 100, 3, 100)["reason"]


def test_report_lines_winner_yaml_and_expectations():
    p = plan()
    winner, results, _, _ = sweep(p)
    lines = t.leaderboard(results, p["objective"], winner["key"])
    assert lines[0].startswith("objective: the proven capacity up to concurrency 1")
    assert "output_tok_s at concurrency 1 of the requests within the SLOs" in lines[0]
    assert lines[1].split()[:4] == ["candidate", "changed", "resolved", "capacity"]
    best = next(line for line in lines if "WINNER" in line)
    assert "speculative-num-steps=2" in best and "speculative-num-draft-tokens=3" in best
    assert any("refused" in line for line in lines)
    out = yaml.safe_load(t.server_args_yaml(winner, ARGS, {"context-length": 8192}))
    assert out == {"sglang_server_args": {"speculative-num-steps": 2, "context-length": 8192,
                                          "speculative-num-draft-tokens": 3}}
    # The role reads all of it from one call at the end of the sweep.
    sweep_state = {"plan": p, "base_config": ARGS, "base_env": {"NCCL_DEBUG": "WARN"},
                   "start": results[0], "noise": 0.03, "results": results, "finals": [winner]}
    outcome = t.sglang_tune_outcome(sweep_state, {"context-length": 8192})
    assert outcome["winner"]["key"] == winner["key"] and outcome["leaderboard"] == lines
    assert yaml.safe_load(outcome["inventory"]) == out
    assert outcome["server_args"] == out["sglang_server_args"]
    assert outcome["env"] == {}
    # The starting release serves again unless the operator applies the winner.
    assert outcome["serving"] == results[0]["release"]
    assert t.sglang_tune_outcome(sweep_state, apply=True)["serving"] == winner["release"]
    # With no finalist (a sweep stopped early) the incumbent wins.
    early = t.sglang_tune_outcome(dict(sweep_state, finals=[], incumbent=results[0]))
    assert early["winner"]["key"] == results[0]["key"]
    assert [line for line in early["leaderboard"] if "WINNER" in line] == [
        line for line in early["leaderboard"] if "starting configuration" in line]
    expect = t.expectations(winner, PROFILE["expect"])
    assert expect["speculative"] == {"algorithm": "EAGLE", "num_steps": 2, "eagle_topk": 1,
                                     "num_draft_tokens": 3}
    assert PROFILE["expect"]["speculative"]["num_steps"] == 3  # not modified in place


def test_the_profiles_own_space_is_valid():
    p = t.sglang_tune_plan(spec(space=PROFILE["tune"]["space"]), ARGS, {})
    # unset cuda-graph-max-bs and attention-backend count as one more setting each
    assert p["grid_size"] == 5 * 4 * 3 * 2 * 3


def test_the_stand_in_model_has_the_documented_optimum():
    base = {**ARGS}
    by_steps = {s: perf.tok_s_per_user({**base, "speculative-num-steps": s,
                                        "speculative-num-draft-tokens": s + 1})
                for s in range(1, 6)}
    assert max(by_steps, key=by_steps.get) == 2
    assert perf.tok_s_per_user({**base, "cuda-graph-max-bs": 2}, 4) < perf.tok_s_per_user(base, 4)
    assert perf.startup_error({**base, "attention-backend": "fa3"})


def test_the_chart_is_a_png_with_one_line_per_finalist():
    chart = load_module("sglang_tune_chart")
    fins = [{"id": "a", "final_levels": [level(80, 1), level(70, 4)]},
            {"id": "b", "final_levels": [level(75, 1)]}]
    data = chart.draw(fins, "t")
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert chart.series(fins[0], "output_tok_s") == ([1, 4], [80, 280])
    assert chart.series(fins[0], "tok_s_per_user") == ([1, 4], [80, 70])


def test_resolved_identity_ignores_what_sglang_draws_anew():
    one = {"attention_backend": "flashinfer", "random_seed": 1, "nccl_port": 30001}
    two = {"attention_backend": "flashinfer", "random_seed": 7, "nccl_port": 30444}
    assert t.sglang_tune_resolved_key(one) == t.sglang_tune_resolved_key(two) != ""
    assert t.sglang_tune_resolved_key({**one, "attention_backend": "triton"}) != \
        t.sglang_tune_resolved_key(one)
    assert t.sglang_tune_resolved_key(None) == ""


def test_the_winners_arguments_are_yaml_even_from_ansibles_own_types():
    """Ansible hands filters str and dict subclasses (tagged values); safe_dump refuses those."""
    class Tagged(str):
        pass

    winner = {"args": {"speculative-num-steps": 2, "attention-backend": Tagged("triton")}}
    text = t.server_args_yaml(winner, {"speculative-num-steps": 3},
                                     {Tagged("mem-fraction-static"): 0.8})
    assert yaml.safe_load(text) == {"sglang_server_args": {
        "attention-backend": "triton", "mem-fraction-static": 0.8, "speculative-num-steps": 2}}


# The planner's parts, one concern each (sglang_tune_plan only calls them in order).
@pytest.mark.parametrize("kind, name, values, match", [
    ("args", "speculative-num-steps", [[1, 2]], "not a scalar"),
    ("args", "speculative-num-steps", [], "non-empty list"),
    ("args", "api-key", ["x"], "through the variable sglang_api_key"),
    # What the profile refuses, the tune space refuses (issue 22): the role owns these.
    ("args", "admin-api-key", ["k" * 20], "through the variable sglang_admin_api_key"),
    ("args", "nnodes", [1, 2], "through the variable sglang_nodes_group"),
    ("args", "node-rank", [0], "through the variable sglang_nodes_group"),
    ("args", "dist-init-addr", ["10.0.0.1:5000"], "sglang_dist_init_port"),
    ("args", "revision", ["main"], "through the variable sglang_model_revision"),
    ("args", "config", ["/etc/x.yaml"], "not an argument you set"),
    ("args", "tp_size", [1, 2], "write 'tp_size' as SGLang spells it: 'tp-size'"),
    ("args", "tp-size\n", [1, 2], "not an SGLang argument name|as SGLang spells it"),
    ("env", "NCCL_ALGO\n", ["Ring"], "a name with a control character"),
    ("env", "NCCL_ALGO", ["Ring\nLD_PRELOAD=/tmp/x.so"], "holds the control character .* at position 4"),
    ("env", "NCCL_P2P_DISABLE", [1, "1"], "lists a value twice"),  # one value as a string
    ("env", "1BAD", ["1"], "environment variable"),
])
def test_a_knob_is_refused_for_what_it_gets_wrong(kind, name, values, match):
    with pytest.raises(AnsibleFilterError, match=match):
        t._plan_knob(kind, name, values)


def test_a_knob_keeps_its_values_env_ones_as_strings():
    assert t._plan_knob("args", "disable-cuda-graph", [False, True]) == {
        "name": "disable-cuda-graph", "kind": "args", "values": [False, True]}
    assert t._plan_knob("env", "NCCL_P2P_DISABLE", [0, True])["values"] == ["0", "True"]


def test_knobs_list_args_before_env():
    knobs = t._plan_knobs({"env": {"NCCL_P2P_DISABLE": ["1"]}, "args": {"tp-size": [1, 2]}})
    assert [k["name"] for k in knobs] == ["tp-size", "NCCL_P2P_DISABLE"]
    with pytest.raises(AnsibleFilterError, match="map names to lists"):
        t._plan_knobs({"args": ["tp-size"]})


@pytest.mark.parametrize("rule, match", [
    ({"set": "a", "from": "b", "plus": True}, "plus must be an integer"),
    ({"set": "a", "from": "b", "plus": "1"}, "plus must be an integer"),
    ({"set": "a", "from": "b", "when": ["c"]}, "when must map"),
    ({"set": "a", "from": "b", "unless": {}}, "expected"),
    ("set a from b", "expected"),
])
def test_a_constraint_is_refused_for_what_it_gets_wrong(rule, match):
    with pytest.raises(AnsibleFilterError, match=r"sglang_tune_constraints\[1\]"):
        t._plan_constraints([{"set": "x", "from": "y"}, rule], [])
    with pytest.raises(AnsibleFilterError, match=match):
        t._plan_constraint(0, rule, set())
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        t._plan_constraints({"set": "a", "from": "b"}, [])


def test_the_objective_has_defaults_and_refuses_booleans():
    assert t._plan_objective({}) == {"metric": "output_tok_s", "concurrency": 1,
                                     "ttft_p99_ms_max": None}
    assert t._plan_objective({"metric": "output_tok_s", "concurrency": 8,
                              "ttft_p99_ms_max": 500.5})["ttft_p99_ms_max"] == 500.5
    for bad in ({"concurrency": True}, {"concurrency": 1.5}, {"ttft_p99_ms_max": True},
                {"ttft_p99_ms_max": "500"}):
        with pytest.raises(AnsibleFilterError, match="sglang_tune_objective"):
            t._plan_objective(bad)


def test_budget_counts_and_the_minimum_gain():
    assert t._plan_count("finalists", " 3 ", 1) == 3
    refusal = "sglang_tune_finalists must be an integer >= 1"
    for bad in (True, 0, None, 2.0, "-1"):
        with pytest.raises(AnsibleFilterError, match=refusal):
            t._plan_count("finalists", bad, 1)
    assert t._plan_min_gain("0") == 0.0 and t._plan_min_gain(0.5) == 0.5
    for bad in (1, -0.1, "a lot", True, None):
        with pytest.raises(AnsibleFilterError, match="between 0 and 1"):
            t._plan_min_gain(bad)


def test_a_leaderboard_row_says_where_a_result_comes_from():
    row = t._leaderboard_row({"id": "x=1", "key": "k", "verdict": "measured", "resumed": True,
                              "release": "r1", "derived": {"y": True}, "accept_length": 2.5,
                              "capacity": 4, "score": 321.0,
                              "level": {"ttft_ms": {"p50": 12.0, "p99": 30.5},
                                        "tok_s_per_user": 80.25}},
                             "k")
    assert row == ("r1", "x=1", "y=true", "4", "12.0", "30.5", "-", "80.2", "-", "321.0", "2.50",
                   "measured (earlier sweep) WINNER")
    assert t._verdict({"key": "k", "verdict": "identical", "reason": "same"}, "k") == \
        "identical: same"
    assert t._leaderboard_row({}, None)[:3] == ("-", "?", "-")
