"""sglang_facts over the real published wheels of sglang 0.5.10, 0.5.12, 0.5.16 and 0.5.23."""

import json
import time

import pytest
from support import load_module
from support.wheels import venv_with
from test_sglang_preflight import CAR_RULES

facts_mod = load_module("sglang_facts")

# What each release's own sources say (read from the wheels with unzip + grep, by hand).
EXPECTED = {
    "0.5.10": {
        "defined_in": "sglang/srt/configs/model_config.py:1352",
        "archs": ["DeepseekV32ForCausalLM", "Qwen3NextForCausalLM", "GlmMoeDsaForCausalLM",
                  "BailingMoeV2_5ForCausalLM", "LLaDAModelLM"],
        "consulted_in": ["sglang/srt/server_args.py:1086 (ServerArgs._handle_piecewise_cuda_graph)"],
    },
    "0.5.12": {
        "defined_in": "sglang/srt/configs/model_config.py:1558",
        "archs": ["DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN",
                  "Qwen3NextForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeV2_5ForCausalLM",
                  "LLaDAModelLM"],
        "consulted_in": ["sglang/srt/server_args.py:1309 (ServerArgs._handle_piecewise_cuda_graph)"],
    },
    "0.5.16": {
        "defined_in": "sglang/srt/configs/model_config.py:1763",
        "archs": ["DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN",
                  "DeepseekV4ForCausalLMDSpark", "Qwen3NextForCausalLM",
                  "BailingMoeV2_5ForCausalLM", "LLaDAModelLM"],
        "consulted_in": ["sglang/srt/server_args.py:3698 "
                         "(ServerArgs._disable_tc_piecewise_cudagraph_if_incompatible)"],
    },
    "0.5.23": {
        "defined_in": "sglang/srt/configs/model_config.py:2475",
        "archs": ["DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN",
                  "DeepseekV4ForCausalLMDSpark", "Qwen3NextForCausalLM",
                  "Glm5NextForConditionalGeneration", "BailingMoeV2_5ForCausalLM",
                  "LLaDAModelLM"],
        "consulted_in": [],
    },
}


@pytest.mark.network
@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_blacklist_read_from_the_installed_sources(version):
    venv = venv_with(version)
    started = time.monotonic()
    out = facts_mod.collect({"venv": str(venv), "model_path": "", "env": {},
                             "nvidia_smi": "nvidia-smi-not-here"})
    elapsed = time.monotonic() - started
    want = EXPECTED[version]
    bl = out["piecewise_blacklist"]
    assert out["sglang_version"] == version
    assert bl["defined_in"] == want["defined_in"]
    assert bl["archs"] == want["archs"]
    assert bl["consulted_in"] == want["consulted_in"]
    assert bl["consulted"] is bool(want["consulted_in"])
    # A figure, not a gate: timing assertions flake on a loaded machine.
    print(f"\nsglang_facts on sglang {version}'s real sources: {elapsed:.2f} s")


@pytest.mark.network
def test_custom_all_reduce_rules_read_from_the_installed_sources():
    """The run-time rules of the real 0.5.23 wheel, lines found by hand (grep -n), the same as
    the preflight's unit fixture."""
    out = facts_mod.collect({"venv": str(venv_with("0.5.23")), "env": {}})
    assert out["custom_all_reduce_rules"] == CAR_RULES


@pytest.mark.network
def test_sibling_rules_of_0_5_10_include_speculative_decoding():
    bl = facts_mod.collect({"venv": str(venv_with("0.5.10")), "env": {}})["piecewise_blacklist"]
    conditions = [r["condition"] for r in bl["sibling_rules"]]
    assert "self.speculative_algorithm is not None" in conditions
    assert all(r["where"].startswith("sglang/srt/server_args.py:") for r in bl["sibling_rules"])


def test_no_sglang_and_no_gpu_are_explicit(tmp_path):
    out = facts_mod.collect({"venv": str(tmp_path), "env": {"NCCL_DEBUG": "INFO", "PATH": "/x"},
                             "nvidia_smi": "nvidia-smi-not-here"})
    assert out["custom_all_reduce_rules"] == {}
    assert out["sglang_version"] is None
    assert out["piecewise_blacklist"]["defined_in"] is None
    assert out["gpus"]["present"] is False
    assert "not found" in out["gpus"]["reason"]
    assert out["env"] == {"NCCL_DEBUG": "INFO"}


def test_model_from_local_dir_and_hub_cache(tmp_path):
    local = tmp_path / "Qwen3.6-27B"
    local.mkdir()
    (local / "config.json").write_text(json.dumps(
        {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5"}))
    (local / "model-00001.safetensors").write_bytes(b"\0" * 1000)
    out = facts_mod.model_facts(str(local))
    assert out["source"] == "local"
    assert out["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert out["weight_bytes"] == 1000

    hub = tmp_path / "hub" / "models--Qwen--Qwen3-Next-80B-A3B-Instruct"
    snap = hub / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (hub / "refs").mkdir()
    (hub / "refs" / "main").write_text("a" * 40)
    (snap / "config.json").write_text(json.dumps({"architectures": ["Qwen3NextForCausalLM"]}))
    out = facts_mod.model_facts("Qwen/Qwen3-Next-80B-A3B-Instruct", "",
                                {"HF_HUB_CACHE": str(tmp_path / "hub")})
    assert out["source"] == "hub-cache"
    assert out["architectures"] == ["Qwen3NextForCausalLM"]
    missing = facts_mod.model_facts("Qwen/Nope", "", {"HF_HUB_CACHE": str(tmp_path / "hub")})
    assert missing["source"] is None and missing["architectures"] == []


def test_the_hub_cache_the_release_names_is_where_the_model_is_looked_for(tmp_path):
    """HF_HOME in sglang_env is the cache the unit reads: the facts look there too."""
    snap = tmp_path / "hf" / "hub" / "models--Qwen--Qwen3.6-27B" / "snapshots" / ("b" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"architectures": ["X"]}))
    out = facts_mod.collect({"venv": str(tmp_path), "model_path": "Qwen/Qwen3.6-27B",
                             "model_revision": "b" * 40, "nvidia_smi": "nvidia-smi-not-here",
                             "env": {"HF_HOME": str(tmp_path / "hf")}})
    assert out["model"]["source"] == "hub-cache" and out["model"]["architectures"] == ["X"]
