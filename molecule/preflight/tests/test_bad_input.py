"""The bad-input matrix: every row is refused with a message naming the variable and the fix,
and nothing on the host changes (releases, current, the service, the ml-env, the unit), nor
the operator's inventory."""

import hashlib
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
from support.runner import ROOT, play  # noqa: E402

NVLINK_SMI = "/opt/fake-nvidia/nvlink/nvidia-smi"
HOG_PORT = 30005

MATRIX = [
    ("unknown profile", {"sglang_profile": "qwen-nope"},
     ["sglang_profile 'qwen-nope' is not a profile of this role", "Known profiles:"]),
    ("tp size 0", {"sglang_server_args": {"tp-size": 0}},
     ["tp-size: 0 is not a tensor-parallel size", "set tp-size to 1 or more"]),
    ("tp size above the GPUs", {"sglang_nvidia_smi": NVLINK_SMI, "sglang_server_args": {"tp-size": 4}},
     ["tp-size: 4 needs 4 GPUs and this host shows 2", "lower tp-size"]),
    ("model directory missing", {"sglang_model_path": "/srv/models/absent"},
     ["sglang_model_path: '/srv/models/absent' is not a directory on this host"]),
    ("model without config.json", {"sglang_model_path": "/srv/models"},
     ["sglang_model_path: /srv/models has no config.json"]),
    ("invalid port", {"sglang_port": 70000}, ["sglang_port: 70000 is not a TCP port (1-65535)"]),
    ("port held by another process", {"sglang_port": HOG_PORT},
     ["Refused before SGLang starts: pid", "sglang-port-hog.service", f"port {HOG_PORT}",
      "another sglang_port"]),
    ("malformed sglang_expect value", {"sglang_expect": {"decode_cuda_graph": "maybe"}},
     ["sglang_expect.decode_cuda_graph: 'maybe' is not one of required, auto, off"]),
    ("unknown sglang_expect key", {"sglang_expect": {"cuda_graphs": "on"}},
     ["sglang_expect: unknown keys ['cuda_graphs']"]),
    ("contradictory speculative settings", {"sglang_server_args": {"speculative-num-draft-tokens": 6}},
     ["speculative-eagle-topk 1 with speculative-num-steps 3 needs speculative-num-draft-tokens 4, "
      "not 6: set it to 4 or drop it"]),
    ("the --config= form", {"sglang_server_args": {"--config=/etc/sglang.yaml": True}},
     ["looks like '--flag=value'; write it as a key and a value"]),
    ("config as an argument", {"sglang_server_args": {"config": "/etc/sglang.yaml"}},
     ["'config' is not an argument you set", "never '--config=PATH'"]),
    ("an argument given twice", {"sglang_server_args": {"tp_size": 2, "tp-size": 2}},
     ["name the same argument '--tp-size'; keep one"]),
    ("an argument the role owns", {"sglang_server_args": {"port": 31000}},
     ["set 'port' through the variable sglang_port"]),
    ("an API key among the arguments", {"sglang_server_args": {"api-key": "x" * 32}},
     ["set 'api-key' through the variable sglang_api_key"]),
    ("non-numeric floor", {"sglang_smoke_min_decode_tok_s": "fast"},
     ["sglang_smoke_min_decode_tok_s: 'fast' is not a number of tokens/s"]),
    ("negative ceiling", {"sglang_smoke_max_ttft_ms": -5},
     ["sglang_smoke_max_ttft_ms: -5 is not a number of milliseconds"]),
    ("API key too short", {"sglang_api_key": "short"},
     ["sglang_api_key: must be a token of 16-512 characters"]),
    ("dedicated user with the ml-env in /root",
     {"sglang_service_user": "sglang", "sglang_service_group": "sglang"},
     ["cannot enter /root", "move sglang_venv"]),
    ("a unit setting the role owns", {"sglang_service_hardening": {"User": "nobody"}},
     ["sglang_service_hardening: User is written by the role"]),
]


def snapshot(host):
    """Everything a refused deploy must leave alone on the host."""
    return host.check_output(
        "ls -la --time-style=full-iso /opt/sglang /opt/sglang/releases; readlink /opt/sglang/current; "
        "find /opt/sglang/releases -type f -exec sha256sum {} + | sort; "
        "systemctl show sglang -p MainPID -p InvocationID -p ActiveState; "
        "sha256sum /etc/systemd/system/sglang.service; "
        "ls -la --time-style=full-iso /root/ml-env/lib/python3.11/site-packages; "
        "/root/ml-env/bin/python -m pip freeze --all --disable-pip-version-check")


def inventory_digest():
    files = [ROOT / "inventory", Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "inventory"]
    digest = hashlib.sha256()
    for top in files:
        for path in sorted(p for p in top.rglob("*") if p.is_file()):
            digest.update(str(path).encode() + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def port_hog(host):
    """Another process on HOG_PORT, as a transient unit (its name shows in the refusal)."""
    host.run(f"systemd-run --unit sglang-port-hog python3 -m http.server {HOG_PORT} --bind 127.0.0.1")
    # Waits while the unit runs and does not listen yet: generous on a loaded host, over at once
    # if it exited; a hog that never listens fails here, not as a confusing test result.
    host.check_output(
        f"for i in $(seq 1 1200); do curl -s 127.0.0.1:{HOG_PORT} >/dev/null && exit 0; "
        f"systemctl -q is-active sglang-port-hog || break; sleep 0.25; done; "
        f"echo 'sglang-port-hog does not listen on {HOG_PORT} (exited, or not within 300 s)' >&2; "
        "exit 1")
    yield
    host.run("systemctl stop sglang-port-hog")


@pytest.mark.parametrize("name, extravars, expected", MATRIX, ids=[row[0] for row in MATRIX])
def test_refused_before_any_change(host, port_hog, name, extravars, expected):
    before, inventory = snapshot(host), inventory_digest()
    out = play("deploy.yml", extravars)
    assert out["status"] == "failed", name
    for fragment in expected:
        assert fragment in out["msg"], (fragment, out["msg"])
    assert out["changed"] == 0, "a refused deploy changed something"
    assert snapshot(host) == before
    assert inventory_digest() == inventory
