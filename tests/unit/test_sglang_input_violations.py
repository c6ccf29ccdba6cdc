"""One pass over the operator's inputs (issue 46): sglang_input_violations runs every check that
inputs/render_args.yml made one assert at a time and returns them all, each with the variable,
its value (a secret's never) and what to change."""

import json
import re

import jinja2
import pytest
import yaml

from ansible_collections.sglang.deploy.plugins.filter import sglang_render as render
from ansible_collections.sglang.deploy.plugins.filter.sglang_render import sglang_input_violations
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_workload as workloads
from support import ROLE

PROFILE_NAME = "qwen3.6-27b-tp2-mtp"
KEY = "k" * 40
COMMIT = "0123456789abcdef0123456789abcdef01234567"
NODES = ["node-a", "node-b"]


def render_args_inputs():
    """The inputs the role's assert passes the filter, by name, as the YAML writes them."""
    tasks = yaml.safe_load((ROLE / "tasks/inputs/render_args.yml").read_text(encoding="utf-8"))
    check = next(task for task in tasks[0]["block"] if "ansible.builtin.assert" in task)
    return check["vars"]["__sglang_inputs"]


def role_defaults():
    """The role's defaults for those inputs, their templates ({{ sglang_base_dir }}/cache)
    rendered as Ansible would."""
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text(encoding="utf-8"))
    env = jinja2.Environment()
    inputs = {}
    for name in render_args_inputs():
        value = defaults.get(name)
        while isinstance(value, str) and "{{" in value:
            value = env.from_string(value).render(defaults)
        inputs[name] = value
    return inputs


@pytest.fixture
def profile():
    return yaml.safe_load((ROLE / f"profiles/{PROFILE_NAME}.yml").read_text(encoding="utf-8"))


def violations(profile, profiles=(PROFILE_NAME,), args_given=None, nodes=(), batch=("h1",),
               host="h1", hostvars=None, **changed):
    inputs = {**role_defaults(), **changed}
    if isinstance(inputs["sglang_profile"], dict):  # as the role loads it: the mapping itself
        profile = inputs["sglang_profile"]
    return sglang_input_violations(inputs, profile, list(profiles), args_given,
                                   None if nodes is None else list(nodes), list(batch), host,
                                   hostvars or {name: {} for name in ["h1", *NODES]})


def test_the_role_defaults_and_the_shipped_profile_pass(profile):
    assert violations(profile) == {"ok": True, "violations": []}


def test_three_bad_inputs_at_once_are_three_messages(profile):
    out = violations(profile, sglang_port=70000, sglang_api_key="short",
                     sglang_expect={"decode_cuda_graph": "maybe"})
    assert not out["ok"]
    assert [(v["variable"], v["value"]) for v in out["violations"]] == [
        ("sglang_port", 70000),
        ("sglang_expect", {"decode_cuda_graph": "maybe"}),
        ("sglang_api_key", "<redacted>")]
    port, expect, key = out["violations"]
    assert port["fix"] == "sglang_port: 70000 is not a TCP port (1-65535)"
    assert expect["fix"].startswith("sglang_expect.decode_cuda_graph: 'maybe' is not one of "
                                    "required, auto, off")
    assert key["fix"].startswith("sglang_api_key: must be a token of 16-512 characters")
    # The line the assert prints: the variable, the value, what to change.
    assert port["text"] == "sglang_port = 70000: sglang_port: 70000 is not a TCP port (1-65535)"
    assert expect["text"].startswith('sglang_expect = {"decode_cuda_graph": "maybe"}: ')
    assert key["text"].startswith('sglang_api_key = "<redacted>": sglang_api_key: must be a token')


# One row for each kind of check folded in: (the inputs changed, the variable refused, what its
# message says). The messages are those the separate asserts printed (molecule's bad-input
# matrix and the fleet scenario match on them).
KINDS = [
    # The profile: a name of the role's, a mapping of the right shape.
    ({"sglang_profile": "qwen-nope"}, "sglang_profile",
     ["sglang_profile 'qwen-nope' is not a profile of this role", "Known profiles: " + PROFILE_NAME,
      "Add roles/sglang/profiles/<name>.yml or give sglang_profile as a mapping"]),
    ({"sglang_profile": {"model": {}}}, "sglang_profile",
     ["sglang_profile: model.path (a local directory or a hub id) is required"]),
    # The server's arguments (sglang_server_config) and its port.
    ({"sglang_server_args": {"port": 31000}}, "sglang_server_args",
     ["set 'port' through the variable sglang_port"]),
    ({"sglang_server_args": {"speculative-num-draft-tokens": 6}}, "sglang_server_args",
     ["speculative-eagle-topk 1 with speculative-num-steps 3 needs speculative-num-draft-tokens "
      "4, not 6: set it to 4 or drop it"]),
    ({"sglang_server_args": {"--config=/etc/sglang.yaml": True}}, "sglang_server_args",
     ["looks like '--flag=value'; write it as a key and a value"]),
    ({"sglang_port": "http"}, "sglang_port", ["sglang_port: 'http' is not a TCP port (1-65535)"]),
    # The environment (sglang_env_merge).
    ({"sglang_env": {"BAD NAME": "1"}}, "sglang_env",
     ["sglang_env: 'BAD NAME' is not an environment variable name"]),
    # One model over several nodes (sglang_multinode) and its rollout batch.
    ({"sglang_nccl_env": {"CUDA_HOME": "/x"}}, "sglang_nccl_env",
     ["an NCCL_*/GLOO_*/UCX_* variable; put other variables in sglang_env"]),
    ({"sglang_nodes_group": "gpus", "_nodes": NODES, "_batch": NODES}, "sglang_nodes_group",
     ["sglang_nodes_group: h1 is not in the group it names (node-a, node-b)"]),
    ({"sglang_nodes_group": "gpus", "_nodes": None}, "sglang_nodes_group",
     ["the inventory has no group 'gpus'"]),
    ({"sglang_nodes_group": "gpus", "_nodes": ["h1", "node-a"], "_batch": ["h1", "node-a"],
      "sglang_dist_init_port": 0}, "sglang_dist_init_port",
     ["sglang_dist_init_port: 0 is not a TCP port (1-65535)"]),
    ({"sglang_nodes_group": "gpus", "_nodes": ["h1", "node-a"], "_batch": ["h1"]},
     "sglang_rollout_serial",
     ["The 2 nodes of gpus serve one model and must restart together: set sglang_rollout_serial "
      "so that they share a batch (e.g. -e '{\"sglang_rollout_serial\": [2]}')."]),
    # The checkpoint fetch (sglang_fetch_plan): each variable it reads.
    ({"sglang_model_fetch": {"repo": "a/b", "revision": "main"}, "sglang_model_path": "/srv/m"},
     "sglang_model_fetch", ["sglang_model_fetch.revision 'main' is not a commit"]),
    ({"sglang_model_fetch": {"repo": "a/b", "revision": COMMIT}, "sglang_model_path": "models/m"},
     "sglang_model_path", ["must name the directory the checkpoint is fetched into"]),
    ({"sglang_model_fetch": {"repo": "a/b", "revision": COMMIT}, "sglang_model_path": "/srv/m",
      "sglang_model_revision": "v1"}, "sglang_model_revision",
     ["leave sglang_model_revision empty"]),
    # The version the profile needs.
    ({"sglang_version": "0.5.9"}, "sglang_version",
     ["sglang_version 0.5.9 is older than 0.5.15, the first release that serves this profile's "
      "model: raise sglang_version."]),
    # Where pip installs from (sglang_pip_args, and a wheelhouse with nowhere to go).
    ({"sglang_pip_wheelhouse_src": "/tmp/wheels"}, "sglang_pip_wheelhouse",
     ["sglang_pip_wheelhouse_src is set; also set sglang_pip_wheelhouse, where it is copied on "
      "the host."]),
    ({"sglang_pip_no_index": True}, "sglang_pip_no_index",
     ["sglang_pip_no_index needs sglang_pip_wheelhouse"]),
    # Expectations (sglang_expect_merge, sglang_expect_check) and smoke limits.
    ({"sglang_expect": {"cuda_graphs": "on"}}, "sglang_expect",
     ["sglang_expect: unknown keys ['cuda_graphs']"]),
    ({"sglang_smoke_min_decode_tok_s": "fast"}, "sglang_smoke_min_decode_tok_s",
     ["sglang_smoke_min_decode_tok_s: 'fast' is not a number of tokens/s"]),
    ({"sglang_smoke_max_ttft_ms": -5}, "sglang_smoke_max_ttft_ms",
     ["sglang_smoke_max_ttft_ms: -5 is not a number of milliseconds"]),
    ({"sglang_smoke_regression_tolerance": None}, "sglang_smoke_regression_tolerance",
     ["sglang_smoke_regression_tolerance: None is not a number of a fraction"]),
    # The unit (sglang_unit_hardening, sglang_unit_check) and who may read what it names.
    ({"sglang_service_hardening": {"User": "nobody"}}, "sglang_service_hardening",
     ["sglang_service_hardening: User is written by the role"]),
    ({"sglang_service_read_write_paths": ["data"]}, "sglang_service_read_write_paths",
     ["sglang_service_read_write_paths: 'data' must be a normalised absolute path"]),
    ({"sglang_service_name": "sglang\nExecStartPre=/bin/sh"}, "sglang_service_name",
     ["sglang_service_name: holds the control character '\\n'"]),
    ({"sglang_base_dir": "opt/sglang"}, "sglang_base_dir",
     ["sglang_base_dir: 'opt/sglang' must be a normalised absolute path"]),
    ({"sglang_service_user": "sglang", "sglang_service_group": "sglang"}, "sglang_service_user",
     ["sglang_service_user sglang cannot enter /root, where /root/ml-env live: move sglang_venv",
      "or run as root."]),
    # The keys (sglang_secrets_json), alone and together.
    ({"sglang_admin_api_key": "short"}, "sglang_admin_api_key",
     ["sglang_admin_api_key: must be a token of 16-512 characters"]),
    ({"sglang_api_key": KEY, "sglang_admin_api_key": KEY}, "sglang_admin_api_key",
     ["sglang_admin_api_key: equals sglang_api_key, which makes every client an admin"]),
]


@pytest.mark.parametrize("changed, variable, words", KINDS,
                         ids=[f"{row[1]}-{i}" for i, row in enumerate(KINDS)])
def test_each_kind_of_check_names_its_variable_and_what_to_change(profile, changed, variable,
                                                                  words):
    changed = dict(changed)
    nodes, batch = changed.pop("_nodes", ()), changed.pop("_batch", ["h1"])
    out = violations(profile, nodes=nodes, batch=batch, **changed)
    assert [v["variable"] for v in out["violations"]] == [variable], out
    found = out["violations"][0]
    for word in words:
        assert word in found["fix"], (word, found["fix"])
    assert found["text"].startswith(f"{variable} = ") and found["text"].endswith(found["fix"])


def test_a_bad_profile_still_lets_the_operators_own_variables_be_checked(profile):
    out = violations(None, sglang_profile="qwen-nope", sglang_env={"BAD NAME": "1"},
                     sglang_server_args={"port": 1}, sglang_expect={"tp_size": 0})
    assert [v["variable"] for v in out["violations"]] == [
        "sglang_profile", "sglang_server_args", "sglang_env", "sglang_expect"]


def test_a_profiles_own_smoke_figure_is_checked_under_the_variable_that_overrides_it(profile):
    profile["smoke"] = {"max_ttft_ms": "slow"}
    out = violations(profile)
    assert [(v["variable"], v["value"]) for v in out["violations"]] == [
        ("sglang_smoke_max_ttft_ms", "slow")]


def test_arguments_the_caller_gives_are_not_rendered_again(profile):
    """A tuner's candidate or an upgrade's serving release: sglang_server_args is not what
    the server runs, so it is not refused; the given model path is the one judged."""
    given = {"model-path": "/root/models/m", "tp-size": 2}
    out = violations(profile, args_given=given, sglang_server_args={"port": 1},
                     sglang_service_user="sglang", sglang_service_group="sglang",
                     sglang_venv="/opt/ml-env")
    assert [v["variable"] for v in out["violations"]] == ["sglang_service_user"]
    assert "/root/models/m" in out["violations"][0]["fix"]


SECRETS = ["sk-" + "s" * 29 + "\n", "hf_" + "t" * 20, "S3cr3t-" + "p" * 12, "x" * 33]


def test_a_secrets_value_never_shows_in_a_violation(profile):
    api, hf_token, password, admin = SECRETS
    out = violations(
        profile,
        sglang_api_key=api,  # refused: a trailing newline
        sglang_admin_api_key=admin,
        sglang_env={"HF_TOKEN": hf_token + "\n", "DB_PASSWORD": password, "BAD NAME": "1"},
        sglang_server_args={"api-key": admin},
        # A key pasted into the wrong variable: its message quotes the value.
        sglang_smoke_max_ttft_ms=admin,
        sglang_profile={"model": {"path": "/srv/m"}, "env": {"OPENAI_API_KEY": hf_token},
                        "tune": "not a mapping?", "bogus": 1})
    variables = [v["variable"] for v in out["violations"]]
    assert {"sglang_api_key", "sglang_env", "sglang_server_args", "sglang_smoke_max_ttft_ms",
            "sglang_profile"} <= set(variables), variables
    shown = json.dumps(out)
    for secret in SECRETS + [hf_token + "\n"]:
        for form in (secret, secret.strip(), repr(secret)[1:-1], json.dumps(secret)[1:-1]):
            assert form not in shown, (form, shown)
    assert "<redacted>" in shown
    smoke = next(v for v in out["violations"] if v["variable"] == "sglang_smoke_max_ttft_ms")
    assert smoke["value"] == "<redacted>" and "<redacted>" in smoke["fix"]


@pytest.mark.parametrize("name, secret", [
    ("sglang_api_key", True), ("HF_TOKEN", True), ("api-key", True), ("AWS_SECRET_ACCESS_KEY", True),
    ("DB_PASSWORD", True), ("HFTOKEN", True),
    ("speculative-num-draft-tokens", False), ("tokenizer-path", False), ("tp-size", False)])
def test_what_counts_as_a_secret_by_its_name(name, secret):
    assert (render._redacted({name: "value"}) == {name: "<redacted>"}) is secret


def test_the_role_passes_every_input_the_filter_reads():
    """A name the filter reads that the role's assert does not pass would be checked as unset."""
    source = (ROLE.parents[1] / "plugins/filter/sglang_render.py").read_text(encoding="utf-8")
    read = set(re.findall(r"inputs\.get\(\"(\w+)\"\)", source)) | set(render.UNIT_SETTINGS)
    passed = set(render_args_inputs())
    assert read <= passed, sorted(read - passed)
    assert not [name for name in passed if not name.startswith("sglang_")], passed


def test_inputs_that_are_not_a_mapping_are_a_programming_error():
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="mapping of variable names"):
        sglang_input_violations(["sglang_port"])


def test_a_workload_the_proof_cannot_measure_is_refused_before_the_restart(profile):
    """The proof reads sglang_workload over the profile's workload after the restart: a bad one
    is refused here, with the rest, not by the proof (an automatic rollback) after it."""
    found = violations(profile, sglang_workload={"output_len": 0, "datset": "random-ids"},
                       sglang_workload_slo={"ttft_p99_ms": -1},
                       sglang_workload_levels=[1, "many"])
    texts = {v["variable"]: v["fix"] for v in found["violations"]}
    assert set(texts) == {"sglang_workload", "sglang_workload_slo", "sglang_workload_levels"}
    assert "output_len 0: a whole number of at least 1" in texts["sglang_workload"]
    assert "unknown keys datset" in texts["sglang_workload"]
    assert texts["sglang_workload"].endswith("(over the profile's workload)")
    assert "slo ttft_p99_ms -1: a number above 0" in texts["sglang_workload_slo"]
    bad_profile = dict(profile, workload={"input_len": "long"})
    found = violations(bad_profile)["violations"]
    assert [v["variable"] for v in found] == ["sglang_workload"]
    assert "input_len 'long'" in found[0]["fix"]


def test_the_reference_profile_proves_at_a_chat_workload(profile):
    """A chat on a thinking model (the profile says where its lengths come from), measured by
    SGLang's random-ids: prompts that miss the prefix cache."""
    w = workloads.check(profile["workload"])
    assert w["dataset"] == "random-ids" and w["output_len"] >= 512 and w["input_len"] > 1024
    assert "sgl-project/sglang" in (ROLE / f"profiles/{PROFILE_NAME}.yml").read_text(encoding="utf-8")
