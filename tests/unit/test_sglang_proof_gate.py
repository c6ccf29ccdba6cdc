"""sglang_proof_gate: a release's proof at its workload against its SLOs and against the proof of
the release it replaces, like with like (the same workload, SLOs and benchmark)."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.filter.sglang_proof import sglang_proof_gate
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_workload as workloads

WORKLOAD = workloads.check({"input_len": 256, "output_len": 32})
SLO = {"min_tok_s_per_user": 30}


def proof(capacity, per_level, workload=WORKLOAD, slo=SLO, by="sglang.bench_serving"):
    """A proof as sglang_serving_bench records it: {concurrency: (tok/s, tok/s per user)}."""
    levels = [{"concurrency": c, "requests": 4 * c, "completed": 4 * c, "errors": 0,
               "ttft_ms": {"p50": 250, "p90": 260, "p99": 270}, "itl_ms": {"p50": 18, "p90": 18, "p99": 19},
               "e2e_ms": {"p50": 800, "p90": 810, "p99": 820}, "output_tok_s": total,
               "tok_s_per_user": user, "accept_length": None, "goodput_rps": None,
               "slo_attainment": None, "met": user >= 30, "misses": [] if user >= 30 else ["slow"]}
              for c, (total, user) in per_level.items()]
    result = {"measured_by": by, "own_bench_reason": None, "workload": workload, "slo": slo,
              "mode": "quick", "levels": levels, "elapsed_s": 10.0,
              "capacity": {"concurrency": capacity, "reason": "16 missed: slow"}}
    return dict(result, table=workloads.table(result))


A = proof(8, {1: (37, 55), 8: (260, 55), 16: (337, 28)})


def test_a_release_as_fast_as_the_one_it_replaces_passes_and_says_what_it_compared():
    gate = sglang_proof_gate(proof(8, {1: (36, 54), 8: (255, 54), 16: (330, 27)}), A)
    assert gate["ok"] and not gate["failures"] and not gate["unknowns"]
    assert "against the release it replaces, concurrency 8: 255 tok/s (260 there)" in "\n".join(gate["table"])


def test_a_lower_capacity_or_slower_level_is_refused_on_a_deploy_and_warned_of_on_a_rollback():
    slower = proof(4, {1: (30, 45), 4: (120, 45), 8: (200, 25)})
    gate = sglang_proof_gate(slower, A, 0.10)
    assert not gate["ok"]
    text = " | ".join(gate["failures"])
    assert "proven capacity 4 against 8 concurrent requests" in text
    assert "output_tok_s at concurrency 1: 30 against 37 (-18.9%, tolerance 10%)" in text
    assert "tok_s_per_user at concurrency 8: 25 against 55" in text
    warned = sglang_proof_gate(slower, A, 0.10, "warn")
    assert warned["ok"] and warned["warnings"] == gate["failures"]


@pytest.mark.parametrize("missing", [None, 0, float("nan"), "fast"])
def test_a_figure_the_baseline_has_and_this_proof_lacks_is_refused(missing):
    lacking = proof(8, {1: (36, 54), 8: (255, 54), 16: (330, 27)})
    lacking["levels"][1]["output_tok_s"] = missing
    gate = sglang_proof_gate(lacking, A, 0.10)
    assert not gate["ok"]
    assert f"output_tok_s at concurrency 8: {missing!r} here against 260 (nothing measured)" in gate["failures"]


def test_within_the_tolerance_is_not_a_regression():
    assert sglang_proof_gate(proof(8, {1: (34, 51), 8: (240, 51)}), A, 0.10)["ok"]
    assert not sglang_proof_gate(proof(8, {1: (34, 51), 8: (240, 51)}), A, 0.05)["ok"]


def test_no_proven_capacity_is_refused_even_on_a_rollback():
    none = proof(None, {1: (20, 20)})
    for mode in ("refuse", "warn"):
        gate = sglang_proof_gate(none, A, 0.10, mode)
        assert not gate["ok"] and gate["failures"][0].startswith("no proven capacity")


@pytest.mark.parametrize("other, said", [
    ({"workload": workloads.check({"input_len": 1024})}, "another workload"),
    ({"by": "own bench"}, "another benchmark"),
])
def test_a_baseline_proven_otherwise_is_not_compared_and_the_verdict_says_so(other, said):
    """Like with like only: a slower release against a baseline at another workload, SLOs or
    benchmark is not refused on figures that do not compare, and the gate says why."""
    slower = proof(4, {1: (20, 45), 4: (80, 45), 8: (100, 12)})
    kwargs = {"workload": other.get("workload", WORKLOAD), "slo": other.get("slo", SLO),
              "by": other.get("by", "sglang.bench_serving")}
    gate = sglang_proof_gate(slower, proof(8, {1: (37, 55), 8: (260, 55)}, **kwargs))
    assert gate["ok"] and said in gate["unknowns"][0]
    assert gate["unknowns"][0] in "\n".join(gate["table"])


def test_an_slo_edit_keeps_the_per_level_comparison_and_leaves_out_the_capacity_only():
    """Issue 54: other SLOs change what counts as met, not what a level measured at the same
    workload, seed and benchmark: a slower release is still refused level by level."""
    baseline = proof(8, {1: (37, 55), 8: (260, 55)}, slo={"min_tok_s_per_user": 20})
    slower = proof(4, {1: (20, 45), 4: (80, 45), 8: (100, 12)})
    gate = sglang_proof_gate(slower, baseline)
    assert not gate["ok"], gate
    assert any(r.startswith("tok_s_per_user at concurrency 8: 12 against 55") for r in
               gate["failures"]), gate["failures"]
    assert not any(r.startswith("proven capacity") for r in gate["failures"])
    assert "other SLOs" in gate["unknowns"][0] and "level by level compares" in gate["unknowns"][0]
    # The same figures against the same SLOs: compared in full, capacity included.
    same = sglang_proof_gate(slower, proof(8, {1: (37, 55), 8: (260, 55)}))
    assert any(r.startswith("proven capacity 4 against 8") for r in same["failures"])


def test_no_baseline_is_not_compared():
    gate = sglang_proof_gate(A, {})
    assert gate["ok"] and gate["unknowns"] == ["the release it replaces has no proof at a workload"]


@pytest.mark.parametrize("args, said", [
    ((A, A, 0.1, "ignore"), "regressions is 'refuse' or 'warn'"),
    ((A, A, 1.5), "tolerance 1.5"),
    (({"levels": []}, A), "capacity, levels"),
])
def test_bad_arguments_say_what_to_change(args, said):
    with pytest.raises(AnsibleFilterError, match=said.replace("(", r"\(").replace(")", r"\)")):
        sglang_proof_gate(*args)


def test_a_proof_by_the_own_bench_fails_unless_the_operator_accepts_it():
    """Issue 54: where SGLang's benchmark cannot run, the own bench measures; that proof fails
    its gate, naming why SGLang's did not run, unless sglang_workload_own_bench_ok accepts it."""
    own = dict(proof(8, {1: (36, 54), 8: (255, 54)}, by="own bench"),
               own_bench_reason="python -m sglang.bench_serving --help exited 1: No module named 'torch'")
    gate = sglang_proof_gate(own, {})
    assert not gate["ok"]
    assert gate["failures"][0].startswith("measured by the own bench, not SGLang's benchmark "
                                          "(python -m sglang.bench_serving --help exited 1")
    assert "sglang_workload_own_bench_ok: true" in gate["failures"][0]
    assert sglang_proof_gate(own, {}, 0.10, "refuse", True)["ok"]
    # SGLang's own measurement needs no acceptance.
    assert sglang_proof_gate(proof(8, {1: (36, 54), 8: (255, 54)}), {})["ok"]
