"""API keys out of every answer the role keeps, the unit's sandbox, exposure."""

import json
import socket

import pytest
from ansible.errors import AnsibleFilterError
from support import load_module

import sglang_preflight as pf
import sglang_render as render
from ansible.module_utils.sglang_redact import redact, redact_env_text

server_info_module = load_module("sglang_server_info")
KEY = "sk-" + "0123456789abcdef" * 2
ADMIN = "ad-" + "fedcba9876543210" * 2


def test_server_info_answers_are_redacted_and_need_the_key(standin):
    url, _ = standin(**{"api-key": KEY, "admin-api-key": ADMIN, "tp-size": 2})
    out = server_info_module.read(url, KEY, ADMIN)
    assert out["server_info"]["api_key"] == "<redacted>"
    assert out["server_info"]["admin_api_key"] == "<redacted>"
    assert out["server_info"]["tp_size"] == 2  # the settings themselves are kept
    assert "--api-key <redacted>" in out["server_info"]["launch_command"]
    assert KEY not in json.dumps(out) and ADMIN not in json.dumps(out)
    with pytest.raises(server_info_module.HttpError, match="set sglang_api_key"):
        server_info_module.read(url, "")


def test_redact_keeps_counts_and_hides_secret_fields_and_values():
    data = {"api_key": KEY, "max_total_tokens": 100, "speculative_num_draft_tokens": 4,
            "hf_token": "x", "nested": [{"watermark_key_b": "y", "note": f"key={KEY}!"}],
            "admin_api_key": None}
    out = redact(data, [KEY])
    assert out == {"api_key": "<redacted>", "max_total_tokens": 100,
                   "speculative_num_draft_tokens": 4, "hf_token": "<redacted>",
                   "nested": [{"watermark_key_b": "<redacted>", "note": "key=<redacted>!"}],
                   "admin_api_key": None}


def test_env_file_diff_hides_secret_variables_only():
    text = 'HF_TOKEN="hf_abc"\nNCCL_P2P_LEVEL="NVL"\nMY_API_KEY="z"\n'
    assert redact_env_text(text) == 'HF_TOKEN="<redacted>"\nNCCL_P2P_LEVEL="NVL"\nMY_API_KEY="<redacted>"\n'


@pytest.mark.parametrize("api_key, admin, message", [
    ("short", "", "sglang_api_key: must be a token"),
    ("", "has space in it and is long", "sglang_admin_api_key: must be a token"),
    (KEY + "\n", "", "sglang_api_key"),
    (KEY, KEY, "equals sglang_api_key"),
])
def test_bad_keys_are_refused_without_quoting_them(api_key, admin, message):
    with pytest.raises(AnsibleFilterError, match=message) as err:
        render.sglang_secrets_json(api_key, admin)
    assert (api_key.strip() or "§") not in str(err.value) and (admin or "§") not in str(err.value)


def test_secrets_json_holds_only_the_given_keys():
    assert json.loads(render.sglang_secrets_json(KEY, "")) == {"api-key": KEY}
    assert json.loads(render.sglang_secrets_json("", "")) == {}


@pytest.mark.parametrize("name", ["api-key", "api_key", "admin-api-key"])
def test_keys_in_server_args_are_refused(name):
    profile = {"model": {"path": "/m"}, "args": {}}
    with pytest.raises(AnsibleFilterError, match="sglang_(admin_)?api_key"):
        render.sglang_server_config(profile, {name: KEY})


def test_hardening_lines_and_derived_protect_home():
    lines = render.sglang_unit_hardening({"NoNewPrivileges": True, "PrivateTmp": True,
                                          "ProtectSystem": "strict", "MemoryDenyWriteExecute": None},
                                         ["/opt/ml-env", "/srv/models/x", "/opt/sglang"],
                                         "/opt/sglang/cache", ["/data/hf"])
    assert lines[:3] == ["NoNewPrivileges=yes", "PrivateTmp=yes", "ProtectSystem=strict"]
    assert "ProtectHome=yes" in lines
    assert "ReadWritePaths=/opt/sglang/cache /data/hf" in lines
    assert "Environment=TRITON_HOME=/opt/sglang/cache" in lines
    assert not any(line.startswith("MemoryDenyWriteExecute") for line in lines)
    under_root = render.sglang_unit_hardening({"PrivateTmp": True}, ["/root/ml-env"], "/c")
    assert "ProtectHome=read-only" in under_root
    assert render.sglang_unit_hardening({}, ["/root/ml-env"], "/c") == []


@pytest.mark.parametrize("hardening, message", [
    ({"User": "nobody"}, "written by the role"),
    ({"ReadWritePaths": "/x"}, "sglang_service_read_write_paths"),
    ({"not a key": True}, "not a systemd setting"),
    ({"ProtectSystem": "strict\nExecStartPre=/bin/sh"}, "single-line"),
    ([], "mapping"),
])
def test_bad_hardening_is_refused(hardening, message):
    with pytest.raises(AnsibleFilterError, match=message):
        render.sglang_unit_hardening(hardening, [], "/c")


@pytest.mark.parametrize("host, key, status", [
    ("127.0.0.1", False, "ok"), ("localhost", False, "ok"), ("::1", False, "ok"),
    ("0.0.0.0", False, "warn"), ("10.0.0.5", False, "warn"), ("0.0.0.0", True, "ok"),
])
def test_exposure_row(host, key, status):
    facts = {"sglang_version": "0.5.23", "gpus": {"present": False, "reason": "none"},
             "model": {}, "piecewise_blacklist": {}}
    verdict = pf.sglang_preflight(facts, {"host": host, "model-path": "/m"}, {}, {}, False,
                                  None, key)
    row = [r for r in verdict["rows"] if r["name"] == "exposure"][0]
    assert row["status"] == status
    if status == "warn":
        assert "sglang_api_key" in row["evidence"]
        strict = pf.sglang_preflight(facts, {"host": host, "model-path": "/m"}, {}, {}, True,
                                     None, key)
        assert not strict["ok"] and any("exposure" in f for f in strict["failures"])


def test_port_facts_find_the_listening_process():
    facts = load_module("sglang_facts")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        out = facts.port_facts(port)
        assert out["listening"] is True
        assert [h["pid"] for h in out["holders"]] == [__import__("os").getpid()]
    assert facts.port_facts(port)["listening"] is False
