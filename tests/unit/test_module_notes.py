"""Every module says in its documentation's notes why it is not a builtin (issue 20): fewer
round trips, a secret kept out of results, or no equivalent."""

import ast
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).resolve().parents[2] / "plugins" / "modules").glob("*.py"))


def documentation(path):
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)
    raise AssertionError(f"{path.name} has no DOCUMENTATION")


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_the_notes_say_why_it_is_not_a_builtin(path):
    notes = documentation(path).get("notes") or []
    assert any(note.startswith("Not a builtin") for note in notes), \
        f"{path.name}: add a note 'Not a builtin because ...' (fewer round trips, secrets, no equivalent)"
