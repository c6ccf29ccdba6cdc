from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.filter import sglang_render as r

ROOT = Path(__file__).resolve().parents[2]
PROFILE_FILE = ROOT / "roles/sglang/profiles/qwen3.6-27b-tp2-mtp.yml"


@pytest.fixture
def profile():
    return yaml.safe_load(PROFILE_FILE.read_text())


def test_shipped_profile_renders_the_reference_deployment(profile):
    args = r.sglang_server_config(profile, {}, "/srv/models/Qwen3.6-27B", "", "127.0.0.1", 30000)
    assert args == {
        "model-path": "/srv/models/Qwen3.6-27B",
        "served-model-name": "qwen3.6-27b",
        "host": "127.0.0.1",
        "port": 30000,
        "tp-size": 2,
        "speculative-algorithm": "NEXTN",
        "speculative-num-steps": 3,
        "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 4,
        "mem-fraction-static": 0.85,
        "context-length": 32768,
        "reasoning-parser": "qwen3",
        "enable-metrics": True,
    }


def test_operator_args_override_add_and_remove(profile):
    args = r.sglang_server_config(
        profile,
        {"mem_fraction_static": 0.8, "--cuda-graph-max-bs-decode": 32, "reasoning-parser": None},
    )
    assert args["mem-fraction-static"] == 0.8
    assert args["cuda-graph-max-bs-decode"] == 32
    assert "reasoning-parser" not in args
    assert args["model-path"] == "Qwen/Qwen3.6-27B"  # the profile's default


def test_revision_comes_from_the_variable_over_the_profile(profile):
    profile["model"]["revision"] = "main"
    assert r.sglang_server_config(profile)["revision"] == "main"
    assert r.sglang_server_config(profile, {}, "", "abc123")["revision"] == "abc123"


def test_port_from_extra_vars_string_is_accepted(profile):
    assert r.sglang_server_config(profile, {}, "", "", "0.0.0.0", "30001")["port"] == 30001


@pytest.mark.parametrize("port", [0, 70000, "http", True, None])
def test_bad_port_is_refused(profile, port):
    with pytest.raises(AnsibleFilterError, match="sglang_port"):
        r.sglang_server_config(profile, {}, "", "", "127.0.0.1", port)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"config": "/x.yaml"}, "--config PATH"),
        ({"model-path": "/m"}, "sglang_model_path"),
        ({"port": 1}, "sglang_port"),
        ({"host": "0.0.0.0"}, "sglang_host"),
        ({"tp-size=2": True}, "--flag=value"),
        ({"Tp Size": 2}, "not an SGLang argument name"),
        ({"tp_size": 2, "tp-size": 4}, "name the same argument"),
        ({"speculative-algorithm": "MTP"}, "NEXTN"),
        ({"speculative-num-draft-tokens": 6}, "needs speculative-num-draft-tokens 4"),
        ({"speculative-num-steps": "three"}, "must be integers"),
        ({"chunked-prefill-size": object()}, "unsupported value"),
    ],
)
def test_bad_server_args_are_refused_with_the_fix(profile, overrides, message):
    with pytest.raises(AnsibleFilterError, match=message):
        r.sglang_server_config(profile, overrides)


def test_topk_above_one_allows_any_draft_count(profile):
    args = r.sglang_server_config(
        profile, {"speculative-eagle-topk": 4, "speculative-num-draft-tokens": 8}
    )
    assert args["speculative-num-draft-tokens"] == 8


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda p: p.pop("model"), "model.path"),
        (lambda p: p.__setitem__("argz", {}), "unknown profile keys"),
        (lambda p: p["model"].__setitem__("weights", "x"), "unknown model keys"),
        (lambda p: p.__setitem__("args", ["tp-size"]), "args must be a mapping"),
    ],
)
def test_malformed_profile_is_refused(profile, mutate, message):
    mutate(profile)
    with pytest.raises(AnsibleFilterError, match=message):
        r.sglang_profile_check(profile)


def release_file(args, env, name):
    files = {f["name"]: f for f in r.sglang_release_files(args, env, "#!/bin/sh\n", "import sys")}
    return files[name]


def test_release_files_are_the_four_a_release_holds_with_their_modes(profile):
    files = r.sglang_release_files({"model-path": "/m"}, {"A": "1"}, "#!/bin/sh\nexec x\n", "import sys")
    assert [(f["name"], f["mode"]) for f in files] == [
        ("config.yaml", "0644"), ("sglang.env", "0600"), ("launch", "0755"), ("launch.py", "0644")]
    assert files[2]["content"] == "#!/bin/sh\nexec x\n"
    # lookup('file') strips the last newline: the file gets it back, once.
    assert files[3]["content"] == "import sys\n"
    assert r.sglang_release_files({}, {}, "", "import sys\n")[3]["content"] == "import sys\n"


def test_config_yaml_round_trips_with_dashed_keys(profile):
    args = r.sglang_server_config(profile, {"cuda-graph-config": {"decode": {"max_bs": 32}}})
    text = release_file(args, {}, "config.yaml")["content"]
    assert text.startswith("#")
    assert yaml.safe_load(text) == args
    assert list(yaml.safe_load(text))[:2] == ["model-path", "served-model-name"]


def test_env_merge_and_file(profile):
    env = r.sglang_env_merge(
        profile, {"NCCL_P2P_DISABLE": 1, "CUDA_VISIBLE_DEVICES": None, "X": True, "Q": 'a"b\\c'}
    )
    assert env == {"NCCL_P2P_DISABLE": "1", "X": "1", "Q": 'a"b\\c'}
    text = release_file({}, env, "sglang.env")["content"]
    assert 'NCCL_P2P_DISABLE="1"' in text
    assert 'Q="a\\"b\\\\c"' in text


@pytest.mark.parametrize("env", [{"1BAD": "x"}, {"A-B": "x"}, {"A": "line\nbreak"}])
def test_bad_env_is_refused(profile, env):
    with pytest.raises(AnsibleFilterError, match="sglang_env"):
        r.sglang_env_merge(profile, env)


def test_pip_args():
    assert r.sglang_pip_args() == ""
    assert r.sglang_pip_args("https://mirror/simple", ["https://x/whl"]) == (
        "--index-url https://mirror/simple --extra-index-url https://x/whl"
    )
    assert r.sglang_pip_args("", ["https://x"], "/w", True) == "--no-index --find-links /w"
    with pytest.raises(AnsibleFilterError, match="sglang_pip_wheelhouse"):
        r.sglang_pip_args(no_index=True)


@pytest.mark.parametrize(
    "host, expected",
    [("0.0.0.0", "127.0.0.1"), ("::", "[::1]"), ("10.0.0.5", "10.0.0.5"), ("fe80::1", "[fe80::1]")],
)
def test_connect_host(host, expected):
    assert r.sglang_connect_host(host) == expected


def test_multinode_ranks_and_dist_init_come_from_the_inventory():
    hostvars = {"node0": {"ansible_host": "10.0.0.10"}, "node1": {}}
    nccl = {"NCCL_SOCKET_IFNAME": "ens5f0", "NCCL_IB_HCA": "mlx5_0,mlx5_1", "GLOO_SOCKET_IFNAME": "ens5f0"}
    rank1 = r.sglang_multinode(["node0", "node1"], "node1", hostvars, 50000, nccl)
    assert rank1["args"] == {"nnodes": 2, "node-rank": 1, "dist-init-addr": "10.0.0.10:50000"}
    assert rank1["rank0"] == "node0" and rank1["env"] == nccl
    assert r.sglang_multinode(["node0", "node1"], "node0", hostvars)["node_rank"] == 0
    single = r.sglang_multinode([], "host", {}, 50000, {})
    assert single == {"nnodes": 1, "node_rank": 0, "rank0": "host", "args": {}, "env": {}}


@pytest.mark.parametrize("hosts, host, nccl, message", [
    (["a", "b"], "c", {}, "c is not in the group"),
    (["a", "b"], "a", {"CUDA_VISIBLE_DEVICES": "0"}, "not an NCCL_"),
    (["a", "b"], "a", {"NCCL_IB_HCA": "x\nNCCL_DEBUG=INFO"}, "single-line"),
])
def test_bad_multinode_input_is_refused(hosts, host, nccl, message):
    with pytest.raises(AnsibleFilterError, match=message):
        r.sglang_multinode(hosts, host, {"a": {}, "b": {}}, 50000, nccl)


@pytest.mark.parametrize("name", ["nnodes", "node-rank", "dist_init_addr"])
def test_multinode_arguments_are_the_roles(name):
    with pytest.raises(AnsibleFilterError, match="sglang_nodes_group"):
        r.sglang_server_config({"model": {"path": "/m"}}, {name: 1})
