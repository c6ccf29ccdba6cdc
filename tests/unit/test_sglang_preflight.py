import copy
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

import sglang_preflight as pf

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
        "env": {}, "nccl_conf": {},
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


def by_setting(verdict):
    return {c["setting"]: c for c in verdict["checks"]}


def test_reference_deployment_passes():
    verdict = pf.sglang_preflight(facts(), ARGS, {"CUDA_VISIBLE_DEVICES": "0,1"},
                                  {"piecewise_cuda_graph": "required",
                                   "speculative": {"algorithm": "EAGLE", "num_steps": 3}})
    assert verdict["ok"], verdict["failures"]
    checks = by_setting(verdict)
    assert checks["tp_size"]["status"] == "ok"
    assert checks["piecewise_cuda_graph"]["predicted"] == "on"
    assert checks["speculative"]["predicted"]["algorithm"] == "EAGLE"
    assert checks["custom_all_reduce"]["predicted"] == "on"


def test_blacklisted_and_consulted_architecture_fails_a_required_prefill_graph():
    f = facts(version="0.5.12", archs=["Qwen3NextForCausalLM"], blacklist=CONSULTED_0_5_12)
    verdict = pf.sglang_preflight(f, ARGS, {}, {"piecewise_cuda_graph": "required"})
    assert not verdict["ok"]
    check = by_setting(verdict)["piecewise_cuda_graph"]
    assert check["status"] == "fail" and check["predicted"] == "off"
    assert ("Qwen3NextForCausalLM is in piecewise_cuda_graph_disabled_model_archs (sglang 0.5.12, "
            "sglang/srt/configs/model_config.py:1558), read by sglang/srt/server_args.py:1309 "
            "(ServerArgs._handle_piecewise_cuda_graph): the prefill graph will be disabled"
            ) in check["reason"]


def test_same_hit_is_only_a_warning_when_the_operator_says_auto():
    f = facts(version="0.5.12", archs=["Qwen3NextForCausalLM"], blacklist=CONSULTED_0_5_12)
    check = by_setting(pf.sglang_preflight(f, ARGS))["piecewise_cuda_graph"]
    assert check["status"] == "warn"


def test_dead_blacklist_is_said_to_be_dead():
    verdict = pf.sglang_preflight(facts(archs=["Qwen3NextForCausalLM"]), ARGS, {},
                                  {"piecewise_cuda_graph": "required"})
    check = by_setting(verdict)["piecewise_cuda_graph"]
    assert check["status"] == "ok" and check["predicted"] == "on"
    assert "dead code in sglang 0.5.23" in check["reason"]


def test_sibling_rule_that_holds_is_reported():
    f = facts(version="0.5.12", blacklist=CONSULTED_0_5_12)
    check = by_setting(pf.sglang_preflight(f, {**ARGS, "enable-dp-attention": True}))[
        "piecewise_cuda_graph"]
    assert check["status"] == "warn"
    assert "self.enable_dp_attention (sglang/srt/server_args.py:1312)" in check["reason"]


def test_nvlink_with_nccl_p2p_disabled_fails():
    verdict = pf.sglang_preflight(facts(topo="topo-nvlink-nics-tabs.txt"), ARGS,
                                  {"NCCL_P2P_DISABLE": "1"})
    check = by_setting(verdict)["nccl_p2p"]
    assert check["status"] == "fail"
    assert "NVLink" in check["reason"] and "NCCL_P2P_DISABLE" in check["reason"]


def test_nccl_p2p_disable_from_nccl_conf_counts_too():
    f = facts(topo="topo-nvlink-nics-tabs.txt")
    f["nccl_conf"] = {"NCCL_P2P_DISABLE": "1"}
    assert by_setting(pf.sglang_preflight(f, ARGS))["nccl_p2p"]["status"] == "fail"


def test_no_peer_access_without_p2p_check_fails_with_the_fix():
    verdict = pf.sglang_preflight(facts(p2p="p2p-a6000-cns.txt"), ARGS)
    check = by_setting(verdict)["custom_all_reduce"]
    assert check["status"] == "fail" and check["predicted"] == "crash"
    assert "sglang#4814" in check["reason"] and "enable-p2p-check: true" in check["reason"]


def test_no_peer_access_with_p2p_check_falls_back():
    verdict = pf.sglang_preflight(facts(p2p="p2p-a6000-cns.txt"),
                                  {**ARGS, "enable-p2p-check": True})
    check = by_setting(verdict)["custom_all_reduce"]
    assert (check["status"], check["predicted"]) == ("warn", "off")
    assert verdict["ok"]


def test_more_than_two_pcie_gpus_turn_custom_all_reduce_off():
    f = facts(topo="topo-4gpu-old-mlx-column.txt", p2p=None, gpus=4)
    check = by_setting(pf.sglang_preflight(f, {**ARGS, "tp-size": 4}))["custom_all_reduce"]
    assert check["predicted"] == "off" and "at most two PCIe GPUs" in check["reason"]


def test_tp_larger_than_visible_gpus_fails():
    verdict = pf.sglang_preflight(facts(), {**ARGS, "tp-size": 4}, {"CUDA_VISIBLE_DEVICES": "0,1"})
    check = by_setting(verdict)["tp_size"]
    assert check["status"] == "fail" and "sees 2" in check["reason"]
    one = pf.sglang_preflight(facts(), ARGS, {"CUDA_VISIBLE_DEVICES": "1"})
    assert by_setting(one)["tp_size"]["status"] == "fail"
    absent = pf.sglang_preflight(facts(), ARGS, {"CUDA_VISIBLE_DEVICES": "0,5"})
    assert "does not list" in by_setting(absent)["tp_size"]["reason"]


def test_no_gpu_host_warns_and_strict_fails():
    f = facts(gpus=0)
    verdict = pf.sglang_preflight(f, ARGS)
    assert verdict["ok"]
    assert by_setting(verdict)["tp_size"]["status"] == "warn"
    strict = pf.sglang_preflight(f, ARGS, strict=True)
    assert not strict["ok"] and "(strict: warnings fail)" in strict["failures"][0]


def test_speculative_expectation_mismatch_fails():
    verdict = pf.sglang_preflight(facts(), {**ARGS, "speculative-num-steps": 1,
                                            "speculative-num-draft-tokens": 2},
                                  {}, {"speculative": {"num_steps": 3}})
    check = by_setting(verdict)["speculative"]
    assert check["status"] == "fail" and "num_steps: expected 3, release has 1" in check["reason"]


def test_required_decode_graph_with_cuda_graph_disabled_fails():
    verdict = pf.sglang_preflight(facts(), {**ARGS, "disable-cuda-graph": True}, {},
                                  {"decode_cuda_graph": "required"})
    assert not verdict["ok"]
    assert by_setting(verdict)["piecewise_cuda_graph"]["predicted"] == "off"


@pytest.mark.parametrize(
    "expect, message",
    [
        ({"piecewise": "required"}, "unknown keys"),
        ({"piecewise_cuda_graph": "yes"}, "not one of required, auto, off"),
        ({"speculative": "EAGLE"}, "a mapping of"),
        ({"speculative": {"steps": 3}}, "a mapping of"),
        ({"tp_size": 0}, "positive integer"),
    ],
)
def test_malformed_expectations_are_refused(expect, message):
    with pytest.raises(AnsibleFilterError, match=message):
        pf.sglang_preflight(facts(), ARGS, {}, expect)


def test_verdict_does_not_mutate_its_inputs():
    f, a = facts(), dict(ARGS)
    before = copy.deepcopy((f, a))
    pf.sglang_preflight(f, a, {}, {"tp_size": 2})
    assert (f, a) == before


def test_table_lists_every_check():
    verdict = pf.sglang_preflight(facts(p2p="p2p-a6000-cns.txt"), ARGS)
    lines = pf.sglang_preflight_table(verdict)
    assert lines[0] == "preflight for sglang 0.5.23: 1 FAILED"
    assert len(lines) == 2 + len(verdict["checks"])
    assert any("FAIL" in line and "custom_all_reduce" in line for line in lines)


def test_a_model_over_two_nodes_is_held_to_its_total_tp_and_this_nodes_gpus():
    facts = {"sglang_version": "0.5.23", "model": {}, "piecewise_blacklist": {},
             "gpus": {"present": True, "count": 2, "devices": [{"index": 0}, {"index": 1}]}}
    args = {"tp-size": 4, "nnodes": 2, "node-rank": 1}
    row = [c for c in pf.sglang_preflight(facts, args, {}, {"tp_size": 4})["checks"]
           if c["setting"] == "tp_size"][0]
    assert (row["status"], row["predicted"]) == ("ok", 4)
    assert row["reason"] == "GPUs [0, 1] of 2 (2 on this node)"
    row = [c for c in pf.sglang_preflight(facts, {**args, "tp-size": 8}, {}, {})["checks"]
           if c["setting"] == "tp_size"][0]
    assert row["status"] == "fail" and "needs 4 GPUs (4 on this node)" in row["reason"]
