"""The checkpoint's weights SGLang would load, for the probe (sglang_probe): the files SGLang's
own `DefaultModelLoader` selects for the checkpoint and load format, and their tensors' bytes
read from the safetensors headers (no tensor is read).

Part of the program `sglang_resolve` runs in the ml-env's own Python (standard library plus the
installed sglang); the preflight's `memory` row reads the answer (plugin_utils/sglang_memory).
"""

import ast
import importlib.util
import json
import os
import sys


# Formats the default loader reads (DefaultModelLoader._prepare_weights); others (dummy, gguf,
# sharded_state, remote loaders) have loaders of their own.
DEFAULT_LOADER_FORMATS = ("auto", "safetensors", "fastsafetensors", "instanttensor", "mistral",
                          "pt", "npcache")
HEADER_LIMIT = 100 * 1024 * 1024


def safetensors_tensors(path):
    """{name: (ndim, bytes)} of a safetensors file from its header alone (no tensor read):
    8 bytes of header length, then the header's JSON with each tensor's shape and offsets."""
    import struct

    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) != 8:
            raise ValueError("shorter than a safetensors header")
        (size,) = struct.unpack("<Q", head)
        if size > HEADER_LIMIT:
            raise ValueError(f"header of {size} bytes")
        header = json.loads(handle.read(size))
    out = {}
    for name, item in header.items():
        if name == "__metadata__":
            continue
        start, end = item["data_offsets"]
        out[name] = (len(item["shape"]), int(end) - int(start))
    return out


def weight_bytes(files):
    """{sharded_bytes, replicated_bytes, tensors, sized_by_file, unread}: matrices (2 or more
    dimensions, split over the tensor-parallel ranks by SGLang's parallel linear and embedding
    layers) apart from vectors (norms, biases: a copy on each rank)."""
    out = {"sharded_bytes": 0, "replicated_bytes": 0, "tensors": 0, "sized_by_file": [],
           "unread": []}
    for path in files:
        name = os.path.basename(path)
        if not path.endswith(".safetensors"):
            # A pickled checkpoint has no header to read without torch.load: its size.
            out["sharded_bytes"] += os.path.getsize(path)
            out["sized_by_file"].append(name)
            continue
        try:
            tensors = safetensors_tensors(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            out["unread"].append(f"{name}: {type(exc).__name__}: {exc}"[:300])
            continue
        for ndim, size in tensors.values():
            out["sharded_bytes" if ndim >= 2 else "replicated_bytes"] += size
        out["tensors"] += len(tensors)
    return out


LOADER_MODULE = "sglang.srt.model_loader.loader"
LOADER_CLASS = "DefaultModelLoader"
LOADER_METHODS = ("_prepare_weights", "_maybe_download_from_modelscope")


def _binds(stmt):
    """The module-level names a statement binds (imports, assignments, defs)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return {t.id for t in targets if isinstance(t, ast.Name)}
    if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
        return {stmt.name}
    return set()


def _loads(nodes):
    return {n.id for node in nodes for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _needed(tree, cls, wanted):
    """The module-level statements of `tree` (but `cls`) that bind the `wanted` names, and those
    the kept ones use in turn (logger = logging.getLogger(...)); __future__ imports first."""
    kept = []
    for _round in range(8):
        kept = [stmt for stmt in tree.body if _binds(stmt) & wanted and stmt is not cls
                or isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"]
        more = wanted | _loads(kept)
        if more == wanted:
            break
        wanted = more
    return kept


def loader_methods():
    """SGLang's own DefaultModelLoader file selection, without importing the whole loader
    module (its top level imports every layer and quantization, ~15 s on 0.5.23): the
    methods' code as the installed loader.py has it, compiled with the module-level statements
    that bind the names they use (their imports first), line numbers kept: the class holding
    them. A name the methods use that the module does not bind is a
    NameError when they run: the loader's answer is then unknown, never guessed."""
    spec = importlib.util.find_spec(LOADER_MODULE)
    with open(spec.origin, "rb") as handle:
        tree = ast.parse(handle.read(), filename=spec.origin)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == LOADER_CLASS)
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in LOADER_METHODS]
    if not any(m.name == "_prepare_weights" for m in methods):
        raise LookupError(f"{spec.origin} has no {LOADER_CLASS}._prepare_weights")
    kept = _needed(tree, cls, _loads(methods))
    reduced = ast.ClassDef(name=LOADER_CLASS, bases=[], keywords=[], body=methods,
                           decorator_list=[], lineno=cls.lineno, col_offset=cls.col_offset,
                           end_lineno=cls.end_lineno, end_col_offset=cls.end_col_offset)
    if "type_params" in ast.ClassDef._fields:  # Python 3.12+
        reduced.type_params = []
    body = kept + [reduced]
    module = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
    scope = {"__name__": LOADER_MODULE, "__file__": spec.origin}
    exec(compile(module, spec.origin, "exec"), scope)  # noqa: S102 - SGLang's own code
    return scope[LOADER_CLASS]


def checkpoint_weights(args, tracer):
    """The files SGLang's own loader selects for this checkpoint and load format
    (DefaultModelLoader._prepare_weights: the first pattern that matches, the index's files
    only, no training state) and their tensors' bytes. {error} when it cannot say: the
    checkpoint is not a local directory (SGLang would download it), another loader reads this
    format, or the loader raised. Never raises: the resolution is the verdict."""
    path = getattr(args, "model_path", None)
    load_format = str(getattr(args, "load_format", "auto") or "auto").lower()
    if load_format not in DEFAULT_LOADER_FORMATS:
        return {"error": f"load format {load_format} is read by a loader of its own, not by "
                         "DefaultModelLoader"}
    if not path or not os.path.isdir(path):
        return {"error": f"{path} is not a directory here: SGLang would download it (weights "
                         "not on this host yet)"}
    try:
        from sglang.srt.configs.load_config import LoadConfig

        loader_class = loader_methods()
        prepare = loader_class._prepare_weights
        # The loader reads the process's server arguments (0.5.2x): the ones just resolved.
        publish = getattr(sys.modules.get("sglang.srt.server_args"),
                          "set_global_server_args_for_scheduler", None)
        if publish is not None:
            publish(args)
        loader = loader_class()
        loader.load_config = LoadConfig(load_format=load_format)
        _folder, files, use_safetensors = prepare(
            loader, path, getattr(args, "revision", None), True)
    except Exception as exc:  # SGLang's to raise: the loader's own refusal is the evidence
        return {"error": f"{type(exc).__name__}: {str(exc)[:500]}",
                "selected_by": None}
    code = prepare.__code__
    out = {"files": sorted(os.path.basename(f) for f in files),
           "safetensors": bool(use_safetensors), "load_format": load_format,
           "selected_by": f"{tracer.rel(code.co_filename)}:{code.co_firstlineno} "
                          f"{getattr(code, 'co_qualname', code.co_name)}"}
    out.update(weight_bytes(files))
    return out
