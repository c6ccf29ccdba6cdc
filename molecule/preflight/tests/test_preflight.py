"""Refused releases leave the serving one alone: deploys run with ansible-runner, outcomes read
from its structured events and from the host with testinfra."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
from support.runner import play  # noqa: E402

BASE = "/opt/sglang"
NVLINK_SMI = "/opt/fake-nvidia/nvlink/nvidia-smi"


def deploy(extravars):
    out = play("deploy.yml", extravars)
    return out["status"], out["failed_task"], out["msg"]


def serving(host):
    return {
        "current": host.file(f"{BASE}/current").linked_to,
        "pid": host.check_output("systemctl show sglang -p MainPID --value"),
        "sglang": host.check_output(
            "/root/ml-env/bin/python -c 'import importlib.metadata as m; print(m.version(\"sglang\"))'"),
    }


def newest_release(host):
    name = host.check_output(f"ls -1 {BASE}/releases | sort | tail -n 1")
    return json.loads(host.check_output(f"cat {BASE}/releases/{name}/manifest.json"))


def assert_still_serving(host, before):
    assert serving(host) == before  # same release, same process (no restart), same sglang
    answer = json.loads(host.check_output(
        "curl -sf http://127.0.0.1:30000/v1/completions -H 'Content-Type: application/json' "
        "-d '{\"prompt\": \"Hi\", \"max_tokens\": 4}'"))
    assert answer["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize(
    "name, extravars, expected",
    [
        (
            "nvlink-with-p2p-disabled",
            {"sglang_nvidia_smi": NVLINK_SMI, "sglang_env": {"NCCL_P2P_DISABLE": "1"}},
            ["nccl_p2p: NCCL_P2P_DISABLE=1 while the TP GPUs are joined by NVLink",
             "Remove NCCL_P2P_DISABLE"],
        ),
        (
            # The ml-env holds the sglang wheel only (no torch): SGLang cannot resolve, so the
            # verdict comes from its sources, where this hit is certain.
            "blacklisted-architecture-on-0.5.12",
            {"sglang_version": "0.5.12", "sglang_model_path": "/srv/models/Qwen3-Next-80B-A3B",
             "sglang_profile": {"description": "Qwen3-Next on 0.5.12", "min_sglang_version": "0.5.10",
                                "model": {"path": "/srv/models/Qwen3-Next-80B-A3B"},
                                "args": {"tp-size": 2}},
             "sglang_expect": {"prefill_cuda_graph": "required"}},
            ["prefill_cuda_graph: the prefill (piecewise) CUDA graph is required",
             "Qwen3NextForCausalLM is in piecewise_cuda_graph_disabled_model_archs "
             "(sglang 0.5.12, sglang/srt/configs/model_config.py:1558), read by "
             "sglang/srt/server_args.py:1309 (ServerArgs._handle_piecewise_cuda_graph)"],
        ),
    ],
)
def test_preflight_refuses_and_the_serving_release_stays(host, name, extravars, expected):
    before = serving(host)
    status, task, msg = deploy(extravars)
    assert status == "failed", name
    assert task == "Stop; the serving release and its env were not touched"
    assert "Preflight refused release" in msg
    for fragment in expected:
        assert fragment in msg, (fragment, msg)
    assert_still_serving(host, before)
    refused = newest_release(host)
    assert refused["status"] == "failed"
    assert refused["reason"].startswith("preflight: ")
    assert host.file(f"{BASE}/releases/{refused['id']}/preflight.json").exists


def test_a_good_deploy_still_changes_nothing(host):
    before = serving(host)
    status, task, _ = deploy({})
    assert (status, task) == ("successful", None)
    assert serving(host) == before
