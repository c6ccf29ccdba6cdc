"""Inputs the host contradicts are refused with the variable and the fix."""

import pytest

from ansible_collections.sglang.deploy.plugins.filter.sglang_inputs import sglang_host_inputs
from support import load_module

facts_mod = load_module("sglang_facts")

GPUS = {"present": True, "count": 2, "devices": [{"index": 0}, {"index": 1}]}
MODEL = {"source": "local", "config_path": "/srv/m/config.json"}
ARGS = {"model-path": "/srv/m", "tp-size": 2}


def _facts(gpus=GPUS, model=MODEL):
    return {"gpus": gpus, "model": model}


@pytest.mark.parametrize("facts, args, env, words", [
    (_facts(), {**ARGS, "tp-size": 0}, {}, ["tp-size: 0", "1 or more"]),
    (_facts(), {**ARGS, "tp-size": 4}, {}, ["tp-size: 4 needs 4 GPUs", "shows 2", "lower tp-size"]),
    (_facts(), ARGS, {"CUDA_VISIBLE_DEVICES": "1"}, ["shows 1", "CUDA_VISIBLE_DEVICES=1"]),
    (_facts(), ARGS, {"CUDA_VISIBLE_DEVICES": "7"}, ["sglang_env", "GPU 7"]),
    (_facts(model={"source": None}), ARGS, {}, ["sglang_model_path: '/srv/m' is not a directory"]),
    (_facts(model={"source": "local", "config_path": None}), ARGS, {},
     ["sglang_model_path: /srv/m has no config.json"]),
])
def test_refused(facts, args, env, words):
    verdict = sglang_host_inputs(facts, args, env)
    assert not verdict["ok"]
    text = " ".join(verdict["failures"])
    for word in words:
        assert word in text


@pytest.mark.parametrize("facts, args", [
    (_facts(), ARGS),
    (_facts(gpus={"present": False}), {**ARGS, "tp-size": 8}),  # preflight reports no GPU
    (_facts(model={"source": None}), {**ARGS, "model-path": "Qwen/Qwen3.6-27B"}),  # hub id
])
def test_accepted(facts, args):
    assert sglang_host_inputs(facts, args, {}) == {"ok": True, "failures": []}


def test_one_model_over_two_nodes_counts_this_nodes_gpus():
    args = {**ARGS, "tp-size": 4, "nnodes": 2, "node-rank": 1}
    assert sglang_host_inputs(_facts(), args, {})["ok"]
    verdict = sglang_host_inputs(_facts(), {**args, "tp-size": 8}, {})
    assert verdict["failures"] == [
        "tp-size: 8 needs 4 GPUs on each of its 2 nodes and this host shows 2 "
        "(CUDA_VISIBLE_DEVICES=unset); lower tp-size in sglang_server_args or deploy to a host "
        "with more GPUs"]
    with pytest.raises(Exception, match="tp-size 3 is not a multiple of nnodes 2"):
        sglang_host_inputs(_facts(), {**args, "tp-size": 3}, {})


@pytest.mark.parametrize("archs", ["Qwen3NextForCausalLM", 5, [1], {"a": "b"}])
def test_architectures_that_are_not_a_list_of_names_are_refused_before_any_change(archs):
    facts = {"model": {"source": "local", "config_path": "/m/config.json", "architectures": archs},
             "gpus": {"present": False}}
    out = sglang_host_inputs(facts, {"model-path": "/m", "tp-size": 1}, {})
    assert not out["ok"]
    assert any("/m/config.json has architectures" in f for f in out["failures"])


@pytest.mark.parametrize("content, words", [
    ("[]", "holds a JSON list"),
    ('{"architectures": 5}', None),
    ("{not json", "Expecting property name"),
])
def test_config_json_of_the_wrong_shape_is_a_message_not_a_traceback(tmp_path, content, words):
    (tmp_path / "config.json").write_text(content)
    if words is None:
        assert facts_mod.model_facts(str(tmp_path))["architectures"] == 5
        return
    with pytest.raises(ValueError, match=words):
        facts_mod.model_facts(str(tmp_path))


def test_a_hanging_nvidia_smi_is_reported_not_raised(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nsleep 30\n")
    smi.chmod(0o755)
    from ansible_collections.sglang.deploy.plugins.module_utils.sglang_gpus import run_tool

    rc, _, err = run_tool([str(smi)], timeout=1)
    assert rc == 124 and "did not answer within 1 s" in err


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_a_fetch_plan_is_checked_and_filled_in():
    from ansible_collections.sglang.deploy.plugins.filter.sglang_inputs import sglang_fetch_plan

    assert sglang_fetch_plan({}) == {}
    plan = sglang_fetch_plan({"repo": "Qwen/Qwen3.6-27B", "revision": COMMIT}, "/srv/m", "",
                             {"HF_HUB_OFFLINE": "1"})
    assert plan == {"repo": "Qwen/Qwen3.6-27B", "revision": COMMIT, "allow_patterns": [],
                    "offline": True, "min_free_gb": 10, "timeout": 14400}
    assert not sglang_fetch_plan({"repo": "a/b", "revision": COMMIT}, "/srv/m")["offline"]


@pytest.mark.parametrize("fetch, path, revision, words", [
    ("yes", "/srv/m", "", ["must be a mapping"]),
    ({"repo": "a/b", "revision": COMMIT, "branch": "x"}, "/srv/m", "", ["unknown keys ['branch']"]),
    ({"repo": "Qwen3.6-27B", "revision": COMMIT}, "/srv/m", "", ["not a hub id", "owner/name"]),
    ({"repo": "a/b", "revision": "main"}, "/srv/m", "", ["'main' is not a commit", "40-character"]),
    ({"repo": "a/b", "revision": COMMIT}, "models/m", "", ["absolute path of its own"]),
    ({"repo": "a/b", "revision": COMMIT}, "/srv", "", ["absolute path of its own"]),
    ({"repo": "a/b", "revision": COMMIT}, "/srv/m", "v1", ["leave sglang_model_revision empty"]),
    ({"repo": "a/b", "revision": COMMIT, "allow_patterns": "*.json"}, "/srv/m", "",
     ["list of globs"]),
    ({"repo": "a/b", "revision": COMMIT, "timeout": "1h"}, "/srv/m", "", ["timeout must be"]),
])
def test_a_bad_fetch_plan_says_what_to_change(fetch, path, revision, words):
    from ansible.errors import AnsibleFilterError
    from ansible_collections.sglang.deploy.plugins.filter.sglang_inputs import sglang_fetch_plan

    with pytest.raises(AnsibleFilterError) as err:
        sglang_fetch_plan(fetch, path, revision)
    for word in words:
        assert word in str(err.value)


def test_a_checkpoint_being_fetched_is_not_refused_for_being_absent():
    facts = _facts(model={"source": None})
    assert not sglang_host_inputs(facts, ARGS)["ok"]
    assert sglang_host_inputs(facts, ARGS, fetching=True)["ok"]
