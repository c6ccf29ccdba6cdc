"""Issue 55, part 1: nothing reaches a root unit unvalidated. Every variable a unit template
renders (the server's unit and launch script, the drift check's unit and timer, the router's
unit) is an operator input that the one-pass input check validates before anything changes, or
a fact DERIVED names, made from such inputs; each input is tried with hostile values (a newline
that adds a unit line, a space that splits argv, a '%' systemd would expand, a relative or
unnormalised path) and refused, naming the variable."""

import jinja2
import pytest
import yaml
from jinja2 import meta
from test_sglang_input_violations import profile, violations  # noqa: F401 (a fixture)

from ansible.errors import AnsibleFilterError
from ansible_collections.sglang.deploy.plugins.filter import sglang_render as render
from support import ROLE

ROLES = ROLE.parent
SERVER_TEMPLATES = ["sglang.service.j2", "launch.sh.j2", "sglang-drift.service.j2",
                    "sglang-drift.timer.j2"]
ROUTER_TEMPLATE = ROLES / "sglang_router" / "templates" / "sglang-router.service.j2"
# What a unit renders that no operator sets as such: what it is made from (each checked).
DERIVED = {
    "ansible_managed": "Ansible's header, a comment",
    "__sglang_unit": "sglang_unit: lines from sglang_service_hardening, _read_write_paths, "
                     "_cache_dir (sglang_unit_hardening's check) and the env (sglang_env_merge)",
    "__sglang_prereqs": "the host prerequisites module's own ExecStartPre lines and env path",
    "__sglang_url": "sglang_host (sglang_server_config's check) and sglang_port (_port)",
    "__sglang_monitoring_textfile": "sglang_monitoring_textfile_dir and sglang_service_name",
    "__sglang_router_argv_rendered": "the router's argv, each word quoted by its filter",
    "__sglang_router_workers": "counted only",
    "sglang_router_api_key": "tested for being empty only (its value goes in the 0600 key file)",
}
# Checked by a check of their own (sglang_unit_hardening), not sglang_unit_check.
OWN_CHECK = {"sglang_service_hardening", "sglang_service_read_write_paths"}
NEWLINE, SPACE, SPECIFIER = "x\nExecStartPre=/bin/sh -c id", "x ExecStartPre", "x%h"
HOSTILE = {"path": [NEWLINE, "/opt/a b", "/opt/%h", "opt/rel", "/opt/../etc", "/opt/a\r"],
           "word": [NEWLINE, SPACE, SPECIFIER, ""], "count": [NEWLINE, "300 x", "%i", "0", "5min"]}


def template_variables(path):
    env = jinja2.Environment()
    env.filters.update(comment=str, quote=str)  # Ansible's, which the templates use
    return meta.find_undeclared_variables(env.parse(path.read_text(encoding="utf-8")))


def kind(name):
    if name.endswith(("_dir", "_path", "_venv")):
        return "path"
    return "count" if name.endswith(render.COUNT_SUFFIXES) else "word"


def test_every_variable_the_servers_units_render_is_checked_or_derived():
    rendered = set().union(*(template_variables(ROLE / "templates" / t) for t in SERVER_TEMPLATES))
    inputs = {name for name in rendered if name not in DERIVED}
    unchecked = inputs - set(render.UNIT_SETTINGS) - OWN_CHECK - {"inventory_hostname"}
    assert not unchecked, f"rendered into a unit, checked by nothing: {sorted(unchecked)}"
    # The role passes each to the one-pass check (inputs/render_args.yml's __sglang_inputs).
    tasks = (ROLE / "tasks" / "inputs" / "render_args.yml").read_text(encoding="utf-8")
    assert all(f"{name}: \"{{{{ {name} }}}}\"" in tasks for name in render.UNIT_SETTINGS)


@pytest.mark.parametrize("name", render.UNIT_SETTINGS)
def test_a_hostile_value_of_each_unit_variable_is_refused_before_anything_changes(name, profile):  # noqa: F811
    for value in HOSTILE[kind(name)]:
        if name == "sglang_service_cache_dir" and value == "":
            continue  # no cache directory: none is rendered
        found = violations(profile, **{name: value})["violations"]
        assert {v["variable"] for v in found} == {name}, (name, value, found)


@pytest.mark.parametrize("value", [NEWLINE, SPACE, SPECIFIER, "-x", "a;b"])
def test_a_hostile_inventory_name_is_refused_it_is_the_drift_checks_host(value, profile):  # noqa: F811
    found = violations(profile, batch=(value,), host=value, hostvars={value: {}})["violations"]
    assert "inventory_hostname" in [v["variable"] for v in found], found


@pytest.mark.parametrize("paths", [["/srv/a b"], ["/srv/x\nExecStartPre=/bin/sh"], ["srv/rel"],
                                   ["/srv/%h"]])
def test_a_hostile_writable_path_is_refused(paths, profile):  # noqa: F811
    found = violations(profile, sglang_service_read_write_paths=paths)["violations"]
    assert {v["variable"] for v in found} == {"sglang_service_read_write_paths"}, found


def test_the_good_values_still_pass(profile):  # noqa: F811
    assert violations(profile, sglang_service_limit_nofile="infinity", sglang_drain_timeout="600",
                      sglang_monitoring_drift_interval=60)["ok"]


def router_checked():
    """The mapping roles/sglang_router/tasks/inputs.yml hands sglang_unit_check."""
    tasks = yaml.safe_load((ROLES / "sglang_router" / "tasks" / "inputs.yml").read_text())
    [check] = [t["ansible.builtin.assert"]["that"] for t in tasks
               if "sglang_unit_check" in str(t.get("ansible.builtin.assert", {}).get("that"))]
    return set(__import__("re").findall(r"'(sglang_router_\w+)':", check))


def test_every_variable_the_routers_unit_renders_is_checked():
    inputs = {n for n in template_variables(ROUTER_TEMPLATE) if n not in DERIVED}
    assert inputs and inputs <= router_checked(), sorted(inputs - router_checked())
    for name in sorted(inputs):
        for value in HOSTILE[kind(name)]:
            with pytest.raises(AnsibleFilterError, match=name):
                render.sglang_unit_check({name: value})


@pytest.mark.parametrize("host", ["0.0.0.0 --url http://evil", "127.0.0.1%h", "127.0.0.1\nx"])
def test_a_hostile_listen_address_is_refused_it_is_in_the_drift_checks_url(host, profile):  # noqa: F811
    found = violations(profile, sglang_host=host)["violations"]
    assert "sglang_host" in {v["variable"] for v in found}, found
