"""The repository is the sglang.deploy collection as it installs (issue 20): every piece of Python
that Ansible loads lives once under plugins/, the roles and playbooks name modules and filters by
FQCN (a collection role finds no short names), and the one link in collections/ lets Ansible find
the collection in the clone."""

import importlib
import importlib.util
import inspect
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT
# Every filter file of the collection, so that a new one is held to the same rules.
FILTERS = sorted(
    name for path in sorted((SOURCE / "plugins" / "filter").glob("sglang_*.py"))
    for name in importlib.import_module(
        f"ansible_collections.sglang.deploy.plugins.filter.{path.stem}").FilterModule().filters())


def test_roles_and_playbooks_name_the_filters_by_fqcn():
    # `| name`, and a name given to map(), select(), reject() and friends as a string.
    names = "|".join(map(re.escape, FILTERS))
    short = re.compile(r"\|\s*(%s)\b|\b(?:map|select|reject|selectattr|rejectattr)\(\s*"
                       r"[\"'](%s)[\"']" % (names, names))
    files = [*ROOT.glob("roles/**/*.yml"), *ROOT.glob("roles/**/*.j2"),
             *ROOT.glob("playbooks/*.yml"), ROOT / "deploy.yml"]
    found = [f"{path.relative_to(ROOT)}:{n}: {m.group(1)}"
             for path in files for n, line in enumerate(path.read_text().splitlines(), 1)
             for m in short.finditer(line)]
    assert len(FILTERS) > 30 and not found, found
    assert short.search("x | map('sglang_router_worker_url', hostvars)")  # the check can fail


def test_every_filter_the_roles_and_playbooks_call_exists():
    """The router role called sglang.deploy.sglang_unit_check, a function the collection did
    not register as a filter: only the installed collection's test (collection-test) found it,
    40 minutes into CI."""
    fqcn = re.compile(r"(?:\|\s*|\b(?:map|select|reject)\(\s*[\"'])sglang\.deploy\.(sglang_\w+)")
    files = [*ROOT.glob("roles/**/*.yml"), *ROOT.glob("roles/**/*.j2"),
             *ROOT.glob("playbooks/*.yml"), ROOT / "deploy.yml", *ROOT.glob("molecule/**/*.yml")]
    unknown = sorted({f"{path.relative_to(ROOT)}: {m.group(1)}" for path in files
                      for m in fqcn.finditer(path.read_text()) if m.group(1) not in FILTERS})
    assert not unknown, unknown
    assert fqcn.search("x | sglang.deploy.sglang_gone") and "sglang_unit_check" in FILTERS


def test_no_short_name_shim():
    """Filters are found by FQCN only, here as for a consumer of the installed collection: no
    filter_plugins/ re-export, no setting that loads one."""
    assert not (ROOT / "filter_plugins").exists()
    settings = [ROOT / "ansible.cfg", ROOT / ".config" / "molecule" / "config.yml",
                *ROOT.glob("molecule/*/molecule.yml"), ROOT / "Makefile", *ROOT.glob("tests/**/*.py")]
    found = [str(p.relative_to(ROOT)) for p in settings
             if re.search(r"filter_plugins\s*=|ANSIBLE_FILTER_PLUGINS", p.read_text())
             and p.name != "test_collection_layout.py"]
    assert not found, found


def test_python_that_ansible_loads_lives_under_plugins_only():
    """Roles hold YAML, templates, files (deployed to hosts) and profiles; no role plugin dirs,
    no library path, no copy at build time."""
    plugin_dirs = {"library", "action_plugins", "filter_plugins", "module_utils", "lookup_plugins"}
    found = [str(p.relative_to(ROOT)) for p in ROOT.glob("roles/*/*") if p.name in plugin_dirs]
    python = [str(p.relative_to(ROOT)) for p in ROOT.glob("roles/**/*.py")
              if p.parent.name != "files"]
    assert not found and not python, found + python
    assert "library" not in (ROOT / "ansible.cfg").read_text()
    mentions = [str(p.relative_to(ROOT)) for p in [*ROOT.glob("molecule/**/*.yml"),
                                                    ROOT / "Makefile", *ROOT.glob("scripts/*.*")]
                if "ANSIBLE_LIBRARY" in p.read_text() and p.name != "test-collection.sh"]
    assert not mentions, mentions


def test_the_one_link_finds_the_repository_as_the_collection():
    link = ROOT / "collections" / "ansible_collections" / "sglang" / "deploy"
    assert link.is_symlink() and link.resolve() == ROOT
    python = [p for top in ("plugins", "roles") for p in (ROOT / top).rglob("*.py")]
    edits = [str(p.relative_to(ROOT)) for p in python if "sys.path" in p.read_text()]
    assert python and not edits, edits


def test_roles_and_playbooks_call_the_modules_by_fqcn():
    modules = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("sglang_*.py"))
    short = re.compile(r"^\s+(?:- )?(%s):|module:\s*(%s)\b" % (("|".join(modules),) * 2))
    files = [*ROOT.glob("roles/*/tasks/**/*.yml"), *ROOT.glob("playbooks/*.yml"),
             *ROOT.glob("molecule/*/*.yml")]
    found = [f"{path.relative_to(ROOT)}:{n}" for path in files
             for n, line in enumerate(path.read_text().splitlines(), 1) if short.search(line)]
    assert len(modules) > 10 and not found, found


def _build_collection():
    spec = importlib.util.spec_from_file_location("filter_docs", ROOT / "scripts" / "filter_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_filter_is_documented_from_its_docstring_and_signature():
    build = _build_collection()
    found = build.filters()
    assert set(FILTERS) <= set(found)
    for name, function in found.items():
        doc = build.filter_doc(name, function, "sglang.deploy")
        documentation = doc["DOCUMENTATION"]
        params = [p.name for p in inspect.signature(function).parameters.values()]
        assert list(documentation["options"]) == ["_input", *params[1:]], name
        assert documentation["positional"] == ", ".join(["_input", *params[1:]]), name
        assert documentation["short_description"] and documentation["description"], name
        assert f"sglang.deploy.{name}" in doc["EXAMPLES"], name
        yaml.safe_load(doc["EXAMPLES"])  # comments only: valid YAML


def test_a_filter_without_a_docstring_is_refused_at_build_time():
    def sglang_undocumented(value, other=1):
        return value

    with pytest.raises(SystemExit, match="sglang_undocumented has no docstring"):
        _build_collection().filter_doc("sglang_undocumented", sglang_undocumented, "sglang.deploy")


def test_a_filter_says_what_each_argument_is():
    """Its Args: section becomes each option's description; a docstring that leaves an argument
    out is refused, naming it."""
    build = _build_collection()

    def sglang_example(value, floor):
        """What it does.

        Args:
            value: the release's figures.
            floor: the lowest tok/s per user,
                at the first level.
        """

    doc = build.filter_doc("sglang_example", sglang_example, "sglang.deploy")["DOCUMENTATION"]
    assert doc["description"] == ["What it does."]
    assert doc["options"]["floor"]["description"] == "the lowest tok/s per user, at the first level."
    assert doc["options"]["_input"]["description"].endswith(": the release's figures.")

    def sglang_unsaid(value, floor, cap=None):
        """What it does.

        Args:
            value: the release's figures.
            floor: the lowest tok/s per user.
        """

    with pytest.raises(SystemExit, match="sglang_unsaid: its docstring's Args: section must say what cap is"):
        build.filter_doc("sglang_unsaid", sglang_unsaid, "sglang.deploy")


def test_the_committed_filter_docs_are_the_ones_the_docstrings_give():
    stale = [path.name for path, text in _build_collection().rendered().items()
             if not path.exists() or path.read_text(encoding="utf-8") != text]
    assert not stale, f"run python scripts/filter_docs.py: {stale}"


# A module's deadline and the role default the role passes it: one value (issue 56, part 2:
# sglang_ready's 1800 against the role's 7200 were two rules for one deadline).
DEADLINES = {("sglang_ready", "timeout"): "sglang_ready_timeout",
             ("sglang_lock", "stale_after"): "sglang_lock_stale_after",
             ("sglang_free", "timeout"): "sglang_free_timeout",
             ("sglang_resolve", "timeout"): "sglang_preflight_resolve_timeout"}


@pytest.mark.parametrize("module, option", sorted(DEADLINES))
def test_each_deadline_has_one_default(module, option):
    import ast

    source = (SOURCE / "plugins" / "modules" / f"{module}.py").read_text()
    doc = next(node.value.value for node in ast.parse(source).body
               if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DOCUMENTATION")
    role = ROOT / "roles" / "sglang"
    variable = DEADLINES[(module, option)]
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    spec_defaults = {o[variable]["default"] for entry in spec.values()
                     for o in [entry.get("options", {})] if variable in o}
    defaults = {yaml.safe_load(doc)["options"][option]["default"],
                yaml.safe_load((role / "defaults" / "main.yml").read_text())[variable],
                *spec_defaults}
    assert len(defaults) == 1, f"{module}'s {option} and {variable}: {sorted(defaults)}"
