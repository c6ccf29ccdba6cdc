"""Fail closed: from a ready upgrade report and an ok preflight, every piece of evidence they
rest on is removed or corrupted, one at a time, on each side. No corruption leaves a `ready`
or an `ok`, and the report names what is missing. The evidence is listed by hand below, per
input; the summary line prints evidence fields x corruptions.

The inputs are the unit fixtures shaped as sglang_resolve, sglang_facts and
sglang_host_prereqs return them; tests/integration/test_upgrade_real_sglang.py runs the same
corruptions over two real SGLang resolutions."""

import copy

import pytest
from test_sglang_preflight import ARGS, by_name, facts, resolution
from test_sglang_upgrade import NEW, OLD, PREREQS, verdict

from ansible_collections.sglang.deploy.plugins.filter import sglang_preflight as pf
from ansible_collections.sglang.deploy.plugins.filter import sglang_upgrade as up
from ansible_collections.sglang.deploy.plugins.filter import sglang_verify as verify

EXPECT = {"decode_cuda_graph": "required", "prefill_cuda_graph": "required",
          "speculative": {"algorithm": "EAGLE", "num_steps": 3},
          "max_running_requests": 48, "attention_backend": "flashinfer"}

# What a verdict rests on, as dotted paths into each input.
RESOLUTION_EVIDENCE = [
    "ran", "resolved", "error", "weights",
    "resolved.tp_size", "resolved.mem_fraction_static", "resolved.disable_custom_all_reduce",
    "resolved.cuda_graph_config", "resolved.cuda_graph_config.decode",
    "resolved.cuda_graph_config.decode.backend", "resolved.cuda_graph_config.prefill",
    "resolved.cuda_graph_config.prefill.backend", "resolved.max_running_requests",
    "resolved.attention_backend", "resolved.speculative_algorithm",
    "resolved.speculative_num_steps",
    "weights.files", "weights.sharded_bytes", "weights.replicated_bytes", "weights.unread",
]
FACTS_EVIDENCE = ["gpus", "gpus.present", "gpus.devices", "gpus.devices.0.memory_mib",
                  "gpus.devices.1.memory_mib", "gpus.topology_text", "custom_all_reduce_rules",
                  "custom_all_reduce_rules.gate", "custom_all_reduce_rules.world_sizes.sizes"]
PREREQ_EVIDENCE = ["facts", "facts.driver", "facts.driver_needed", "facts.torch_cuda",
                   "facts.cc", "facts.python_h", "packages", "packages.venv_exists"]

# Values a field may really hold, so no corruption: `error: null` is SGLang raising nothing;
# a backend or an algorithm SGLang names is any string.
VALID = {"error": {"null"}, "resolved.cuda_graph_config.decode.backend": {"a string"},
         "resolved.cuda_graph_config.prefill.backend": {"a string"},
         "resolved.attention_backend": {"a string"},
         "resolved.speculative_algorithm": {"a string"}}
MISSING = object()
CORRUPTIONS = {"removed": MISSING, "null": None, "a string": "garbage", "a list": [1],
               "a number": -7}


def _walk(obj, path):
    *parents, last = path.split(".")
    for key in parents:
        obj = obj[int(key)] if isinstance(obj, list) else obj[key]
    return obj, (int(last) if isinstance(obj, list) else last)


def corrupted(value, path, with_value):
    """A deep copy of `value` with the field at `path` removed or replaced."""
    out = copy.deepcopy(value)
    parent, key = _walk(out, path)
    if with_value is MISSING:
        if isinstance(parent, list):
            parent[key] = {}
        else:
            parent.pop(key, None)
    else:
        parent[key] = copy.deepcopy(with_value)
    return out


def cases(evidence):
    return [(path, name, value) for path in evidence for name, value in CORRUPTIONS.items()
            if name not in VALID.get(path, ())]


def preflight(f, res):
    return pf.sglang_preflight(f, ARGS, {"CUDA_VISIBLE_DEVICES": "0,1"}, EXPECT, resolution=res)


def test_the_baselines_are_ready_and_ok():
    ok = preflight(facts(), resolution())
    assert (ok["verdict"], ok["unknowns"], ok["failures"]) == ("ok", [], []), ok["unknowns"]
    report = up.sglang_upgrade_report(verdict(OLD), verdict(NEW), OLD, NEW, PREREQS)
    assert report["verdict"] == "ready", report["unknowns"] + report["changes_needed"]


def survivors(what, side, evidence, judge, good, named):
    """Every corruption of `evidence` through `judge(path, value)`: the ones whose answer is
    still `good` (a refusal with a message counts as closed); each other answer must name what
    is missing (`named`). Prints the summary line."""
    left = []
    for path, name, value in cases(evidence):
        try:
            out = judge(path, value)
        except pf.AnsibleFilterError as exc:
            assert str(exc)
            continue
        if good(out):
            left.append(f"{path} {name}")
        else:
            assert named(out), (path, name)
    print(f"\n{what}, {side}: {len(evidence)} evidence fields x {len(CORRUPTIONS)} corruptions "
          f"= {len(cases(evidence))}, {len(left)} left {what == 'upgrade' and 'ready' or 'ok'}")
    return left


@pytest.mark.parametrize("side", ["resolution", "facts"])
def test_no_corrupted_evidence_leaves_the_preflight_ok(side):
    def judge(path, value):
        if side == "resolution":
            return preflight(facts(), corrupted(resolution(), path, value))
        return preflight(corrupted(facts(), path, value), resolution())

    evidence = RESOLUTION_EVIDENCE if side == "resolution" else FACTS_EVIDENCE
    assert not survivors("preflight", side, evidence, judge,
                         lambda out: out["ok"] or out["verdict"] == "ok",
                         lambda out: out["unknowns"] or out["failures"])


@pytest.mark.parametrize("side, evidence", [
    ("serving", RESOLUTION_EVIDENCE), ("candidate", RESOLUTION_EVIDENCE),
    ("prereqs", PREREQ_EVIDENCE)])
def test_no_corrupted_evidence_leaves_the_upgrade_ready(side, evidence):
    def judge(path, value):
        old = corrupted(OLD, path, value) if side == "serving" else OLD
        new = corrupted(NEW, path, value) if side == "candidate" else NEW
        prereqs = corrupted(PREREQS, path, value) if side == "prereqs" else PREREQS
        return up.sglang_upgrade_report(verdict(old), verdict(new), old, new, prereqs)

    assert not survivors("upgrade", side, evidence, judge,
                         lambda report: report["verdict"] == "ready",
                         lambda report: report["unknowns"] or report["changes_needed"])


@pytest.mark.parametrize("reason", [
    "SGLang's resolution did not finish within 600 s",
    "the resolution exited -9 without a report: Killed"])
def test_a_candidate_that_hung_or_crashed_is_unknown_with_the_reason(reason):
    crashed = {"ran": False, "reason": reason, "resolved": None, "error": None}
    report = up.sglang_upgrade_report(verdict(OLD), verdict(crashed), OLD, crashed, PREREQS)
    assert report["verdict"] == "unknown"
    assert f"the candidate SGLang did not resolve the release: {reason}" in report["unknowns"]
    assert "  unknown: the candidate SGLang did not resolve" in \
        "\n".join(report["lines"])


def test_prerequisites_read_before_the_env_existed_are_no_evidence():
    early = corrupted(PREREQS, "packages.venv_exists", False)
    early = corrupted(early, "facts.torch_cuda", None)
    report = up.sglang_upgrade_report(verdict(OLD), verdict(NEW), OLD, NEW, early)
    assert report["verdict"] == "unknown"
    assert any("read before its env existed" in u for u in report["unknowns"])


def test_a_cpu_torch_needs_no_driver():
    cpu = dict(NEW, torch={"version": "2.14.1+cpu", "cuda": None})
    prereqs = corrupted(corrupted(PREREQS, "facts.torch_cuda", None), "facts.driver", None)
    report = up.sglang_upgrade_report(verdict(OLD), verdict(cpu), OLD, cpu, prereqs)
    assert report["verdict"] == "ready", report["unknowns"]


def test_no_driver_answering_is_unknown_naming_what_torch_needs():
    prereqs = corrupted(PREREQS, "facts.driver", None)
    report = up.sglang_upgrade_report(verdict(OLD), verdict(NEW), OLD, NEW, prereqs)
    assert report["verdict"] == "unknown"
    assert report["unknowns"] == [
        "no NVIDIA driver answers (nvidia-smi): whether this host runs CUDA 13.0 (driver >= "
        "580.65.06) is unknown"]


def test_the_memory_row_of_the_baseline_rests_on_sglangs_selection():
    row = by_name(preflight(facts(), resolution()))["memory"]
    assert row["status"] == "ok" and "DefaultModelLoader._prepare_weights" in row["evidence"]


# ---- the smoke gate: "not slower" only from figures measured on both sides -----------------
LEVEL = {"concurrency": 1, "decode_tok_s_per_user": 55.0, "output_tok_s": 55.0,
         "ttft_ms_p50": 80.0, "requests_failed": 0}
BASELINE = {"levels": [LEVEL, dict(LEVEL, concurrency=8, decode_tok_s_per_user=40.0,
                                   output_tok_s=320.0)]}


def gate(now, regressions="refuse"):
    return verify.sglang_smoke_gate(now, 45, None, BASELINE, 0.10, regressions)


def test_the_smoke_baseline_passes():
    assert gate(copy.deepcopy(BASELINE))["ok"]


@pytest.mark.parametrize("field", ["decode_tok_s_per_user", "output_tok_s", "ttft_ms_p50"])
@pytest.mark.parametrize("name, value", [(n, v) for n, v in CORRUPTIONS.items()])
def test_a_figure_not_measured_is_never_not_slower(field, name, value):
    now = copy.deepcopy(BASELINE)
    now["levels"][1] = corrupted(now["levels"][1], field, value)
    out = gate(now)
    assert not out["ok"] and f"{field} at concurrency 8 was not measured" in out["unknowns"][0]
    # A rollback is not refused for it, but it is said.
    rollback = gate(now, "warn")
    assert rollback["ok"] and rollback["warnings"][0].startswith(f"{field} at concurrency 8 was "
                                                                 "not measured; its own figures")


def test_a_level_not_measured_is_named():
    out = gate({"levels": [dict(LEVEL)]})
    assert out["failures"] == ["concurrency 8 was not measured; the previous good release has it"]
