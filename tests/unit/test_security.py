"""API keys out of every answer the role keeps, the unit's sandbox, exposure."""

import json
import os
import re
import socket

import pytest
from ansible.errors import AnsibleFilterError
from support import ROOT, load_module
from support.role_yaml import strings, tasks_of

from ansible_collections.sglang.deploy.plugins.filter import sglang_preflight as pf
from ansible_collections.sglang.deploy.plugins.filter import sglang_render as render
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_holders
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_http import HttpError
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_redact import redact, redact_env_text
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_server import read as read_server

KEY = "sk-" + "0123456789abcdef" * 2
ADMIN = "ad-" + "fedcba9876543210" * 2


def test_server_info_answers_are_redacted_and_need_the_key(standin):
    url, _ = standin(**{"api-key": KEY, "admin-api-key": ADMIN, "tp-size": 2})
    out = read_server(url, KEY, ADMIN)
    assert out["server_info"]["api_key"] == "<redacted>"
    assert out["server_info"]["admin_api_key"] == "<redacted>"
    assert out["server_info"]["tp_size"] == 2  # the settings themselves are kept
    assert "--api-key <redacted>" in out["server_info"]["launch_command"]
    assert KEY not in json.dumps(out) and ADMIN not in json.dumps(out)
    with pytest.raises(HttpError, match="set sglang_api_key"):
        read_server(url, "")


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


def test_port_holders_find_the_listening_process():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        out = sglang_holders.port_holders(port)
        assert out["listening"] is True
        assert [h["pid"] for h in out["holders"]] == [os.getpid()]
    assert sglang_holders.port_holders(port)["listening"] is False


# --- issue 13: one validator for what lands in a unit or env file ---------------------------

CONTROLS = ["\r", "\0", "\n", "\t", "\x1b", "\x85", "\u2028"]


@pytest.mark.parametrize("char", CONTROLS, ids=repr)
def test_hardening_values_with_any_control_character_are_refused(char):
    """Before: only \\n was refused; `strict\\rExecStartPre=...` became its own unit line."""
    with pytest.raises(AnsibleFilterError, match="control character"):
        render.sglang_unit_hardening({"ProtectSystem": f"strict{char}ExecStartPre=/bin/sh"}, [], "/c")


@pytest.mark.parametrize("key", ["ProtectSystem\n", "Protect\rSystem", "ProtectSystem\0"], ids=repr)
def test_unit_keys_with_a_trailing_newline_are_refused(key):
    """Before: UNIT_KEY.match accepted 'ProtectSystem\\n' ($ matches before a final newline)."""
    with pytest.raises(AnsibleFilterError, match="not a systemd setting name"):
        render.sglang_unit_hardening({key: "strict"}, [], "/c")


@pytest.mark.parametrize("name", ["FOO\n", "FOO\nBAR", "FO\0O"], ids=repr)
def test_env_names_with_a_trailing_newline_are_refused(name):
    """Before: ENV_NAME.match accepted 'FOO\\n'."""
    profile = {"model": {"path": "/m"}}
    with pytest.raises(AnsibleFilterError, match="not an environment variable name"):
        render.sglang_env_merge(profile, {name: "1"})
    with pytest.raises(AnsibleFilterError, match="not an environment variable name"):
        render.env_file({name: "1"})


@pytest.mark.parametrize("char", CONTROLS, ids=repr)
def test_env_values_with_any_control_character_are_refused_without_quoting_them(char):
    """Before: \\0 and \\x85 passed; only \\n and \\r were refused."""
    profile = {"model": {"path": "/m"}}
    with pytest.raises(AnsibleFilterError, match="control character") as err:
        render.sglang_env_merge(profile, {"HF_TOKEN": f"hf_s3cretvalue{char}X=1"})
    assert "s3cretvalue" not in str(err.value)
    with pytest.raises(AnsibleFilterError, match="control character"):
        render.sglang_multinode(["a"], "a", {}, 50000, {"NCCL_DEBUG": f"INFO{char}"})


@pytest.mark.parametrize("variable, value, message", [
    ("sglang_service_group", "root\nExecStartPre=/bin/sh", "control character"),
    ("sglang_service_user", "root\r", "control character"),
    ("sglang_service_group", "Root Group", "not a user or group name"),
    ("sglang_base_dir", "/opt/sglang\nExecStartPre=/bin/sh", "control character"),
    ("sglang_base_dir", "/opt/sglang\0", "control character"),
    ("sglang_base_dir", "opt/sglang", "absolute path"),
    ("sglang_base_dir", "/opt/%h", "absolute path"),
    ("sglang_base_dir", "/opt/../etc", "absolute path"),
    ("sglang_base_dir", "/opt/a b", "absolute path"),
    ("sglang_service_name", "sglang\nx", "control character"),
    ("sglang_service_name", "sg/lang", "not a systemd unit name"),
    ("sglang_service_timeout_stop", "120\nExecStartPre=/bin/sh", "control character"),
])
def test_unit_variables_are_validated(variable, value, message):
    """Before: sglang_service_group and sglang_base_dir were not validated at all."""
    with pytest.raises(AnsibleFilterError, match=f"{variable}: .*{message}"):
        render.sglang_unit_check({variable: value})


def test_good_unit_variables_pass():
    good = {"sglang_service_user": "sglang", "sglang_service_group": "sglang",
            "sglang_base_dir": "/opt/sglang", "sglang_venv": "/root/ml-env",
            "sglang_service_cache_dir": "", "sglang_service_name": "sglang",
            "sglang_service_limit_nofile": 65535, "sglang_launch_module": "sglang.launch_server"}
    assert render.sglang_unit_check(good) == good


# --- issue 13: the key as an object key, pieces of it, redacted before cut ------------------

SECRET = "sk-" + "Qw3rTy12" * 4


def test_a_key_used_as_an_object_key_is_redacted():
    """Before: {"<key>": ...} in /server_info printed the key whole."""
    out = redact({"clients": {SECRET: {"n": 1}}, "tokens": [SECRET + "x"]}, [SECRET])
    text = json.dumps(out)
    assert SECRET not in text and SECRET[:8] not in text
    assert out["clients"] == {"<redacted>": {"n": 1}}


@pytest.mark.parametrize("start, length", [(0, 8), (5, 12), (len(SECRET) - 8, 8), (3, 20)])
def test_any_8_character_piece_of_a_key_is_redacted(start, length):
    """Before: only the whole value was masked; an echoed half key showed."""
    from ansible_collections.sglang.deploy.plugins.module_utils.sglang_redact import excerpt, redact_text
    text = "error: bad bearer " + SECRET[start:start + length] + " end"
    out = redact_text(text, [SECRET])
    for i in range(len(SECRET) - 7):
        assert SECRET[i:i + 8] not in out
    assert out.startswith("error: bad bearer <redacted>") and out.endswith(" end")
    cut = excerpt("x" * 195 + SECRET, [SECRET], 200)
    assert SECRET[:5] not in cut and cut.endswith("x<reda...")


def test_short_runs_of_key_characters_stay():
    from ansible_collections.sglang.deploy.plugins.module_utils.sglang_redact import redact_text
    assert redact_text("max_total_tokens Qw3rTy1", [SECRET]) == "max_total_tokens Qw3rTy1"


def test_every_module_is_placed_at_its_trust_boundaries_and_each_test_class_exists():
    """docs/security.md#trust-boundaries names every module with the boundaries it crosses, and
    every test file it cites exists."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "security.md").read_text(encoding="utf-8")
    section = text.split("## Trust boundaries", 1)[1].split("\n## ", 1)[0]
    boundaries = re.findall(r"^\| \*\*(.+?)\*\* \|", section, re.M)
    placed = dict(re.findall(r"^\| `(sglang_\w+)` \| (.+) \|$", section, re.M))
    modules = sorted(p.stem for p in (root / "plugins" / "modules").glob("sglang_*.py"))
    assert sorted(placed) == modules
    for module, crossed in placed.items():
        names = [part.split(" (")[0].strip() for part in crossed.split(", ")]
        assert names and set(names) <= set(boundaries), (module, names, boundaries)
    cited = set(re.findall(r"`(test_\w+\.py)`", section))
    assert cited and all((root / "tests" / "unit" / name).exists() for name in cited), cited


def test_no_fact_that_holds_the_servers_environment_is_shown():
    """Round six: -v prints every fact a set_fact sets, and the server's environment may hold a
    hub token (sglang_env; describe.yml hides the env file for it): the render printed it twice
    (seen on the demo: HF_TOKEN's value in `ansible-playbook -v` output). Every set_fact whose
    values is that environment (an expression that starts with it: one that hands it to a
    filter, the preflight's, holds what the filter makes of it) is no_log."""
    env = re.compile(r"^\s*\{\{[\s(]*(?:__sglang_server_env|__sglang_env_given|sglang_env)\b(?!_)")
    shown = []
    for path in sorted(ROOT.glob("roles/*/tasks/**/*.yml")) + sorted(ROOT.glob("playbooks/*.yml")):
        for task, _tags in tasks_of(path):
            facts = task.get("ansible.builtin.set_fact")
            if isinstance(facts, dict) and not task.get("no_log") and any(
                    env.search(text) for text in strings(list(facts.values()))):
                shown.append(f"{path.relative_to(ROOT)}: {task.get('name')}")
    assert not shown, shown
