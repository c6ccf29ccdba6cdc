"""What keeps the repository usable as the sglang.deploy collection (issue 14): the roles name
the filters by FQCN (a collection role does not find short filter names), shared code lives
once (no symlinks, no sys.path edits) and every molecule scenario finds the collection source."""

import importlib
import importlib.util
import inspect
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "collections" / "ansible_collections" / "sglang" / "deploy"
# Every filter file of the collection, so that a new one is held to the same rules.
FILTERS = sorted(
    name for path in sorted((SOURCE / "plugins" / "filter").glob("sglang_*.py"))
    for name in importlib.import_module(
        f"ansible_collections.sglang.deploy.plugins.filter.{path.stem}").FilterModule().filters())


def test_roles_and_playbooks_name_the_filters_by_fqcn():
    short = re.compile(r"\|\s*(%s)\b" % "|".join(map(re.escape, FILTERS)))
    files = [*ROOT.glob("roles/**/*.yml"), *ROOT.glob("roles/**/*.j2"),
             *ROOT.glob("playbooks/*.yml"), ROOT / "deploy.yml"]
    found = [f"{path.relative_to(ROOT)}:{n}: {m.group(1)}"
             for path in files for n, line in enumerate(path.read_text().splitlines(), 1)
             for m in short.finditer(line)]
    assert len(FILTERS) > 30 and not found, found


def test_the_short_name_file_re_exports_every_filter():
    """filter_plugins/sglang.py, loaded as Ansible loads it (from its path)."""
    spec = importlib.util.spec_from_file_location("short_names", ROOT / "filter_plugins" / "sglang.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert sorted(module.FilterModule().filters()) == FILTERS


def test_shared_code_lives_once():
    tree = [ROOT / "roles", ROOT / "filter_plugins", SOURCE]
    links = [str(p) for top in tree for p in top.rglob("*") if p.is_symlink()]
    assert not links, links
    python = [p for top in tree for p in top.rglob("*.py")]
    edits = [str(p.relative_to(ROOT)) for p in python if "sys.path" in p.read_text()]
    assert python and not edits, edits


def test_every_molecule_scenario_finds_the_collection_source():
    for path in ROOT.glob("molecule/*/molecule.yml"):
        env = yaml.safe_load(path.read_text())["provisioner"]["env"]
        assert env.get("ANSIBLE_COLLECTIONS_PATH") == "${MOLECULE_PROJECT_DIRECTORY}/collections", path
        assert "roles/sglang/library" in env.get("ANSIBLE_LIBRARY", ""), path


def _build_collection():
    spec = importlib.util.spec_from_file_location("build_collection", ROOT / "scripts" / "build_collection.py")
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
