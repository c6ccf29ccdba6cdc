"""sglang_upgrade_report: two resolutions of one release (the serving SGLang's and the
candidate's), shaped as sglang_resolve returns them, judged by sglang_preflight, set side by
side. The real releases are planned in tests/integration/test_upgrade_real_sglang.py."""

import json

import pytest
from ansible.errors import AnsibleFilterError
from test_sglang_preflight import CAR_RULES

from ansible_collections.sglang.deploy.plugins.filter import sglang_preflight as pf
from ansible_collections.sglang.deploy.plugins.filter import sglang_upgrade as up

A6000X2 = {"count": 2, "name": "NVIDIA RTX A6000", "memory_mib": 49140, "compute_capability": "8.6"}
ARGS = {"model-path": "/srv/models/Qwen3.6-27B", "tp-size": 2, "speculative-algorithm": "NEXTN"}
EXPECT = {"decode_cuda_graph": "required", "prefill_cuda_graph": "auto"}
PREFILL_OFF = {"field": "cuda_graph_config.prefill.backend", "asked": None, "resolved": "disabled",
               "file": "sglang/srt/server_args.py", "line": 3383,
               "function": "ServerArgs._disable_breakable_cudagraph_if_incompatible"}
PREFILL_ON = {"field": "cuda_graph_config.prefill.backend", "asked": None, "resolved": "breakable",
              "file": "sglang/srt/arg_groups/cuda_graph_hook.py", "line": 96,
              "function": "parse_cuda_graph_config"}


WEIGHTS = {"files": ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"],
           "selected_by": "sglang/srt/model_loader/loader.py:480 DefaultModelLoader._prepare_weights",
           "sharded_bytes": 55_000_000_000, "replicated_bytes": 600_000_000, "tensors": 1211,
           "sized_by_file": [], "unread": []}
# The candidate's host prerequisites, read after its env was built (sglang_host_prereqs).
PREREQS = {"facts": {"driver": "580.95.05", "driver_needed": "580.65.06", "torch_cuda": "13.0",
                     "cc": "/usr/bin/cc", "python_h": True, "nvcc": "/usr/local/cuda/bin/nvcc"},
           "failures": [], "packages": {"venv_exists": True}}


def resolution(version, prefill, changes, packages, **more):
    resolved = {"tp_size": 2, "disable_custom_all_reduce": False, "max_running_requests": 48,
                "mem_fraction_static": 0.83,
                "speculative_algorithm": "EAGLE", "random_seed": hash(version) % 1000,
                "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                "speculative_num_draft_tokens": 4, "attention_backend": "flashinfer",
                "cuda_graph_config": {"decode": {"backend": "full", "max_bs": 32},
                                      "prefill": {"backend": prefill, "max_bs": 4096}}}
    resolved.update(more.pop("resolved", {}))
    return {"ran": True, "sglang_version": version, "entry": "ServerArgs.resolve_once",
            "resolved": resolved, "error": None, "unknown_flags": [], "known_flags": 500,
            "changes": changes, "log": [], "stubbed": {}, "volatile": ["random_seed"],
            "weights": WEIGHTS,
            "packages": packages, "torch": {"version": packages.get("torch"), "cuda": "13.0"},
            **more}


OLD = resolution("0.5.15", "disabled", [PREFILL_OFF],
                 {"sglang": "0.5.15", "torch": "2.11.0", "flashinfer_python": "0.6.12",
                  "requests": "2.32.0", "sglang-kernel": "0.4.4"},
                 resolved={"file_storage_path": "sglang_storage", "old_only": 1})
NEW = resolution("0.5.23", "breakable", [PREFILL_ON],
                 {"sglang": "0.5.23", "torch": "2.14.1", "flashinfer-python": "0.7.2",
                  "requests": "2.33.0", "sglang-kernel": "0.4.10"},
                 resolved={"file_storage_path": None, "new_only": 2})


def verdict(res):
    facts = {"sglang_version": res.get("sglang_version") if isinstance(res, dict) else None,
             "model": {"architectures": []}, "piecewise_blacklist": {},
             "custom_all_reduce_rules": CAR_RULES, "gpus": pf.described_gpus(A6000X2)}
    return pf.sglang_preflight(facts, ARGS, {}, EXPECT, resolution=res)


def plan(old=OLD, new=NEW, prereqs=PREREQS):
    return up.sglang_upgrade_report(verdict(old), verdict(new), old, new, prereqs)


def test_a_field_resolved_otherwise_is_named_with_the_line_on_each_side():
    report = plan()
    assert report["verdict"] == "ready" and report["changes_needed"] == []
    diffs = {d["field"]: d for d in report["differences"]}
    prefill = diffs["cuda_graph_config.prefill.backend"]
    assert (prefill["from"], prefill["to"]) == ("disabled", "breakable")
    assert prefill["from_site"] == {"file": "sglang/srt/server_args.py", "line": 3383,
                                    "function": "ServerArgs._disable_breakable_cudagraph_if_incompatible"}
    assert prefill["to_site"]["file"] == "sglang/srt/arg_groups/cuda_graph_hook.py"
    # A default that changed has no line of resolution on either side.
    assert diffs["file_storage_path"]["from_site"] is None
    # A seed SGLang draws on each run is no difference; nor is a field one side lacks.
    assert "random_seed" not in diffs and report["volatile"] == ["random_seed"]
    assert (report["fields_added"], report["fields_removed"]) == (["new_only"], ["old_only"])
    assert {"name": "prefill_cuda_graph", "from": "WARN", "to": "OK"} == {
        k: v for k, v in report["rows_changed"][0].items() if k != "evidence"}
    json.dumps(report)


def test_the_packages_that_matter_are_listed_and_the_rest_counted():
    report = plan()
    names = {p["name"]: (p["from"], p["to"]) for p in report["packages"]}
    assert names == {"sglang": ("0.5.15", "0.5.23"), "torch": ("2.11.0", "2.14.1"),
                     "flashinfer-python": ("0.6.12", "0.7.2"),
                     "sglang-kernel": ("0.4.4", "0.4.10")}
    assert report["packages_other_changes"] == 1  # requests


def test_a_flag_the_candidate_removed_is_refused_with_its_nearest_name():
    error = {"type": "SystemExit", "stage": "parse", "file": "argparse.py", "line": 2, "function":
             "error", "message": "unrecognized arguments: --mamba-scheduler-strategy extra_buffer"}
    new = dict(NEW, resolved=None, error=error, unknown_flags=[
        {"name": "mamba-scheduler-strategy", "suggestions": ["mamba-radix-cache-strategy"]}])
    report = plan(new=new)
    assert report["verdict"] == "changes needed"
    assert report["refused_flags"] == [{"flag": "--mamba-scheduler-strategy",
                                        "message": error["message"],
                                        "nearest": ["--mamba-radix-cache-strategy"]}]
    assert report["changes_needed"][0] == ("--mamba-scheduler-strategy: rename or drop it "
                                           "(nearest: --mamba-radix-cache-strategy)")
    # Nothing resolved on the candidate's side: nothing compared, not "every field gone".
    assert (report["compared"], report["differences"], report["fields_removed"]) == (False, [], [])
    lines = report["lines"]
    assert lines[0] == "upgrade sglang 0.5.15 -> 0.5.23: CHANGES NEEDED"
    assert any(line.startswith("  refused: --mamba-scheduler-strategy") for line in lines)
    assert "  resolved fields not compared" in " ".join(lines)


def test_a_candidate_that_refuses_the_release_at_start_says_where():
    error = {"type": "ValueError", "stage": "resolve", "file": "sglang/srt/server_args.py",
             "line": 2568, "function": "_handle_mamba_radix_cache",
             "message": "Speculative decoding is not compatible with radix cache"}
    report = plan(old=NEW, new=dict(OLD, sglang_version="0.5.12", resolved=None, error=error))
    assert report["verdict"] == "changes needed"
    assert report["changes_needed"][0].startswith(
        "SGLang 0.5.12 refuses the release at start: ValueError at "
        "sglang/srt/server_args.py:2568: Speculative decoding")
    assert {"name": "resolution", "from": "OK", "to": "FAIL"}.items() <= \
        report["rows_changed"][0].items()


def test_a_driver_older_than_the_candidates_cuda_needs_is_a_change_needed():
    prereqs = {"facts": {"driver": "570.86.10", "driver_needed": "580.65.06",
                         "torch_cuda": "13.0", "cc": "/usr/bin/cc", "python_h": True,
                         "nvcc": None},
               "failures": ["driver: NVIDIA driver 570.86.10 is older than 580.65.06, which "
                            "CUDA 13.0 needs: upgrade the driver to >= 580.65.06"]}
    report = plan(prereqs=prereqs)
    assert report["prerequisites"][0] == {"what": "NVIDIA driver for torch's CUDA 13.0",
                                          "needed": "580.65.06", "found": "570.86.10"}
    assert report["prerequisites"][1:] == [
        {"what": "C compiler", "needed": "cc or gcc", "found": "/usr/bin/cc"},
        {"what": "Python headers", "needed": "Python.h", "found": "Python.h"},
        {"what": "nvcc", "needed": "for kernels built at run time", "found": None}]
    assert report["verdict"] == "changes needed"
    assert "upgrade the driver to >= 580.65.06" in report["changes_needed"][-1]
    assert "  prerequisite nvcc: needs for kernels built at run time, found none here" in \
        report["lines"]


def test_a_report_without_verdicts_is_refused():
    with pytest.raises(AnsibleFilterError, match="old_verdict must be a preflight verdict"):
        up.sglang_upgrade_report(None, verdict(NEW), OLD, NEW)


def test_a_fleet_reads_one_line_per_host():
    ready = plan()
    plans = [ready, plan(prereqs={"facts": {}, "failures": [
        "driver: NVIDIA driver 570 is older than 580"]}), {}]
    lines = up.sglang_upgrade_summary(["gpu-a", "gpu-b", "gpu-c"], plans)
    assert lines[0] == (f"gpu-a: sglang 0.5.15 -> 0.5.23: ready, {len(ready['differences'])} "
                        "resolved fields differ")
    assert lines[1].endswith("changes needed, 2 resolved fields differ; first: driver: NVIDIA "
                             "driver 570 is older than 580")
    assert lines[2].startswith("gpu-c: no plan")


def test_without_the_probe_the_sglang_versions_come_from_the_verdicts():
    # No GPU to describe (a test host): SGLang's probe never ran, the sources gave the versions.
    old = {"ran": False, "reason": "no GPU to describe"}
    report = up.sglang_upgrade_report(verdict(OLD), verdict(NEW), old, dict(old))
    assert report["packages"] == [{"name": "sglang", "from": "0.5.15", "to": "0.5.23"}]
    assert report["compared"] is False and report["packages_other_changes"] == 0
