"""SGLang itself answers: sglang_resolve runs the real parser and resolution of three releases
(0.5.12, 0.5.15, 0.5.23, each a full install with its CUDA wheels, built by
scripts/build-sglang-venv.sh) on a machine without GPUs, for the reference profile, a
Qwen3-Next checkpoint and the per-phase switches, and the verdict is built from its answer.

Every expectation cites the line of SGLang's source that decides it; the tracer must find
that same line (file:line of the write or declaration), which is what the report shows.
"""

import copy
import json
import sys
from pathlib import Path

import pytest
import yaml
from support import load_module
from support.wheels import full_venv

# Full sglang installs, built with uv from PyPI (cached outside the clone after the first run).
pytestmark = pytest.mark.network

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.sglang.deploy.plugins.filter import sglang_preflight as pf  # noqa: E402
from ansible_collections.sglang.deploy.plugins.filter import sglang_render as render  # noqa: E402
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_source as source  # noqa: E402

resolve_mod = load_module("sglang_resolve")
PROFILE = yaml.safe_load((ROOT / "roles/sglang/profiles/qwen3.6-27b-tp2-mtp.yml").read_text())
MODELS = ROOT / "tests" / "data" / "models"
A6000X2 = {"count": 2, "name": "NVIDIA RTX A6000", "memory_mib": 49140, "compute_capability": "8.6"}
SPEC = {"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}


def config(model="qwen3.6-27b", drop=(), **extra):
    args = render.sglang_server_config(PROFILE, extra, str(MODELS / model))
    return {k: v for k, v in args.items() if k not in drop}


ASKED = {}  # (version, args, env) -> SGLang's answer: each asked once per session


def resolve(version, args, env=None):
    key = json.dumps([version, args, env or {}], sort_keys=True)
    if key not in ASKED:
        out = resolve_mod.resolve({"venv": str(full_venv(version)), "args": args,
                                   "gpus": A6000X2, "env": env or {}, "timeout": 600})
        print(f"\nsglang {version}: ran={out['ran']} in {out.get('elapsed_s')} s; "
              f"error={out['error'] and out['error']['type']}; reason={out.get('reason')}")
        ASKED[key] = out
    out = copy.deepcopy(ASKED[key])
    assert out["ran"], out.get("reason")
    return out


def change(out, field):
    found = [c for c in out["changes"] if c["field"] == field]
    assert found, f"no traced change of {field}: {[c['field'] for c in out['changes']]}"
    return found[-1]


def verdict(out, args, expect=None):
    """The preflight of SGLang's answer, with the run-time rules sglang_facts reads from the
    same release's sources."""
    site = source.find_package(str(full_venv(out["sglang_version"])))[0] \
        if out.get("sglang_version") else None
    facts = {"sglang_version": out["sglang_version"], "model": {"architectures": []},
             "piecewise_blacklist": {}, "gpus": pf.described_gpus(A6000X2),
             "custom_all_reduce_rules": source.custom_all_reduce_rules(site) if site else {}}
    return pf.sglang_preflight(facts, args, {}, expect or {}, resolution=out,
                               import_must_work=True)


def rows(v):
    return {r["name"]: r for r in v["rows"]}


# ---- 0.5.23: ServerArgs.resolve_once and the arg_groups hooks -----------------------------
@pytest.fixture(scope="module")
def reference_0523():
    args = config(**{"cuda-graph-max-bs-decode": 32})
    return resolve("0.5.23", args), args


def test_0523_reference_resolves_as_its_source_says(reference_0523):
    out, args = reference_0523
    assert out["entry"] == "ServerArgs.resolve_once" and out["error"] is None
    resolved = out["resolved"]
    graphs = resolved["cuda_graph_config"]
    # arg_groups/cuda_graph_hook.py:96 (parse_cuda_graph_config): per-phase backends.
    assert (graphs["decode"]["backend"], graphs["decode"]["max_bs"]) == ("full", 32)
    assert graphs["prefill"]["backend"] == "breakable"
    assert change(out, "cuda_graph_config.prefill.backend")["file"] == \
        "sglang/srt/arg_groups/cuda_graph_hook.py"
    # arg_groups/speculative_hook.py:151: NEXTN is an alias of EAGLE.
    c = change(out, "speculative_algorithm")
    assert (c["asked"], c["resolved"]) == ("NEXTN", "EAGLE")
    assert (c["file"], c["line"]) == ("sglang/srt/arg_groups/speculative_hook.py", 151)
    # arg_groups/speculative_hook.py:1086-1094: speculative decoding caps running requests at 48.
    c = change(out, "max_running_requests")
    assert (c["asked"], c["resolved"], c["function"]) == (None, 48, "_handle_eagle_family")
    assert (c["file"], c["line"]) == ("sglang/srt/arg_groups/speculative_hook.py", 1087)
    # arg_groups/overrides.py:453 (_mamba_radix_cache_resolution): hybrid + spec -> extra_buffer.
    c = change(out, "mamba_radix_cache_strategy")
    assert (c["asked"], c["resolved"], c["line"]) == ("auto", "extra_buffer", 453)
    # arg_groups/overrides.py:1126 (_attention_backend_default): flashinfer on sm_86.
    assert change(out, "attention_backend")["resolved"] == "flashinfer"
    # arg_groups/memory_hook.py:122: chunked prefill 4096 for 48 GB GPUs.
    assert (change(out, "chunked_prefill_size")["resolved"],
            change(out, "chunked_prefill_size")["line"]) == (4096, 122)
    assert "sgl_kernel" in out["stubbed"]  # no libcuda.so.1 here: said, not hidden
    assert any("Max running requests is reset to 48" in r["message"] for r in out["log"])


def test_0523_compile_decorators_left_uncompiled_change_no_answer(reference_0523):
    # The probe sets TORCHDYNAMO_DISABLE=1 (sglang_probe.probe) unless the env says otherwise:
    # SGLang's answer with torch.compile building its decorators must be the same, field for
    # field, change for change.
    out, args = reference_0523
    compiled = resolve("0.5.23", args, env={"TORCHDYNAMO_DISABLE": "0"})
    # Drawn at random on each run: serving_hook.py declares random_seed=random.randint(...) on
    # the line after its declare_resolution( (the statement counts whole).
    volatile = set(out["volatile"])
    assert volatile == set(compiled["volatile"]) == {"random_seed"}
    assert compiled["error"] is None

    def fixed(answer):
        return ({k: v for k, v in answer["resolved"].items() if k not in volatile},
                [c for c in answer["changes"] if c["field"] not in volatile])

    assert fixed(compiled) == fixed(out)
    assert (compiled["unknown_flags"], compiled["known_flags"]) == \
        (out["unknown_flags"], out["known_flags"])
    print(f"0.5.23 resolution: {out['elapsed_s']} s, {compiled['elapsed_s']} s with "
          "torch.compile building its decorators")


def test_0523_reference_verdict(reference_0523):
    out, args = reference_0523
    v = verdict(out, args, {**PROFILE["expect"], "prefill_cuda_graph": "required",
                            "max_running_requests": 48, "attention_backend": "flashinfer"})
    # Every row from SGLang's answer; only the memory is unknown: the test model has no weights.
    assert v["failures"] == [] and v["verdict"] == "unknown"
    assert [u.split(":")[0] for u in v["unknowns"]] == ["memory"]
    assert "Cannot find any model weights" in rows(v)["memory"]["evidence"]
    assert v["resolved_by"] == "sglang"
    assert v["resolved"] == {"decode_cuda_graph": True, "prefill_cuda_graph": True,
                             "speculative": SPEC, "tp_size": 2, "max_running_requests": 48,
                             "attention_backend": "flashinfer", "cuda_graph_max_bs_decode": 32,
                             "custom_all_reduce": True}
    # Two GPUs joined by PCIe with peer access: SGLang's run-time rules keep it on, and say where.
    assert v["runtime"]["custom_all_reduce"]["value"] is True
    assert v["runtime"]["custom_all_reduce"]["where"] == (
        "sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py:442")
    json.dumps(v)  # the report is JSON as it is


def test_0523_qwen3_next_keeps_its_prefill_graph_the_list_is_never_read():
    # configs/model_config.py still defines piecewise_cuda_graph_disabled_model_archs with
    # Qwen3NextForCausalLM, but nothing reads it in 0.5.23 (shared notes; sglang_source).
    out = resolve("0.5.23", config("qwen3-next-80b-a3b", **{"cuda-graph-max-bs-decode": 32}))
    assert out["error"] is None
    assert out["resolved"]["cuda_graph_config"]["prefill"]["backend"] == "breakable"


@pytest.mark.parametrize("switch, phase", [
    ({"disable-prefill-cuda-graph": True}, "prefill"),
    ({"cuda-graph-backend-decode": "disabled"}, "decode"),
])
def test_0523_per_phase_switches_turn_a_required_graph_off(switch, phase):
    args = config(**{"cuda-graph-max-bs-decode": 32}, **switch)
    out = resolve("0.5.23", args)
    assert out["resolved"]["cuda_graph_config"][phase]["backend"] == "disabled"
    v = verdict(out, args, {f"{phase}_cuda_graph": "required"})
    row = rows(v)[f"{phase}_cuda_graph"]
    assert (row["status"], row["predicted"]) == ("fail", "off") and not v["ok"]


def test_0523_unknown_flag_is_named_with_its_nearest():
    args = config(**{"cuda-graph-max-bs": 32})  # removed in 0.5.20
    out = resolve("0.5.23", args)
    # SGLang's parser refuses it, in its own words...
    assert out["error"]["type"] == "SystemExit" and out["error"]["stage"] == "parse"
    assert "cuda-graph-max-bs" in out["error"]["message"]
    v = verdict(out, args)
    assert not v["ok"]
    flags = rows(v)["flags"]  # ...and the report names what to use instead
    assert flags["status"] == "fail" and "--cuda-graph-max-bs-decode" in flags["evidence"]


# ---- 0.5.15: resolution inside ServerArgs.__post_init__, breakable prefill rule list ------
def test_0515_reference_loses_its_prefill_graph_because_it_is_multimodal():
    args = config()  # the profile as it is (test_upgrade_real_sglang.py plans from it)
    out = resolve("0.5.15", args)
    assert out["entry"] == "ServerArgs.__post_init__" and out["error"] is None
    # server_args.py:3374-3383 (_disable_breakable_cudagraph_if_incompatible): the breakable
    # backend's rules turn the prefill graph off for multimodal models.
    c = change(out, "cuda_graph_config.prefill.backend")
    assert (c["resolved"], c["file"], c["line"]) == ("disabled", "sglang/srt/server_args.py", 3383)
    assert c["function"] == "ServerArgs._disable_breakable_cudagraph_if_incompatible"
    assert any("Breakable CUDA graph is incompatible with multimodal model" in r["message"]
               for r in out["log"])
    v = verdict(out, args, {"prefill_cuda_graph": "required"})
    row = rows(v)["prefill_cuda_graph"]
    assert (row["status"], row["predicted"]) == ("fail", "off")
    assert "sglang/srt/server_args.py:3383" in row["evidence"]
    # The reference profile itself (prefill auto) holds on 0.5.15 (the memory unknown: no weights).
    assert verdict(out, args, PROFILE["expect"])["failures"] == []


def test_0515_qwen3_next_keeps_the_breakable_prefill_graph():
    # 0.5.15 reads the disabled-arch list only for tc_piecewise; the default prefill backend
    # is breakable (server_args.py:3252, _parse_cuda_graph_config).
    out = resolve("0.5.15", config("qwen3-next-80b-a3b", **{"cuda-graph-max-bs": 32}))
    assert out["resolved"]["cuda_graph_config"]["prefill"]["backend"] == "breakable"


def test_0515_refuses_the_per_phase_decode_max_bs_in_a_config_file():
    # server_args_config_parser.py:150: a DeprecatedAliasStoreAction is not a config option.
    out = resolve("0.5.15", config(**{"cuda-graph-max-bs-decode": 32}))
    assert out["error"]["type"] == "ValueError"
    assert out["error"]["file"] == "sglang/srt/server_args_config_parser.py"
    assert "cuda_graph_max_bs_decode" in out["error"]["message"]


# ---- 0.5.12: legacy flags, _handle_piecewise_cuda_graph and the mamba strategy -----------
def test_0512_reference_cannot_start_and_preflight_says_why():
    args = config()  # the profile as it is (test_upgrade_real_sglang.py plans to it)
    out = resolve("0.5.12", args)
    # server_args.py:2567-2571 (_handle_mamba_radix_cache): speculative decoding + radix cache
    # need the extra_buffer strategy; the default no_buffer raises.
    err = out["error"]
    assert (err["type"], err["file"], err["line"]) == ("ValueError", "sglang/srt/server_args.py", 2568)
    assert "mamba-scheduler-strategy" in err["message"]
    v = verdict(out, args, PROFILE["expect"])
    assert not v["ok"] and v["startup_error"]["line"] == 2568
    assert rows(v)["resolution"]["status"] == "fail"


def test_0512_qwen3_next_is_on_the_list_and_the_list_is_read():
    out = resolve("0.5.12", config("qwen3-next-80b-a3b", drop=[
        "speculative-algorithm", "speculative-num-steps", "speculative-eagle-topk",
        "speculative-num-draft-tokens"], **{"cuda-graph-max-bs": 32}))
    # server_args.py:1309-1310 (_handle_piecewise_cuda_graph) reads the list.
    c = change(out, "disable_piecewise_cuda_graph")
    assert (c["resolved"], c["line"], c["function"]) == (True, 1310,
                                                         "ServerArgs._handle_piecewise_cuda_graph")


def test_0512_with_extra_buffer_starts_but_the_multimodal_rule_drops_prefill():
    args = config(**{"cuda-graph-max-bs": 32, "mamba-scheduler-strategy": "extra_buffer"})
    out = resolve("0.5.12", args, {"SGLANG_ENABLE_SPEC_V2": "1"})
    assert out["error"] is None
    # server_args.py:1335-1337: multimodal models lose the piecewise graph.
    c = change(out, "disable_piecewise_cuda_graph")
    assert (c["resolved"], c["line"]) == (True, 1337)


def test_resolution_never_changes_its_input(reference_0523):
    out, args = reference_0523
    before = copy.deepcopy(args)
    verdict(out, args)
    assert args == before
