import copy
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.filter import sglang_preflight as pf

DATA = Path(__file__).parent / "data" / "nvidia-smi"


def text(name):
    return (DATA / name).read_text()


# ---- topology parsing over every layout nvidia-smi prints ---------------------------------
@pytest.mark.parametrize(
    "name, gpus, links",
    [
        ("topo-nvlink-nics-tabs.txt", 2, {"0-1": "NV4"}),
        ("topo-a6000-pcie-spaces.txt", 2, {"0-1": "PHB"}),
        ("topo-4gpu-old-mlx-column.txt", 4,
         {"0-1": "PIX", "0-2": "SYS", "0-3": "SYS", "1-2": "SYS", "1-3": "SYS", "2-3": "PIX"}),
        ("topo-ansi-underlined-header.txt", 2, {"0-1": "NV2"}),
    ],
)
def test_topology_layouts(name, gpus, links):
    assert pf.nvidia_topology(text(name)) == {"gpus": gpus, "links": links}


def test_indented_eight_gpu_nvlink_matrix_with_nic_and_legend():
    topo = pf.nvidia_topology(text("topo-8gpu-nv12-indented.txt"))
    assert topo["gpus"] == 8
    assert len(topo["links"]) == 28 and set(topo["links"].values()) == {"NV12"}
    assert "0-7" in topo["links"] and "7-0" not in topo["links"]


def test_peer_access_matrix():
    topo = pf.nvidia_topology(text("topo-a6000-pcie-spaces.txt"), text("p2p-a6000-cns.txt"))
    assert topo == {"gpus": 2, "links": {"0-1": "PHB"}, "p2p": {"0-1": "CNS"}}


@pytest.mark.parametrize("bad", ["", "No devices were found", None, 42])
def test_unreadable_topology_is_an_error_not_a_traceback(bad):
    with pytest.raises(AnsibleFilterError, match="nvidia_topology"):
        pf.nvidia_topology(bad)


# ---- the verdict ------------------------------------------------------------------------
ARGS = {"model-path": "/m", "tp-size": 2, "speculative-algorithm": "NEXTN",
        "speculative-num-steps": 3, "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 4}


# sglang_facts' custom_all_reduce_rules of the real 0.5.23 wheel (tests/integration checks it).
CAR = "sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py"
CAR_RULES = {
    "gate": {"where": f"{CAR}:442", "code": "def can_use_custom_all_reduce_with_nvlink("},
    "single_gpu": {"where": f"{CAR}:456", "code": "if world_size == 1:"},
    "world_sizes": {"where": f"{CAR}:467", "code": "if world_size not in supported_world_size:",
                    "sizes": [2, 4, 6, 8], "sizes_defined_in":
                    "sglang/srt/distributed/device_communicators/custom_all_reduce.py:41"},
    "pcie_only": {"where": f"{CAR}:492", "code": "if world_size > 2 and not full_nvlink:"},
    "p2p": {"where": f"{CAR}:504", "code": "if not _is_hip and not can_p2p(rank, world_size):"},
    "p2p_check_skipped": {"where": "sglang/srt/distributed/bootstrap.py:125",
                          "code": "monkey_patch_p2p_access_check()"},
}


def facts(version="0.5.23", archs=("Qwen3_5ForConditionalGeneration",), blacklist=None,
          topo="topo-a6000-pcie-spaces.txt", p2p="p2p-ok.txt", gpus=2):
    bl = blacklist or {"archs": ["Qwen3NextForCausalLM"],
                       "defined_in": "sglang/srt/configs/model_config.py:2475",
                       "consulted": False, "consulted_in": [], "sibling_rules": []}
    return {
        "sglang_version": version,
        "piecewise_blacklist": bl,
        "model": {"architectures": list(archs)},
        "gpus": {"present": gpus > 0, "count": gpus,
                 "devices": [{"index": i, "name": "NVIDIA RTX A6000", "memory_mib": 49140}
                             for i in range(gpus)],
                 "topology_text": text(topo) if gpus else None,
                 "p2p_text": text(p2p) if gpus and p2p else None,
                 "reason": None if gpus else "nvidia-smi not found"},
        "env": {}, "nccl_conf": {}, "custom_all_reduce_rules": CAR_RULES,
    }


CONSULTED_0_5_12 = {
    "archs": ["DeepseekV32ForCausalLM", "Qwen3NextForCausalLM"],
    "defined_in": "sglang/srt/configs/model_config.py:1558",
    "consulted": True,
    "consulted_in": ["sglang/srt/server_args.py:1309 (ServerArgs._handle_piecewise_cuda_graph)"],
    "sibling_rules": [
        {"line": 1309, "where": "sglang/srt/server_args.py:1309",
         "condition": "self.get_model_config().is_piecewise_cuda_graph_disabled_model"},
        {"line": 1312, "where": "sglang/srt/server_args.py:1312",
         "condition": "self.enable_dp_attention"},
    ],
}


def by_name(verdict):
    return {r["name"]: r for r in verdict["rows"]}


def test_reference_deployment_passes_from_the_sources_with_what_only_sglang_knows_unknown():
    verdict = pf.sglang_preflight(facts(), ARGS, {"CUDA_VISIBLE_DEVICES": "0,1"},
                                  {"speculative": {"algorithm": "NEXTN", "num_steps": 3}})
    assert verdict["failures"] == []
    # Fail closed: what only SGLang can say, it did not say here, so the verdict is not ok.
    assert (verdict["verdict"], verdict["ok"]) == ("unknown", False)
    assert verdict["resolved_by"] == "source" and verdict["changes"] == []
    rows = by_name(verdict)
    assert rows["tp_size"]["status"] == "ok"
    assert rows["resolution"]["status"] == "unknown"
    assert {u.split(":")[0] for u in verdict["unknowns"]} >= {"resolution", "prefill_cuda_graph",
                                                              "memory", "max_running_requests"}
    # The architecture list says nothing about the other rules: never "on" from the sources.
    assert rows["prefill_cuda_graph"]["predicted"] == "unknown"
    assert rows["prefill_cuda_graph"]["status"] == "unknown"
    assert "could not read every rule" in rows["prefill_cuda_graph"]["evidence"]
    # Whether SGLang keeps custom all-reduce on is its resolution's to say.
    assert rows["custom_all_reduce"]["predicted"] == "unknown"
    assert rows["max_running_requests"]["predicted"] == "unknown"


def test_blacklisted_and_consulted_architecture_fails_a_required_prefill_graph():
    f = facts(version="0.5.12", archs=["Qwen3NextForCausalLM"], blacklist=CONSULTED_0_5_12)
    verdict = pf.sglang_preflight(f, ARGS, {}, {"prefill_cuda_graph": "required"})
    assert not verdict["ok"]
    row = by_name(verdict)["prefill_cuda_graph"]
    assert row["status"] == "fail" and row["predicted"] == "off"
    assert ("Qwen3NextForCausalLM is in piecewise_cuda_graph_disabled_model_archs (sglang 0.5.12, "
            "sglang/srt/configs/model_config.py:1558), read by sglang/srt/server_args.py:1309 "
            "(ServerArgs._handle_piecewise_cuda_graph): the prefill graph will be disabled"
            ) in row["evidence"]


def test_the_old_expectation_name_still_works():
    f = facts(version="0.5.12", archs=["Qwen3NextForCausalLM"], blacklist=CONSULTED_0_5_12)
    old = pf.sglang_preflight(f, ARGS, {}, {"piecewise_cuda_graph": "required"})
    assert by_name(old)["prefill_cuda_graph"]["status"] == "fail"
    with pytest.raises(AnsibleFilterError, match="old name of prefill_cuda_graph"):
        pf.sglang_preflight(f, ARGS, {}, {"piecewise_cuda_graph": "required",
                                          "prefill_cuda_graph": "off"})


def test_same_hit_is_only_a_warning_when_the_operator_says_auto():
    f = facts(version="0.5.12", archs=["Qwen3NextForCausalLM"], blacklist=CONSULTED_0_5_12)
    assert by_name(pf.sglang_preflight(f, ARGS))["prefill_cuda_graph"]["status"] == "warn"


def test_dead_blacklist_is_not_a_prediction_of_on():
    verdict = pf.sglang_preflight(facts(archs=["Qwen3NextForCausalLM"]), ARGS, {},
                                  {"prefill_cuda_graph": "required"})
    row = by_name(verdict)["prefill_cuda_graph"]
    assert row["status"] == "unknown" and row["predicted"] == "unknown"
    assert "dead code in sglang 0.5.23" in row["evidence"]


def test_rules_beside_the_list_are_named_as_unread():
    f = facts(version="0.5.12", blacklist=CONSULTED_0_5_12)
    row = by_name(pf.sglang_preflight(f, ARGS))["prefill_cuda_graph"]
    assert row["status"] == "unknown"
    assert "self.enable_dp_attention (sglang/srt/server_args.py:1312)" in row["evidence"]


@pytest.mark.parametrize("blacklist, words", [
    ({"archs": [], "defined_in": None, "consulted": False, "consulted_in": []},
     "could not read: no piecewise_cuda_graph_disabled_model_archs found"),
])
def test_a_list_the_reader_cannot_find_is_unknown_never_ok(blacklist, words):
    row = by_name(pf.sglang_preflight(facts(blacklist=blacklist), ARGS))["prefill_cuda_graph"]
    assert row["status"] == "unknown" and row["predicted"] == "unknown" and words in row["evidence"]


def test_unknown_architectures_leave_the_prefill_graph_unknown():
    row = by_name(pf.sglang_preflight(facts(archs=[]), ARGS))["prefill_cuda_graph"]
    assert row["status"] == "unknown" and "architectures are unknown" in row["evidence"]


@pytest.mark.parametrize("archs", ["Qwen3NextForCausalLM", 5, [1, 2], {"a": 1}])
def test_architectures_that_are_not_a_list_of_names_are_refused(archs):
    f = facts()
    f["model"]["architectures"] = archs
    with pytest.raises(AnsibleFilterError, match="architectures must be a list of names"):
        pf.sglang_preflight(f, ARGS)


@pytest.mark.parametrize("extra, phase", [
    ({"disable-decode-cuda-graph": True}, "decode"),
    ({"cuda-graph-backend-decode": "disabled"}, "decode"),
    ({"cuda-graph-config": '{"decode": {"backend": "disabled"}}'}, "decode"),
    ({"disable-prefill-cuda-graph": True}, "prefill"),
    ({"cuda-graph-backend-prefill": "disabled"}, "prefill"),
    ({"cuda-graph-config": {"prefill": {"backend": "disabled"}}}, "prefill"),
    ({"disable-cuda-graph": True}, "decode"),
])
def test_per_phase_switches_are_understood_from_the_sources(extra, phase):
    expect = {f"{phase}_cuda_graph": "required"}
    verdict = pf.sglang_preflight(facts(), {**ARGS, **extra}, {}, expect)
    row = by_name(verdict)[f"{phase}_cuda_graph"]
    assert (row["predicted"], row["status"]) == ("off", "fail")
    assert not verdict["ok"]


def test_nvlink_with_nccl_p2p_disabled_fails():
    verdict = pf.sglang_preflight(facts(topo="topo-nvlink-nics-tabs.txt"), ARGS,
                                  {"NCCL_P2P_DISABLE": "1"})
    row = by_name(verdict)["nccl_p2p"]
    assert row["status"] == "fail"
    assert "NVLink" in row["evidence"] and "NCCL_P2P_DISABLE" in row["evidence"]


def test_nccl_p2p_disable_from_nccl_conf_counts_too():
    f = facts(topo="topo-nvlink-nics-tabs.txt")
    f["nccl_conf"] = {"NCCL_P2P_DISABLE": "1"}
    assert by_name(pf.sglang_preflight(f, ARGS))["nccl_p2p"]["status"] == "fail"


def test_no_peer_access_without_p2p_check_fails_with_the_fix():
    row = by_name(pf.sglang_preflight(facts(p2p="p2p-a6000-cns.txt"), ARGS))["custom_all_reduce"]
    assert row["status"] == "fail" and row["predicted"] == "crash"
    assert "sglang#4814" in row["evidence"] and "enable-p2p-check: true" in row["evidence"]


def test_no_peer_access_with_p2p_check_falls_back():
    verdict = pf.sglang_preflight(facts(p2p="p2p-a6000-cns.txt"),
                                  {**ARGS, "enable-p2p-check": True})
    row = by_name(verdict)["custom_all_reduce"]
    assert (row["status"], row["predicted"]) == ("warn", "off")
    assert verdict["failures"] == []


def test_more_than_two_pcie_gpus_turn_custom_all_reduce_off():
    f = facts(topo="topo-4gpu-old-mlx-column.txt", p2p=None, gpus=4)
    verdict = pf.sglang_preflight(f, {**ARGS, "tp-size": 4})
    row = by_name(verdict)["custom_all_reduce"]
    assert row["predicted"] == "off" and "at most two PCIe GPUs" in row["evidence"]
    assert f"(SGLang: {CAR}:492)" in row["evidence"]
    # The rule holds whatever SGLang resolves: off at run time even from the sources.
    assert verdict["runtime"]["custom_all_reduce"]["value"] is False
    resolved = pf.sglang_preflight(f, {**ARGS, "tp-size": 4},
                                   resolution=resolution(tp_size=4))
    assert by_name(resolved)["custom_all_reduce"]["predicted"] == "off"
    # Resolved means resolved: SGLang's record keeps it on; the run-time rule is its own field.
    assert resolved["resolved"]["custom_all_reduce"] is True
    assert resolved["runtime"]["custom_all_reduce"] == {
        "value": False, "resolved": True, "differs": True, "where": f"{CAR}:492",
        "rule": by_name(resolved)["custom_all_reduce"]["evidence"]}


@pytest.mark.parametrize("tp, predicted, where", [
    (1, "unused", f"{CAR}:456"), (2, "on", f"{CAR}:442"), (3, "off", f"{CAR}:467"),
    (4, "on", f"{CAR}:442")])
def test_custom_all_reduce_at_run_time_cites_the_rule_that_decides(tp, predicted, where):
    f = facts(topo="topo-8gpu-nv12-indented.txt", p2p=None, gpus=8)
    verdict = pf.sglang_preflight(f, {**ARGS, "tp-size": tp}, resolution=resolution(tp_size=tp))
    row = by_name(verdict)["custom_all_reduce"]
    assert (row["predicted"], row["where"]) == (predicted, where)
    assert verdict["runtime"]["custom_all_reduce"]["where"] == where
    assert verdict["resolved"]["custom_all_reduce"] is True


def test_custom_all_reduce_without_the_rules_read_is_unknown():
    f = facts()
    f["custom_all_reduce_rules"] = {}
    verdict = pf.sglang_preflight(f, ARGS, resolution=resolution())
    row = by_name(verdict)["custom_all_reduce"]
    assert (row["predicted"], row["status"]) == ("unknown", "unknown")
    assert "not read from the installed sources" in row["evidence"]
    assert verdict["runtime"]["custom_all_reduce"]["value"] is None
    assert verdict["verdict"] == "unknown"


def test_described_links_stand_in_for_the_matrix():
    f = facts()
    f["gpus"]["topology_text"] = None
    f["gpus"]["links"] = {"0-1": "NV4"}
    verdict = pf.sglang_preflight(f, ARGS, {"NCCL_P2P_DISABLE": "1"})
    assert by_name(verdict)["nccl_p2p"]["status"] == "fail"


def test_tp_larger_than_visible_gpus_fails():
    verdict = pf.sglang_preflight(facts(), {**ARGS, "tp-size": 4}, {"CUDA_VISIBLE_DEVICES": "0,1"})
    row = by_name(verdict)["tp_size"]
    assert row["status"] == "fail" and "sees 2" in row["evidence"]
    one = pf.sglang_preflight(facts(), ARGS, {"CUDA_VISIBLE_DEVICES": "1"})
    assert by_name(one)["tp_size"]["status"] == "fail"
    absent = pf.sglang_preflight(facts(), ARGS, {"CUDA_VISIBLE_DEVICES": "0,5"})
    assert "does not list" in by_name(absent)["tp_size"]["evidence"]


def test_no_gpu_host_is_unknown_and_strict_fails():
    f = facts(gpus=0)
    verdict = pf.sglang_preflight(f, ARGS)
    assert verdict["failures"] == [] and verdict["verdict"] == "unknown" and not verdict["ok"]
    assert by_name(verdict)["tp_size"]["status"] == "unknown"
    assert "UNKNOWN" in pf.sglang_preflight_table(verdict)[0]
    strict = pf.sglang_preflight(f, ARGS, strict=True)
    assert strict["verdict"] == "fail" and "(strict: unknown fails)" in strict["failures"][0]


def test_speculative_expectation_mismatch_fails():
    verdict = pf.sglang_preflight(facts(), {**ARGS, "speculative-num-steps": 1,
                                            "speculative-num-draft-tokens": 2},
                                  {}, {"speculative": {"num_steps": 3}})
    row = by_name(verdict)["speculative"]
    assert row["status"] == "fail" and "num_steps: expected 3, release has 1" in row["evidence"]


@pytest.mark.parametrize(
    "expect, message",
    [
        ({"piecewise": "required"}, "unknown keys"),
        ({"prefill_cuda_graph": "yes"}, "not one of required, auto, off"),
        ({"speculative": "EAGLE"}, "a mapping of"),
        ({"speculative": {"steps": 3}}, "a mapping of"),
        ({"tp_size": 0}, "positive integer"),
        ({"max_running_requests": "48"}, "positive integer"),
        ({"attention_backend": 3}, "a backend name"),
    ],
)
def test_malformed_expectations_are_refused(expect, message):
    with pytest.raises(AnsibleFilterError, match=message):
        pf.sglang_preflight(facts(), ARGS, {}, expect)


def test_verdict_does_not_mutate_its_inputs():
    f, a, r = facts(), dict(ARGS), resolution()
    before = copy.deepcopy((f, a, r))
    pf.sglang_preflight(f, a, {}, {"tp_size": 2}, resolution=r)
    assert (f, a, r) == before


def test_table_lists_every_row_and_the_changes():
    verdict = pf.sglang_preflight(facts(p2p="p2p-a6000-cns.txt"), ARGS, resolution=resolution())
    lines = pf.sglang_preflight_table(verdict)
    assert lines[0] == "preflight for sglang 0.5.23, resolved by sglang: 1 FAILED"
    assert any("FAIL" in line and "custom_all_reduce" in line for line in lines)
    assert "SGLang changed 3 fields from what was asked:" in lines
    assert ("max_running_requests null -> 48 (sglang/srt/arg_groups/speculative_hook.py:1087 "
            "_handle_eagle_family)") in [" ".join(line.split()) for line in lines]


def test_a_model_over_two_nodes_is_held_to_its_total_tp_and_this_nodes_gpus():
    facts = {"sglang_version": "0.5.23", "model": {}, "piecewise_blacklist": {},
             "gpus": {"present": True, "count": 2, "devices": [{"index": 0}, {"index": 1}]}}
    args = {"tp-size": 4, "nnodes": 2, "node-rank": 1}
    row = by_name(pf.sglang_preflight(facts, args, {}, {"tp_size": 4}))["tp_size"]
    assert (row["status"], row["predicted"]) == ("ok", 4)
    assert row["evidence"] == "GPUs [0, 1] of 2 (2 on this node)"
    row = by_name(pf.sglang_preflight(facts, {**args, "tp-size": 8}, {}, {}))["tp_size"]
    assert row["status"] == "fail" and "needs 4 GPUs (4 on this node)" in row["evidence"]


# ---- the verdict from SGLang's own resolution ----------------------------------------------
# Shaped as sglang_resolve returns it; the values are those sglang 0.5.23 resolved for the
# reference profile (tests/integration/test_resolve_real_sglang.py runs the real thing).
def resolution(**resolved):
    base = {
        "tp_size": 2, "disable_custom_all_reduce": False, "max_running_requests": 48,
        "attention_backend": "flashinfer", "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 3, "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4, "mem_fraction_static": 0.83,
        "cuda_graph_config": {"decode": {"backend": "full", "max_bs": 32},
                              "prefill": {"backend": "breakable", "max_bs": 4096}},
    }
    base.update(resolved)
    return {
        "ran": True, "sglang_version": "0.5.23", "entry": "ServerArgs.resolve_once",
        "resolved": base, "weights": loaded(), "error": None, "unknown_flags": [], "known_flags": 559,
        "elapsed_s": 9.1, "sandbox": {"used": True, "how": "systemd-run as sglang"},
        "stubbed": {"sgl_kernel": "ImportError: libcuda.so.1"},
        "changes": [
            {"field": "max_running_requests", "asked": None, "resolved": 48,
             "file": "sglang/srt/arg_groups/speculative_hook.py", "line": 1087,
             "function": "_handle_eagle_family"},
            {"field": "speculative_algorithm", "asked": "NEXTN", "resolved": "EAGLE",
             "file": "sglang/srt/arg_groups/speculative_hook.py", "line": 151,
             "function": "handle_speculative_decoding"},
            {"field": "_bookkeeping", "asked": None, "resolved": False, "file": "x.py", "line": 1,
             "function": "f"},
            {"field": "cuda_graph_config.prefill.backend", "asked": None, "resolved": "breakable",
             "file": "sglang/srt/arg_groups/cuda_graph_hook.py", "line": 96,
             "function": "parse_cuda_graph_config"},
        ],
        "log": [{"level": "WARNING", "message": "Max running requests is reset to 48 for "
                 "speculative decoding.", "file": "sglang/srt/arg_groups/speculative_hook.py",
                 "line": 1092, "function": "_handle_eagle_family"}],
    }


def test_resolved_values_drive_every_row():
    verdict = pf.sglang_preflight(facts(), ARGS, {"CUDA_VISIBLE_DEVICES": "0,1"},
                                  {"decode_cuda_graph": "required",
                                   "prefill_cuda_graph": "required",
                                   "speculative": {"algorithm": "EAGLE", "num_steps": 3},
                                   "max_running_requests": 48,
                                   "attention_backend": "flashinfer"},
                                  resolution=resolution())
    assert verdict["ok"], verdict["failures"]
    assert verdict["resolved_by"] == "sglang" and verdict["startup_error"] is None
    assert verdict["resolved"] == {
        "decode_cuda_graph": True, "prefill_cuda_graph": True,
        "speculative": {"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1,
                        "num_draft_tokens": 4},
        "tp_size": 2, "max_running_requests": 48, "attention_backend": "flashinfer",
        "cuda_graph_max_bs_decode": 32, "custom_all_reduce": True}
    rows = by_name(verdict)
    assert rows["resolution"]["status"] == "ok"
    assert "sgl_kernel replaced by an inert module" in rows["resolution"]["evidence"]
    assert "prefill graph on (backend breakable)" in rows["prefill_cuda_graph"]["evidence"]
    assert ("max_running_requests None -> 48 (sglang/srt/arg_groups/speculative_hook.py:1087 "
            "_handle_eagle_family)") in rows["max_running_requests"]["evidence"]
    assert {c["field"] for c in verdict["changes"]} >= {"max_running_requests"}
    assert set(verdict["changes"][0]) == {"field", "asked", "resolved", "file", "line", "function"}


def test_a_resolved_prefill_graph_off_fails_a_requirement_with_sglangs_reason():
    res = resolution(cuda_graph_config={"decode": {"backend": "full", "max_bs": 32},
                                        "prefill": {"backend": "disabled", "max_bs": 4096}})
    res["sglang_version"] = "0.5.15"
    res["changes"].append({"field": "cuda_graph_config.prefill.backend", "asked": None,
                           "resolved": "disabled", "file": "sglang/srt/server_args.py",
                           "line": 3383,
                           "function": "ServerArgs._disable_breakable_cudagraph_if_incompatible"})
    res["log"].append({"level": "WARNING", "message": "Breakable CUDA graph is incompatible with "
                       "multimodal model; disabling prefill CUDA graph.",
                       "file": "sglang/srt/server_args.py", "line": 3378, "function": "f"})
    verdict = pf.sglang_preflight(facts(), ARGS, {}, {"prefill_cuda_graph": "required"},
                                  resolution=res)
    row = by_name(verdict)["prefill_cuda_graph"]
    assert (row["status"], row["predicted"]) == ("fail", "off")
    assert "sglang/srt/server_args.py:3383" in row["evidence"]
    assert "Breakable CUDA graph is incompatible with multimodal model" in row["evidence"]


def test_an_error_sglang_raises_fails_with_its_own_message():
    res = resolution()
    res.update(resolved=None, error={
        "type": "ValueError", "stage": "resolve", "function": "_handle_mamba_radix_cache",
        "message": "Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible "
                   "with radix cache when using --mamba-scheduler-strategy no_buffer.",
        "file": "sglang/srt/server_args.py", "line": 2568})
    verdict = pf.sglang_preflight(facts(version="0.5.12"), ARGS, resolution=res)
    assert not verdict["ok"] and verdict["resolved_by"] == "source"
    assert verdict["startup_error"] == {"type": "ValueError", "file": "sglang/srt/server_args.py",
                                        "line": 2568, "message": res["error"]["message"]}
    # Nothing was resolved: every field null, none read from the arguments in its place.
    assert verdict["resolved"] and set(verdict["resolved"].values()) == {None}
    row = by_name(verdict)["resolution"]
    assert row["status"] == "fail"
    assert "SGLang raised ValueError at sglang/srt/server_args.py:2568" in row["evidence"]
    assert "while it resolved the release" in row["evidence"]
    res["error"].pop("stage")  # a report without a stage reads the same
    again = by_name(pf.sglang_preflight(facts(version="0.5.12"), ARGS, resolution=res))
    assert "while it resolved the release" in again["resolution"]["evidence"]


def test_an_expected_value_sglang_resolves_otherwise_fails():
    verdict = pf.sglang_preflight(facts(), ARGS, {}, {"max_running_requests": 64},
                                  resolution=resolution())
    row = by_name(verdict)["max_running_requests"]
    assert row["status"] == "fail" and "--max-running-requests" in row["evidence"]


def test_unknown_flags_from_the_resolution_name_the_nearest():
    res = resolution()
    res["unknown_flags"] = [{"name": "cuda-graph-max-bs",
                             "suggestions": ["cuda-graph-max-bs-decode"]}]
    row = by_name(pf.sglang_preflight(facts(), ARGS, resolution=res))["flags"]
    assert row["status"] == "fail"
    assert "--cuda-graph-max-bs (nearest: --cuda-graph-max-bs-decode)" in row["evidence"]


def test_an_ml_env_that_cannot_import_sglang():
    res = {"ran": False, "reason": "sglang could not be imported: ModuleNotFoundError: torch",
           "import_error": {"type": "ModuleNotFoundError"}}
    test_host = by_name(pf.sglang_preflight(facts(), ARGS, resolution=res))["resolution"]
    assert test_host["status"] == "unknown" and "did not resolve" in test_host["evidence"]
    real = by_name(pf.sglang_preflight(facts(), ARGS, resolution=res,
                                       import_must_work=True))["resolution"]
    assert real["status"] == "fail" and "would fail the same way" in real["evidence"]


# ---- the memory row: do the weights fit? ---------------------------------------------------
WEIGHTS_27B_BF16 = 55_600_000_000  # Qwen3.6-27B's safetensors with its MTP layer, ~51.8 GiB


def loaded(sharded=WEIGHTS_27B_BF16, replicated=0, **more):
    """The resolution's `weights`: what SGLang's loader selected and the headers' sizes."""
    return {"files": [f"model-0000{i}-of-00011.safetensors" for i in range(1, 10)],
            "safetensors": True, "load_format": "auto", "tensors": 1211,
            "selected_by": "sglang/srt/model_loader/loader.py:480 "
                           "DefaultModelLoader._prepare_weights",
            "sharded_bytes": sharded, "replicated_bytes": replicated, "sized_by_file": [],
            "unread": [], **more}


def on_gpus(f, memory_mib):
    for device in f["gpus"]["devices"]:
        device["memory_mib"] = memory_mib
    return f


def memory_row(f=None, args=ARGS, weights=None, **resolved):
    res = resolution(**resolved)
    res["weights"] = weights or res["weights"]
    return by_name(pf.sglang_preflight(f or facts(), args, resolution=res))["memory"]


def test_27b_bf16_on_two_24_gb_gpus_does_not_fit_though_sglang_accepts_it():
    res = resolution(mem_fraction_static=0.83)
    verdict = pf.sglang_preflight(on_gpus(facts(), 24564), ARGS, resolution=res)
    row = by_name(verdict)["memory"]
    assert (row["predicted"], row["status"]) == ("does not fit", "fail")
    assert "25.9 GiB per GPU at tp 2 x pp 1, more than the 24.0 GiB a GPU has" in row["evidence"]
    assert "DefaultModelLoader._prepare_weights" in row["evidence"]
    assert not verdict["ok"] and by_name(verdict)["resolution"]["status"] == "ok"


def test_the_reference_fits_two_a6000s_with_sglangs_own_fraction():
    row = memory_row(mem_fraction_static=0.83)
    assert (row["predicted"], row["status"]) == ("fits", "ok")
    # 48.0 GiB x 0.83 = 39.8 GiB for weights and KV cache; 25.9 GiB of weights per GPU.
    assert row["evidence"].endswith("39.8 GiB for weights and KV cache: 13.9 GiB left for the "
                                    "KV cache")


def test_vectors_stay_whole_on_each_rank():
    # 4 GiB of norms and biases: whole on both ranks, the matrices halved.
    row = memory_row(weights=loaded(sharded=40 * 1024 ** 3, replicated=4 * 1024 ** 3),
                     mem_fraction_static=0.83)
    assert "24.0 GiB per GPU at tp 2 x pp 1" in row["evidence"]


def test_a_fraction_the_weights_fill_fails_and_a_small_remainder_warns():
    full = memory_row(mem_fraction_static=0.5)
    assert full["status"] == "fail" and "Raise mem-fraction-static" in full["evidence"]
    tight = memory_row(mem_fraction_static=0.6)
    assert (tight["predicted"], tight["status"]) == ("tight", "warn")
    assert "2.9 GiB left for the KV cache, under 10% of the GPU" in tight["evidence"]


def test_pipeline_ranks_split_the_weights_too():
    row = memory_row(on_gpus(facts(gpus=4), 24564), {**ARGS, "pp-size": 2},
                     mem_fraction_static=0.85, pp_size=2)
    assert row["status"] == "ok" and "12.9 GiB per GPU at tp 2 x pp 2" in row["evidence"]


@pytest.mark.parametrize("weights, words", [
    ({"error": "ValueError: Cannot find any model weights"},
     "SGLang's loader could not select the weight files: ValueError"),
    ({"error": "/srv/m is not a directory here: SGLang would download it"}, "would download"),
    (dict(loaded(), unread=["model-00001.safetensors: ValueError: header"]),
     "headers that cannot be read"),
    (dict(loaded(), files=[]), "holds no files and sizes"),
    (dict(loaded(), sharded_bytes="55e9"), "holds no files and sizes"),
])
def test_a_loader_that_cannot_say_leaves_the_memory_unknown(weights, words):
    row = memory_row(weights=weights, mem_fraction_static=0.83)
    assert (row["predicted"], row["status"]) == ("unknown", "unknown") and words in row["evidence"]


def test_without_sglang_the_files_on_disk_are_no_evidence():
    # Every *.safetensors and *.bin on disk may hold files SGLang never loads: unknown.
    f = facts()
    f["model"]["weight_bytes"] = 2 * WEIGHTS_27B_BF16
    row = by_name(pf.sglang_preflight(f, ARGS))["memory"]
    assert (row["predicted"], row["status"]) == ("unknown", "unknown")
    assert "its loader was not asked" in row["evidence"]


@pytest.mark.parametrize("mib, fraction, words", [
    (None, 0.83, "no GPU memory to check it against"),
    (49140, None, "mem_fraction_static not resolved")])
def test_what_cannot_be_read_is_unknown(mib, fraction, words):
    row = memory_row(on_gpus(facts(), mib), mem_fraction_static=fraction)
    assert (row["predicted"], row["status"]) == ("unknown", "unknown") and words in row["evidence"]


def test_described_gpus_stand_in_for_the_hosts():
    """sglang_gpus (the `gpus` argument) replaces the host's GPUs in every row; empty keeps them."""
    host = facts(gpus=0)
    assert by_name(pf.sglang_preflight(host, ARGS))["tp_size"]["status"] == "unknown"
    described = {"count": 2, "name": "NVIDIA RTX A6000", "memory_mib": 49140,
                 "compute_capability": "8.6", "link": "NV4"}
    verdict = pf.sglang_preflight(host, ARGS, gpus=described)
    assert by_name(verdict)["tp_size"]["status"] == "ok"
    one = pf.sglang_preflight(host, ARGS, gpus={**described, "count": 1})
    assert by_name(one)["tp_size"]["status"] == "fail"
    assert pf.sglang_preflight(host, ARGS, gpus={}) == pf.sglang_preflight(host, ARGS)
    with pytest.raises(AnsibleFilterError, match="sglang_gpus.link"):
        pf.sglang_preflight(host, ARGS, gpus={**described, "link": "FAST"})
