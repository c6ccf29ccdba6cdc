"""What a deploy must leave on the host: checked on the molecule instance with testinfra."""

import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
from support.runner import api  # noqa: E402

BASE = "/opt/sglang"
VENV = "/opt/ml-env"
RELEASE_ID = re.compile(r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}$")


def _json(host, cmd):
    out = host.check_output(cmd)
    return json.loads(out)


def _current(host):
    link = host.file(f"{BASE}/current")
    assert link.is_symlink
    target = link.linked_to
    assert target.startswith(f"{BASE}/releases/")
    return target.rsplit("/", 1)[1]


def test_unit_enabled_and_running(host):
    svc = host.service("sglang")
    assert svc.is_enabled
    assert svc.is_running
    unit = host.file("/etc/systemd/system/sglang.service").content_string
    assert f"ExecStart={BASE}/current/launch" in unit
    assert "Restart=on-failure" in unit
    assert "LimitNOFILE=65535" in unit
    assert "User=sglang" in unit and "NoNewPrivileges=yes" in unit and "ProtectHome=yes" in unit


def test_current_points_at_a_good_release(host):
    release = _current(host)
    assert RELEASE_ID.match(release), release
    manifest = _json(host, f"cat {BASE}/current/manifest.json")
    assert manifest["id"] == release
    assert manifest["status"] == "good"
    assert manifest["sglang_version"] == "0.5.23"
    assert manifest["launch_module"] == "sglang_standin"
    assert manifest["model"]["path"] == "/srv/models/Qwen3.6-27B"
    assert manifest["args_hash"].startswith(release.rsplit("-", 1)[1])
    for name in ("config.yaml", "sglang.env", "launch"):
        digest = host.check_output(f"sha256sum {BASE}/current/{name}").split()[0]
        assert digest == manifest["files"][name], name


def test_a_rerun_added_no_release(host):
    # converge + idempotence ran the deploy twice: still exactly one release.
    releases = host.check_output(f"ls -1 {BASE}/releases").split()
    assert releases == [_current(host)]


def test_release_files_and_modes(host):
    env = host.file(f"{BASE}/current/sglang.env")
    assert env.mode == 0o600
    assert 'CUDA_VISIBLE_DEVICES="0,1"' in env.content_string
    assert host.file(f"{BASE}/current/launch").mode == 0o755
    config = host.file(f"{BASE}/current/config.yaml").content_string
    for line in ("tp-size: 2", "speculative-algorithm: NEXTN", "speculative-num-steps: 3",
                 "speculative-eagle-topk: 1", "speculative-num-draft-tokens: 4",
                 "enable-metrics: true", "port: 30000"):
        assert line in config, line


def test_process_runs_the_current_release_with_config_flag(host):
    release = _current(host)
    pid = host.check_output("systemctl show sglang -p MainPID --value")
    argv = host.file(f"/proc/{pid}/cmdline").content.split(b"\0")
    # The main process is the launcher (the release's launch.py) with the release's command.
    assert argv[1] == f"{BASE}/releases/{release}/launch.py".encode()
    assert b"--config" in argv
    assert argv[argv.index(b"--config") + 1] == f"{BASE}/releases/{release}/config.yaml".encode()


def test_pinned_sglang_is_installed_in_the_ml_env(host):
    version = host.check_output(
        f"{VENV}/bin/python -c 'import importlib.metadata as m; print(m.version(\"sglang\"))'"
    )
    assert version == "0.5.23"
    assert host.file(f"{VENV}/lib/python3.11/site-packages/sglang/srt/server_args.py").exists


def test_a_completion_is_served(host):
    answer = json.loads(api(host.backend.get_hostname(), "/v1/completions",
                            {"model": "qwen3.6-27b", "prompt": "Hello", "max_tokens": 12}))
    assert answer["usage"]["completion_tokens"] == 12
    assert answer["choices"][0]["text"].strip()


def test_a_streamed_chat_reports_usage(host):
    body = {"model": "qwen3.6-27b", "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 10, "stream": True, "stream_options": {"include_usage": True}}
    out = api(host.backend.get_hostname(), "/v1/chat/completions", body, stream=True)
    events = [line[len("data: "):] for line in out.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    usage = [json.loads(e)["usage"] for e in events[:-1] if json.loads(e).get("usage")]
    assert usage and usage[-1]["completion_tokens"] == 10


def test_server_info_reports_the_profile(host):
    info = json.loads(api(host.backend.get_hostname(), "/server_info"))
    assert info["tp_size"] == 2
    assert info["speculative_algorithm"] == "EAGLE"
    assert info["speculative_num_draft_tokens"] == 4
    assert info["cuda_graph_config"]["decode"]["backend"] == "full"
