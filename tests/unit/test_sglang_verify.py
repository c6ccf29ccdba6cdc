import pytest
from ansible.errors import AnsibleFilterError
from support import load_module

from ansible_collections.sglang.deploy.plugins.filter import sglang_verify as v

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_bench  # loaded by support, as Ansible would

journal = load_module("sglang_journal")

NEW = {  # /server_info of 0.5.23 (trimmed)
    "version": "0.5.23", "tp_size": 2,
    "cuda_graph_config": {"decode": {"backend": "full", "max_bs": 32},
                          "prefill": {"backend": "breakable", "max_bs": 1}},
    "speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
    "internal_states": [{"avg_spec_accept_length": 2.9}, {"avg_spec_accept_length": 3.1}],
    "launch_command": "python -m sglang.launch_server --config x.yaml",
}
OLD = {  # /get_server_info of 0.5.12 (trimmed)
    "version": "0.5.12", "tp_size": 2, "disable_cuda_graph": False, "cuda_graph_max_bs": 160,
    "disable_piecewise_cuda_graph": True, "speculative_algorithm": None,
}
PREFLIGHT = {"rows": [{"name": "decode_cuda_graph", "predicted": "on"},
                      {"name": "prefill_cuda_graph", "predicted": "on"},
                      {"name": "tp_size", "predicted": 2}]}
SPEC = {"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}


def test_effective_view_of_the_new_shape():
    eff = v.sglang_effective(NEW)
    assert eff["decode_cuda_graph"] == "on" and eff["decode_max_bs"] == 32
    assert eff["prefill_cuda_graph"] == "on" and eff["prefill_backend"] == "breakable"
    assert eff["speculative"] == SPEC
    assert eff["accept_length"] == 3.0


def test_effective_view_of_the_legacy_shape():
    eff = v.sglang_effective(OLD)
    assert (eff["decode_cuda_graph"], eff["decode_max_bs"]) == ("on", 160)
    assert eff["prefill_cuda_graph"] == "off"
    assert eff["speculative"] is None and eff["accept_length"] is None
    opt_in = v.sglang_effective({"enable_piecewise_cuda_graph": False})
    assert opt_in["prefill_cuda_graph"] == "off"
    assert v.sglang_effective({})["prefill_cuda_graph"] is None


def test_effective_refuses_garbage():
    with pytest.raises(AnsibleFilterError, match="JSON object"):
        v.sglang_effective("<html>")


def test_verify_passes_when_resolved_as_expected():
    out = v.sglang_verify(v.sglang_effective(NEW), PREFLIGHT,
                          {"decode_cuda_graph": "required", "speculative": SPEC, "tp_size": 2})
    assert out["ok"] and not out["warnings"]


def test_required_setting_that_did_not_resolve_fails_with_both_values():
    off = dict(NEW, cuda_graph_config={"decode": {"backend": "disabled"},
                                       "prefill": {"backend": "disabled"}})
    out = v.sglang_verify(v.sglang_effective(off), PREFLIGHT, {"decode_cuda_graph": "required"})
    assert not out["ok"]
    assert "decode_cuda_graph: required by sglang_expect, but the server resolved off" in out["failures"]
    assert "prefill_cuda_graph: preflight predicted on, the server resolved off" in out["warnings"]


def test_speculative_and_tp_mismatches_fail():
    out = v.sglang_verify(v.sglang_effective(dict(NEW, tp_size=1, speculative_num_steps=1)),
                          PREFLIGHT, {"speculative": SPEC, "tp_size": 2})
    assert any(f.startswith("tp_size") for f in out["failures"])
    assert any("num_steps: expected 3, server resolved 1" in f for f in out["failures"])


SMOKE = {"accept_length": 3.0, "levels": [
    {"concurrency": 1, "requests_ok": 8, "requests_failed": 0, "errors": [],
     "ttft_ms_p50": 300.0, "ttft_ms_p99": 310.0, "tpot_ms_p50": 20.0, "tpot_ms_p99": 21.0,
     "decode_tok_s_per_user": 50.0, "output_tok_s": 45.0},
    {"concurrency": 4, "requests_ok": 8, "requests_failed": 0, "errors": [],
     "ttft_ms_p50": 320.0, "ttft_ms_p99": 330.0, "tpot_ms_p50": 21.0, "tpot_ms_p99": 22.0,
     "decode_tok_s_per_user": 47.0, "output_tok_s": 170.0}]}


def test_gate_floor_ttft_and_failed_requests():
    assert v.sglang_smoke_gate(SMOKE, 45, 400)["ok"]
    out = v.sglang_smoke_gate(SMOKE, 55, 250)
    assert any("below the floor of 55" in f for f in out["failures"])
    assert any("TTFT p50 300.0 ms" in f for f in out["failures"])
    broken = {"levels": [dict(SMOKE["levels"][0], requests_failed=2, errors=["HTTP 500"])]}
    assert "2 requests failed (HTTP 500)" in v.sglang_smoke_gate(broken)["failures"][0]


def test_gate_regression_against_the_baseline():
    baseline = {"levels": [dict(SMOKE["levels"][0], decode_tok_s_per_user=60.0)]}
    out = v.sglang_smoke_gate(SMOKE, None, None, baseline, 0.10)
    assert out["failures"] == ["decode_tok_s_per_user at concurrency 1: 50.0 vs 60.0 in the "
                               "previous good release (-16.7%, tolerance 10%)"]
    assert v.sglang_smoke_gate(SMOKE, None, None, baseline, 0.20)["ok"]


def test_a_rollback_is_warned_of_a_regression_but_still_held_to_the_floors():
    baseline = {"levels": [dict(SMOKE["levels"][0], decode_tok_s_per_user=60.0)]}
    out = v.sglang_smoke_gate(SMOKE, 45, None, baseline, 0.10, "warn")
    assert out["ok"] and out["failures"] == []
    assert out["warnings"] == ["decode_tok_s_per_user at concurrency 1: 50.0 vs 60.0 in its "
                               "own figures when it was proven (-16.7%, tolerance 10%)"]
    assert v.smoke_table(out)[-2:] == [f"warning: {out['warnings'][0]}", "smoke: OK"]
    below = v.sglang_smoke_gate(SMOKE, 55, None, baseline, 0.10, "warn")
    assert not below["ok"] and "below the floor of 55" in below["failures"][0]
    with pytest.raises(AnsibleFilterError, match="regressions is 'refuse' or 'warn'"):
        v.sglang_smoke_gate(SMOKE, None, None, baseline, 0.10, "ignore")


@pytest.mark.parametrize("bad", [{"levels": []}, None])
def test_gate_without_figures_is_an_error(bad):
    with pytest.raises(AnsibleFilterError, match="no levels"):
        v.sglang_smoke_gate(bad)


def test_gate_refuses_non_numeric_floors():
    with pytest.raises(AnsibleFilterError, match="sglang_smoke_min_decode_tok_s: .fast. is not a number"):
        v.sglang_smoke_gate(SMOKE, "fast")


def test_ceiling_of_the_reference_deployment():
    facts = {"gpus": {"devices": [{"name": "NVIDIA RTX A6000"}] * 2},
             "model": {"weight_bytes": 54_000_000_000}}
    out = v.sglang_ceiling(facts, SMOKE, 2, {"RTX A6000": 768, "A6000 Ada": 960})
    # 768 GB/s / 27 GB per GPU = 28.4 steps/s, x 3.0 accepted tokens = 85.3 tok/s
    assert out["steps_per_s"] == 28.4 and out["ceiling_tok_s"] == 85.3
    assert out["fraction"] == round(50.0 / 85.333, 3)
    assert not v.sglang_ceiling(facts, SMOKE, 2, {"H100": 3350})["known"]
    assert not v.sglang_ceiling({}, SMOKE, 2, {})["known"]


def test_tables_render():
    ceiling = {"known": False, "reason": "no GPU facts"}
    gate = v.sglang_smoke_gate(SMOKE, 45, None, {"levels": SMOKE["levels"][:1]}, 0.1, "refuse",
                               ceiling)
    lines = gate["lines"]
    assert lines[-1] == "smoke: OK" and "no previous good release" in lines[2]
    assert any("no GPU facts" in line for line in lines)
    # The gate hands back what the release keeps too: the next release's baseline.
    assert gate["record"]["ceiling"] == ceiling
    assert [lv["concurrency"] for lv in gate["record"]["levels"]] == [
        lv["concurrency"] for lv in SMOKE["levels"]]
    verification = v.sglang_verify(v.sglang_effective(NEW), PREFLIGHT, {})
    text = v.sglang_verify_table(verification, {"decode_graph_captured": {
        "count": 1, "lines": ["Capture target decode CUDA graph begin."]}})
    assert text[-1] == "verification: OK"
    assert any(line.startswith("journal decode_graph_captured x1") for line in text)
    # A journal not read is said to be unread, not to hold none of the lines.
    assert "journal: not read" in v.sglang_verify_table(verification, None)[-2]
    assert "none of the capture" in v.sglang_verify_table(verification, {})[-2]


def test_journal_patterns_find_sglang_log_lines():
    lines = [
        "[2026-11-29 08:00:01 TP0] Capture cuda graph begin. This can take up to several minutes.",
        "[2026-11-29 08:00:09 TP0] Capture target decode CUDA graph begin. avail mem=3.1 GB",
        "Breakable CUDA graph is incompatible with DeepSeek-V4; disabling prefill CUDA graph.",
        "CustomAllreduce is disabled because your platform lacks GPU P2P capability or P2P test failed",
        "Decode batch, #running-req: 1, #token: 120, accept len: 3.12, cuda graph: True, gen throughput (token/s): 55.1",
    ]
    found = journal.scan(lines)
    assert found["decode_graph_captured"]["count"] == 2
    assert set(found) == {"decode_graph_captured", "prefill_graph_auto_disabled",
                          "custom_allreduce_disabled", "decode_with_graph", "accept_length"}


def test_bench_summary_uses_server_tokens_not_chunks():
    results = [{"ok": True, "ttft_s": 0.3, "latency_s": 0.3 + 255 * 0.02, "tokens": 256},
               {"ok": False, "error": "HTTP 503"}]
    out = sglang_bench.summarize(results, 1, wall=6.0)
    assert out["tpot_ms_p50"] == 20.0 and out["decode_tok_s_per_user"] == 50.0
    assert out["output_tok_s"] == round(256 / 6.0, 2)
    assert (out["requests_ok"], out["requests_failed"], out["errors"]) == (1, 1, ["HTTP 503"])


def test_metrics_parsing_sums_graph_passes_by_mode():
    text = ('sglang:cuda_graph_passes_total{model_name="m",tp_rank="0",mode="decode_cuda_graph"} 10\n'
            'sglang:cuda_graph_passes_total{model_name="m",tp_rank="1",mode="decode_cuda_graph"} 12\n'
            'sglang:cuda_graph_passes_total{model_name="m",tp_rank="0",mode="prefill_none"} 3\n'
            "# HELP something\n")
    passes = sglang_bench.graph_passes(sglang_bench.parse_metrics(text))
    assert passes == {"decode_cuda_graph": 22.0, "prefill_none": 3.0}


@pytest.mark.parametrize("bandwidth, tp, smoke", [
    ({"RTX A6000": 0}, 2, {"levels": [{"decode_tok_s_per_user": 50.0}]}),
    ({"RTX A6000": -5}, 2, {"levels": [{"decode_tok_s_per_user": 50.0}]}),
    ({"RTX A6000": "fast"}, 2, {}),
    ({"RTX A6000": 768}, "abc", {"levels": "x", "accept_length": "y"}),
    ([], 2, None),
    ({"RTX A6000": float("nan")}, 2, {"levels": [None]}),
])
def test_ceiling_never_raises_on_bad_numbers(bandwidth, tp, smoke):
    """Before: bandwidth 0 raised ZeroDivisionError, odd types raised TypeError."""
    facts = {"gpus": {"devices": [{"name": "NVIDIA RTX A6000"}]},
             "model": {"weight_bytes": 54e9}}
    out = v.sglang_ceiling(facts, smoke, tp, bandwidth)
    assert out["known"] in (True, False)
    if not out["known"]:
        assert "sglang_gpu_bandwidth_gbs" in out["reason"]


def test_ceiling_of_garbage_facts_is_unknown():
    for facts in ([], "x", {"gpus": [], "model": 5}, {"gpus": {"devices": [5]}}):
        assert v.sglang_ceiling(facts, {}, 2, {"A6000": 768})["known"] is False
