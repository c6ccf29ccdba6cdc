"""Upgrade plans between real SGLang releases (full installs, scripts/build-sglang-venv.sh):
the reference profile resolved by the serving release and by the candidate, set side by side
by sglang_upgrade_report. Resolutions are shared with test_resolve_real_sglang.py (asked once
per session)."""

import json
import time

import pytest
from support.wheels import full_venv
from test_resolve_real_sglang import A6000X2, PROFILE, config, resolve, resolve_mod, verdict

from ansible_collections.sglang.deploy.plugins.filter import sglang_upgrade as up

pytestmark = pytest.mark.network


def plan(old_version, new_version, args):
    started = time.monotonic()
    old, new = resolve(old_version, args), resolve(new_version, args)
    report = up.sglang_upgrade_report(verdict(old, args, PROFILE["expect"]),
                                      verdict(new, args, PROFILE["expect"]), old, new)
    print(f"\nplan {old_version} -> {new_version} in {time.monotonic() - started:.1f} s "
          "(resolutions asked before in this session are reused)\n"
          + "\n".join(report["lines"]))
    json.dumps(report)
    return report


def test_0515_to_0523_gains_the_prefill_graph_and_says_which_lines_decide_it():
    report = plan("0.5.15", "0.5.23", config())
    # Nothing to change; but the test model has no weights (so both memory rows are unknown)
    # and no host was read: fail closed, the plan says what it lacks instead of "ready".
    assert report["changes_needed"] == [] and report["verdict"] == "unknown"
    assert [u.split(":")[0] for u in report["unknowns"]] == [
        "serving memory", "candidate memory", "the candidate's host prerequisites were not read"]
    assert "Cannot find any model weights" in report["unknowns"][1]
    diffs = {d["field"]: d for d in report["differences"]}
    prefill = diffs["cuda_graph_config.prefill.backend"]
    assert (prefill["from"], prefill["to"]) == ("disabled", "breakable")
    # 0.5.15: the breakable backend's rule for multimodal models; 0.5.23: the hook's parse.
    assert (prefill["from_site"]["file"], prefill["from_site"]["line"]) == (
        "sglang/srt/server_args.py", 3383)
    assert prefill["to_site"]["file"] == "sglang/srt/arg_groups/cuda_graph_hook.py"
    assert "random_seed" in report["volatile"] and "random_seed" not in diffs
    changed = {r["name"]: (r["from"], r["to"]) for r in report["rows_changed"]}
    assert changed["prefill_cuda_graph"] == ("WARN", "OK")
    torch = {p["name"]: (p["from"], p["to"]) for p in report["packages"]}["torch"]
    assert torch == ("2.11.0", "2.14.1")


def test_0515_to_0523_names_a_removed_flag_and_its_nearest_name():
    report = plan("0.5.15", "0.5.23", config(**{"cuda-graph-max-bs": 32}))  # gone in 0.5.20
    assert report["verdict"] == "changes needed"
    refused = report["refused_flags"][0]
    assert refused["flag"] == "--cuda-graph-max-bs"
    assert "--cuda-graph-max-bs-decode" in refused["nearest"]
    assert "cuda-graph-max-bs" in refused["message"]  # SGLang's parser, in its words


def test_0523_back_to_0512_names_sglangs_refusal_at_start():
    report = plan("0.5.23", "0.5.12", config())
    assert report["verdict"] == "changes needed"
    assert report["changes_needed"][0].startswith(
        "SGLang 0.5.12 refuses the release at start: ValueError at "
        "sglang/srt/server_args.py:2568")
    assert set(report["to"]["resolved"].values()) == {None}


@pytest.mark.parametrize("how, hook, timeout, words", [
    ("crash", "import os; os._exit(9)", 600, "the resolution exited 9 without a report"),
    ("hang", "import time; time.sleep(3600)", 30,
     "SGLang's resolution did not finish within 30 s")])
def test_a_candidate_that_crashes_or_hangs_is_unknown_and_the_plan_fails(
        tmp_path, how, hook, timeout, words):
    """The candidate's Python made to crash, then to hang, at start (a sitecustomize on its
    PYTHONPATH, as a broken wheel or a stuck import would): no resolution on that side."""
    (tmp_path / "sitecustomize.py").write_text(hook + "\n")
    args = config()
    old = resolve("0.5.15", args)
    new = resolve_mod.resolve({"venv": str(full_venv("0.5.23")), "args": args, "gpus": A6000X2,
                               "env": {"PYTHONPATH": str(tmp_path)}, "timeout": timeout})
    report = up.sglang_upgrade_report(verdict(old, args, PROFILE["expect"]),
                                      verdict(new, args, PROFILE["expect"]), old, new)
    print(f"\n{how}: " + "\n".join(report["lines"][:1] + [
        f"  unknown: {u}" for u in report["unknowns"]]))
    assert report["verdict"] != "ready"
    assert any(u.startswith("the candidate SGLang did not resolve the release: " + words)
               for u in report["unknowns"]), report["unknowns"]
