"""The collection's Python imports one way (issue 20): no import cycle among plugins/**/*.py,
and no file reaches into another for a private (underscored) name; what several files share
lives in module_utils (modules) or plugin_utils (filters, action plugins).

The graph is read from the sources with `ast` (function-level imports too), not by importing."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
PREFIX = "ansible_collections.sglang.deploy."


def _module_name(path):
    return PREFIX + ".".join(path.relative_to(ROOT).with_suffix("").parts)


MODULES = {_module_name(path): path for path in sorted(PLUGINS.rglob("*.py"))}


def _imports(path):
    """[(imported plugin module, name or None), ...] of one file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if alias.name in MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PREFIX):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule in MODULES:  # from ...module_utils import sglang_probe
                    found.append((submodule, None))
                else:
                    found.append((node.module, alias.name))
    return found


def graph():
    return {name: sorted({target for target, _ in _imports(path) if target in MODULES})
            for name, path in MODULES.items()}


def cycles(edges):
    """Every cycle found by a depth-first walk, each as the list of modules around it."""
    found, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in edges.get(node, ()):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def test_the_graph_is_read():
    edges = graph()
    assert len(MODULES) > 30
    # A known edge: the filters share their error wrapper through plugin_utils.
    assert PREFIX + "plugins.plugin_utils.sglang_filter_errors" in \
        edges[PREFIX + "plugins.filter.sglang_render"]


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c", "a"]]
    assert cycles({"a": ["b"], "b": [], "c": ["a", "b"]}) == []


def test_no_import_cycle_among_plugins():
    short = [" -> ".join(n.removeprefix(PREFIX + "plugins.") for n in cycle)
             for cycle in cycles(graph())]
    assert not short, short


def test_no_plugin_imports_a_private_name_from_another():
    found = [f"{path.relative_to(ROOT)}: {name} from {target.removeprefix(PREFIX)}"
             for path in MODULES.values() for target, name in _imports(path)
             if target in MODULES and name and name.startswith("_")]
    assert not found, found


def test_filter_files_share_code_through_plugin_utils_not_each_other():
    found = [f"{path.relative_to(ROOT)} imports {target.removeprefix(PREFIX)}"
             for name, path in MODULES.items() if ".plugins.filter." in name
             for target, _ in _imports(path) if ".plugins.filter." in target]
    assert not found, found
