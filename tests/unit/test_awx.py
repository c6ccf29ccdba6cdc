"""What AWX / Automation Controller runs (docs/awx.md): the execution environment's definition
holds the collection galaxy.yml builds, pins what requirements.txt pins, and carries exactly the
Python the controller side imports; each job template's survey asks options that exist, with
their types and the role's defaults, and never a key. `make ee` runs ansible-builder itself."""

import ast
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EE = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
VERSION = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
PINS = dict(re.findall(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)",
                       (ROOT / "requirements.txt").read_text(), re.M))
# What ansible-core brings with it: no need of its own in the image.
WITH_CORE = {"ansible", "ansible_collections", "yaml", "jinja2"}
# Import name -> distribution, where they differ.
DISTRIBUTIONS = {"yaml": "pyyaml"}


def test_the_image_installs_the_collection_galaxy_yml_builds():
    tarball = f"sglang-deploy-{VERSION}.tar.gz"
    assert EE["version"] == 3
    assert EE["dependencies"]["galaxy"]["collections"] == [
        {"name": f"collections/{tarball}", "type": "file"}]
    assert EE["additional_build_files"] == [{"src": f"dist/{tarball}", "dest": "collections"}]


def test_the_image_pins_what_requirements_txt_pins():
    deps = EE["dependencies"]
    for name in ("ansible_core", "ansible_runner"):
        dist, version = deps[name]["package_pip"].split("==")
        assert PINS[dist] == version, (name, PINS.get(dist), version)
    for line in deps["python"]:
        dist, _, version = line.partition("==")
        assert version and PINS.get(dist) == version, line


def _imports(path):
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names)


def _tasks(items):
    for item in items or []:
        if isinstance(item, dict):
            yield item
            for key in ("block", "rescue", "always"):
                yield from _tasks(item.get(key))


def controller_modules():
    """The collection's modules the roles run on the controller (delegate_to: localhost)."""
    found = set()
    for path in ROOT.glob("roles/*/tasks/**/*.yml"):
        for task in _tasks(yaml.safe_load(path.read_text())):
            if task.get("delegate_to") == "localhost":
                found |= {k.split(".")[-1] for k in task if k.startswith("sglang.deploy.")}
    return found


def controller_imports():
    """Non-stdlib imports of what runs in the image: filters, action plugins, their shared
    code, and the modules delegated to localhost."""
    files = [*ROOT.glob("plugins/filter/*.py"), *ROOT.glob("plugins/action/*.py"),
             *ROOT.glob("plugins/plugin_utils/*.py"),
             *(ROOT / "plugins/modules" / f"{m}.py" for m in controller_modules())]
    return set().union(*map(_imports, files)) - WITH_CORE


def test_the_image_carries_exactly_the_python_the_controller_side_imports():
    assert "sglang_tune_chart" in controller_modules()
    needed = {DISTRIBUTIONS.get(name, name).lower() for name in controller_imports()}
    pinned = {line.split("==")[0].lower() for line in EE["dependencies"]["python"]}
    assert needed == pinned, (needed, pinned)


# --- the surveys ------------------------------------------------------------------------------

SPEC = yaml.safe_load((ROOT / "roles/sglang/meta/argument_specs.yml").read_text())["argument_specs"]
SECRETS = {name for entry in SPEC.values() for name, option in entry.get("options", {}).items()
           if option.get("no_log")}
TEMPLATES = {  # survey: (playbook, the entry point whose options it may ask)
    "deploy": ("playbooks/deploy.yml", "main"),
    "rollback": ("playbooks/rollback.yml", "rollback"),
    "upgrade": ("playbooks/upgrade.yml", "upgrade"),
}
# An AWX answer is a string or a number: the survey types each option type may take.
SURVEY_TYPES = {"str": {"text", "textarea", "multiplechoice"}, "path": {"text"},
                "int": {"integer"}, "float": {"float"}, "bool": {"multiplechoice"}}


def option_of(template, variable):
    """(spec type, default, choices) of what a survey asks: an option of the entry point (or of
    `main`, whose variables every entry point reads), or a play keyword's variable the playbook
    reads with `| default(...)`."""
    playbook, entry = TEMPLATES[template]
    options = {**SPEC["main"]["options"], **SPEC[entry]["options"]}
    if variable in options:
        option = options[variable]
        return option.get("type", "str"), option.get("default"), option.get("choices")
    used = re.search(rf"{variable} \| default\(([^)]*)\)", (ROOT / playbook).read_text())
    assert used, f"{variable}: no option of {entry} and not read by {playbook}"
    default = yaml.safe_load(used.group(1))
    return type(default).__name__, default, None


def question_problems(template, question):
    variable, kind = question["variable"], question["type"]
    if variable in SECRETS or kind == "password":
        return [f"{variable}: a key is a credential, never a survey answer"]
    spec_type, default, choices = option_of(template, variable)
    problems = []
    if kind not in SURVEY_TYPES.get(spec_type, ()):
        problems.append(f"{variable}: type {spec_type} cannot be asked as {kind}")
    if spec_type == "bool" and sorted(question.get("choices", [])) != ["false", "true"]:
        problems.append(f"{variable}: a bool's choices are false and true")
    if choices and sorted(question.get("choices", [])) != sorted(choices):
        problems.append(f"{variable}: choices {question.get('choices')} are not {choices}")
    if "default" in question or not question["required"]:
        # An answer outranks the inventory: the default AWX sends must be the role's own.
        wanted = str(default).lower() if spec_type == "bool" else default
        if question.get("default") != wanted:
            problems.append(
                f"{variable}: default {question.get('default')!r}, the role's {wanted!r}")
    return problems


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_each_survey_asks_options_that_exist_with_their_types_and_defaults(template):
    survey = json.loads((ROOT / f"docs/awx/survey-{template}.json").read_text())
    assert survey["name"] and survey["description"] and survey["spec"]
    for question in survey["spec"]:
        assert {"question_name", "variable", "type", "required"} <= set(question), question
        assert question_problems(template, question) == []


def test_a_key_or_a_wrong_default_in_a_survey_is_caught():
    ok = {"variable": "sglang_env_rebuild", "type": "multiplechoice", "required": True,
          "choices": ["false", "true"], "default": "false"}
    assert question_problems("deploy", ok) == []
    assert question_problems("deploy", {**ok, "default": "true"}) == [
        "sglang_env_rebuild: default 'true', the role's 'false'"]
    assert question_problems("deploy", {**ok, "variable": "sglang_api_key", "type": "text"}) == [
        "sglang_api_key: a key is a credential, never a survey answer"]
    assert question_problems("deploy", {**ok, "variable": "sglang_port", "type": "text",
                                        "default": 30000}) == [
        "sglang_port: type int cannot be asked as text"]
    with pytest.raises(AssertionError, match="no option of main"):
        question_problems("deploy", {**ok, "variable": "sglang_nonesuch"})


def test_the_docs_name_the_pinned_ansible_builder():
    pin = re.search(r"^ANSIBLE_BUILDER_VERSION=(\S+)$", (ROOT / "scripts/ee-check.sh").read_text(),
                    re.M).group(1)
    named = re.findall(r"ansible-builder-([\d.]+)/", (ROOT / "docs/awx.md").read_text())
    assert named and set(named) == {pin}, (named, pin)
