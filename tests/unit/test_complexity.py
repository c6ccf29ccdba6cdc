"""No function of the collection's Python above cyclomatic complexity 15 (issue 20), measured
with radon as `radon cc plugins/` does: every function, method and nested function of every
file under plugins/ (filters, modules, module_utils, plugin_utils, action plugins)."""

from pathlib import Path

import pytest
from radon.complexity import cc_visit

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "plugins").rglob("*.py"))
LIMIT = 15


def blocks(visited, prefix=""):
    """(qualified name, line, complexity) of every function, method and closure; radon lists
    methods on their own (Class.method) and scores a closure apart from its function."""
    for block in visited:
        if hasattr(block, "methods"):  # a class: its score sums its methods, listed apart
            continue
        name = f"{prefix}{block.fullname}"
        yield name, block.lineno, block.complexity
        yield from blocks(block.closures, f"{name}.")


def offenders(source):
    return [f"{name} (line {line}): {score}"
            for name, line, score in blocks(cc_visit(source)) if score > LIMIT]


def test_the_measure_names_an_offender():
    def branches(indent):
        return "".join(f"{indent}if x == {i}:\n{indent}    return {i}\n" for i in range(LIMIT))
    source = (f"class C:\n    def m(self, x):\n        def inner(x):\n{branches(' ' * 12)}"
              f"            return 0\n        return inner(x)\n\n\n"
              f"def f(x):\n{branches(' ' * 4)}    return 0\n")
    assert offenders(source) == [f"f (line {8 + 2 * LIMIT}): {LIMIT + 1}",
                                 f"C.m.inner (line 3): {LIMIT + 1}"]
    assert offenders("def g(x):\n    return x\n") == []


def test_every_plugin_file_is_measured():
    assert len(FILES) > 30 and any(p.parent.name == "filter" for p in FILES)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT / "plugins")) for p in FILES])
def test_no_function_above_the_limit(path):
    found = offenders(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)}: split these (complexity > {LIMIT}): {found}"
