"""Read facts from an installed SGLang's sources without importing it (no torch, no GPU).

Everything here parses files with `ast`: importing sglang takes seconds and needs its whole
dependency set. Findings carry `file:line` so a report can cite them.
"""

import ast
import functools
import os

LIST_NAME = "piecewise_cuda_graph_disabled_model_archs"
FUNC_NAME = "is_piecewise_cuda_graph_disabled_model"
NEEDLE = b"piecewise_cuda_graph_disabled_model"
MODEL_CONFIG = "sglang/srt/configs/model_config.py"


def find_package(venv):
    """Return (site-packages dir, sglang version) for the sglang installed in `venv`."""
    lib = os.path.join(venv, "lib")
    for pyver in sorted(os.listdir(lib)) if os.path.isdir(lib) else []:
        site = os.path.join(lib, pyver, "site-packages")
        if not os.path.isdir(os.path.join(site, "sglang")):
            continue
        for entry in os.listdir(site):
            if entry.startswith("sglang-") and entry.endswith(".dist-info"):
                return site, _metadata_version(os.path.join(site, entry, "METADATA"))
        return site, None
    return None, None


def _metadata_version(path):
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
                if not line.strip():
                    break
    except OSError:
        pass
    return None


def _rel(path, site):
    """`path` as a report cites it: relative to site-packages, with forward slashes."""
    return os.path.relpath(path, site).replace(os.sep, "/")


@functools.lru_cache(maxsize=8)
def _parse(path):
    """One parse per file: model_config.py and the reader are looked at more than once."""
    with open(path, "rb") as handle:
        return ast.parse(handle.read(), filename=path)


def _enclosing(tree):
    """Map each node to the dotted name of the function/class it sits in."""
    owner = {}

    def visit(node, name):
        for child in ast.iter_child_nodes(node):
            child_name = name
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                child_name = f"{name}.{child.name}" if name else child.name
            owner[child] = child_name
            visit(child, child_name)

    visit(tree, "")
    return owner


def blacklist_definition(site):
    """The list literal in model_config.py: (archs, line) or ([], None) when absent."""
    path = os.path.join(site, MODEL_CONFIG)
    if not os.path.exists(path):
        return [], None
    for node in _parse(path).body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == LIST_NAME for t in targets):
            if isinstance(node.value, (ast.List, ast.Tuple, ast.Set)):
                archs = [e.value for e in node.value.elts
                         if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                return archs, node.lineno
    return [], None


def _definition_nodes(tree):
    """Nodes of model_config.py that only define the list, the function and the attribute."""
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == FUNC_NAME:
            spans.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if (isinstance(target, ast.Name) and target.id == LIST_NAME) or (
                    isinstance(target, ast.Attribute) and target.attr == FUNC_NAME
                ):
                    spans.append(node)
    inside = set()
    for span in spans:
        inside.update(ast.walk(span))
    return inside


def consulted_in(site):
    """Code that reads the list, the function or the attribute outside their own definitions.

    Returns [{"where": "sglang/srt/server_args.py:1086", "in": "ServerArgs._handle_...",
    "code": "<the source line>", "file": <absolute path>, "line": 1086}] sorted by file, line.
    """
    found = []
    root = os.path.join(site, "sglang")
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            with open(path, "rb") as handle:
                raw = handle.read()
            if NEEDLE not in raw:
                continue
            rel = _rel(path, site)
            tree = _parse(path)
            skip = _definition_nodes(tree) if rel == MODEL_CONFIG else set()
            owner = _enclosing(tree)
            source = raw.decode("utf-8", errors="replace").splitlines()
            for node in ast.walk(tree):
                if node in skip:
                    continue
                ref = (isinstance(node, ast.Name) and node.id in (LIST_NAME, FUNC_NAME)) or (
                    isinstance(node, ast.Attribute) and node.attr in (LIST_NAME, FUNC_NAME))
                if ref and isinstance(getattr(node, "ctx", None), ast.Load):
                    found.append({
                        "where": f"{rel}:{node.lineno}",
                        "in": owner.get(node, ""),
                        "code": source[node.lineno - 1].strip(),
                        "file": path,
                        "line": node.lineno,
                    })
    return sorted(found, key=lambda f: (f["file"], f["line"]))


def sibling_rules(path, function, target="disable_piecewise_cuda_graph"):
    """Other `if <cond>: self.<target> = True` rules in the function that reads the list.

    SGLang puts the architecture rule beside others (speculative decoding, DP attention,
    pipeline parallelism...). Returns [{"line", "condition"}] as source text.
    """
    node = _function_node(_parse(path), function) if function else None
    if node is None:
        return []
    return [{"line": child.lineno, "condition": ast.unparse(child.test)}
            for child in ast.walk(node) if isinstance(child, ast.If)
            for stmt in child.body if _sets_true(stmt, target)]


def _function_node(tree, function):
    """The class, function or method named by the dotted `function` in `tree`, or None."""
    node = tree
    for part in function.split("."):
        node = next((c for c in ast.iter_child_nodes(node)
                     if isinstance(c, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                     and c.name == part), None)
        if node is None:
            return None
    return node


def _sets_true(stmt, target):
    """`self.<target> = True` (any object's attribute)."""
    return (isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Attribute) and t.attr == target for t in stmt.targets)
            and isinstance(stmt.value, ast.Constant) and stmt.value.value is True)


def blacklist_facts(site):
    archs, line = blacklist_definition(site)
    refs = consulted_in(site) if line is not None else []
    out = {
        "archs": archs,
        "defined_in": f"{MODEL_CONFIG}:{line}" if line is not None else None,
        "consulted": bool(refs),
        "consulted_in": [f"{r['where']} ({r['in']})" if r["in"] else r["where"] for r in refs],
        "consulting_code": [r["code"] for r in refs],
        "sibling_rules": [],
    }
    for ref in refs:
        for rule in sibling_rules(ref["file"], ref["in"]):
            rule["where"] = f"{ref['where'].rsplit(':', 1)[0]}:{rule['line']}"
            out["sibling_rules"].append(rule)
    return out


# Where SGLang decides, at run time, whether custom all-reduce is used (after the resolution:
# `disable_custom_all_reduce` may be false and the all-reduce still NCCL's).
CAR_DIR = "sglang/srt/distributed/device_communicators"
CAR_GATE = "can_use_custom_all_reduce_with_nvlink"
CAR_RULES = (
    # (rule, what the line's source contains, inside the gate function)
    ("single_gpu", "world_size == 1", True),
    ("world_sizes", "not in supported_world_size", True),
    ("pcie_only", "world_size > 2 and not full_nvlink", True),
    ("p2p", "can_p2p(", True),
    # Without --enable-p2p-check SGLang replaces the peer-access test with "yes" (sglang#4814).
    ("p2p_check_skipped", "monkey_patch_p2p_access_check()", False),
)
P2P_SKIP_DIRS = ("sglang/srt/distributed", "sglang/srt/model_executor")


def _rule_lines(path, site, first=1, last=None, text=None):
    """[(where, code)] of the source lines of `path` (lines first..last); `text` when it was
    read already."""
    if text is None:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    lines = text.splitlines()
    end = len(lines) if last is None else last
    return [(f"{_rel(path, site)}:{n}", lines[n - 1].strip()) for n in range(first, end + 1)]


def _sizes(node, path, site):
    """([2, 4, 6, 8], where) when `node` assigns _SUPPORTED_WORLD_SIZES a literal list."""
    if not (isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple))
            and any(isinstance(t, ast.Name) and t.id == "_SUPPORTED_WORLD_SIZES"
                    for t in node.targets)):
        return None
    sizes = [e.value for e in node.value.elts
             if isinstance(e, ast.Constant) and isinstance(e.value, int)
             and not isinstance(e.value, bool)]
    return sizes, f"{_rel(path, site)}:{node.lineno}"


def _gate(site):
    """(lines of the gate function, the function's own line first; (sizes, where) or None)."""
    lines, sizes = [], None
    folder = os.path.join(site, CAR_DIR)
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        path = os.path.join(folder, name)
        if not name.startswith("custom_all_reduce") or not name.endswith(".py"):
            continue
        try:
            tree = _parse(path)
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == CAR_GATE:
                lines = _rule_lines(path, site, node.lineno, node.end_lineno)
            sizes = sizes or _sizes(node, path, site)
    return lines, sizes


def _p2p_skip_lines(site):
    """The lines that call monkey_patch_p2p_access_check (not its definition)."""
    out = []
    for folder in P2P_SKIP_DIRS:
        for dirpath, _dirs, files in os.walk(os.path.join(site, folder)):
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                if not name.endswith(".py"):
                    continue
                with open(path, encoding="utf-8", errors="replace") as handle:
                    text = handle.read()
                if "monkey_patch_p2p_access_check()" in text:
                    out += [(w, c) for w, c in _rule_lines(path, site, text=text)
                            if not c.startswith("def ")]
    return out


def custom_all_reduce_rules(site):
    """The run-time rules that turn custom all-reduce off after the resolution, read from the
    installed sources: {rule: {"where": "file:line", "code": <the line>}}. `gate` is the
    function that decides (CAR_GATE); a rule absent beside it is not in this release; no gate
    at all is {} (nothing known). `world_sizes` also carries SGLang's supported `sizes`."""
    gate, sizes = _gate(site)
    if not gate:
        return {}  # no gate function: this SGLang decides elsewhere, nothing here is known
    skip = _p2p_skip_lines(site)
    out = {"gate": {"where": gate[0][0], "code": gate[0][1]}}
    for rule, needle, in_gate in CAR_RULES:
        hit = next(((w, c) for w, c in (gate if in_gate else skip) if needle in c), None)
        if hit:
            out[rule] = {"where": hit[0], "code": hit[1]}
    if "world_sizes" in out:
        if sizes and sizes[0]:
            out["world_sizes"].update(sizes=sizes[0], sizes_defined_in=sizes[1])
        else:
            del out["world_sizes"]  # the rule without its sizes decides nothing
    return out
