"""Ask the installed SGLang what it resolves, without a GPU: the program `sglang_resolve` runs.

This file is a standalone program for the ml-env's own Python (standard library plus the
installed sglang); the module sends its source to that interpreter on stdin. It never touches
a GPU, also beside a serving server on a GPU host:

- `CUDA_VISIBLE_DEVICES` is emptied, and torch's device queries (`is_available`,
  `device_count`, `get_device_capability`, `get_device_name`, `get_device_properties`,
  `mem_get_info`, `current_device`) are answered from a description of the GPUs; an
  `nvidia-smi` placed first on PATH answers `--query-gpu` from the same description;
- where the CUDA driver (`libcuda.so.1`) is absent, a package whose import fails for want of
  it is replaced by an inert module, and the report names each one;
- SGLang's own parser reads the release's `--config` file (`prepare_server_args`), then its
  own resolution runs (`ServerArgs.resolve_once()` where it exists, else the dataclass's
  `__post_init__` already ran it).

Every write to a field and every declaration SGLang records (`_resolved_overrides`, 0.5.19+)
is traced with the file, line and function that made it, so each value SGLang changed from
what was asked names where. An exception SGLang raises is returned with its own type,
message, file and line. Output: one JSON document on the file descriptor given in the input
(stdout is handed to SGLang's logging, which writes there).
"""

import ast
import ctypes
import dataclasses
import difflib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
import types

# Errors that mean "the NVIDIA driver is not on this host", seen in imports of compiled
# CUDA packages (sgl_kernel, ...).
DRIVER_MISSING = re.compile(r"libcuda\.so|libnvidia-ml\.so|CUDA driver|no CUDA-capable device|"
                            r"found no NVIDIA driver|cudaErrorInsufficientDriver", re.I)
MiB = 1 << 20


# ---- the GPUs, as described --------------------------------------------------------------
class Gpus:
    """The description: {count, name, memory_mib, compute_capability "8.6", sm_count}."""

    def __init__(self, desc):
        self.count = int(desc.get("count") or 0)
        self.name = str(desc.get("name") or "NVIDIA GPU")
        self.memory_mib = int(desc.get("memory_mib") or 0)
        major, _unused, minor = str(desc.get("compute_capability") or "8.0").partition(".")
        self.capability = (int(major), int(minor or 0))
        self.sm_count = int(desc.get("sm_count") or 0)

    def properties(self):
        return types.SimpleNamespace(
            name=self.name, total_memory=self.memory_mib * MiB, major=self.capability[0],
            minor=self.capability[1], multi_processor_count=self.sm_count,
            is_integrated=False, is_multi_gpu_board=False, uuid="described",
            L2_cache_size=0, gcnArchName="", warp_size=32)

    def smi_rows(self):
        """What `nvidia-smi --query-gpu=<field>,...` would print, per GPU and field."""
        return [{"index": str(i), "name": self.name, "memory.total": str(self.memory_mib),
                 "memory.used": "0", "memory.free": str(self.memory_mib),
                 "compute_cap": "%d.%d" % self.capability,
                 "pci.bus_id": "00000000:%02X:00.0" % (i + 1)} for i in range(self.count)]


FAKE_SMI = r'''#!%(python)s
# nvidia-smi answering --query-gpu from a description (sglang_resolve; never a real GPU).
import json, sys
rows = json.loads(%(rows)r)
asked = [a.split("=", 1)[1].split(",") for a in sys.argv[1:] if a.startswith("--query-gpu=")]
if not asked or (rows and set(asked[0]) - set(rows[0])):
    sys.stderr.write("described GPUs answer --query-gpu=%%s only\n" %% ",".join(rows[0] if rows else []))
    sys.exit(1)
for row in rows:
    print(", ".join(row[f] for f in asked[0]))
'''


def install_fake_nvidia_smi(gpus, workdir):
    """An nvidia-smi first on PATH that answers from the description (SGLang runs it)."""
    bindir = os.path.join(workdir, "bin")
    os.makedirs(bindir, exist_ok=True)
    path = os.path.join(bindir, "nvidia-smi")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(FAKE_SMI % {"python": sys.executable, "rows": json.dumps(gpus.smi_rows())})
    os.chmod(path, 0o755)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


def describe_torch(torch, gpus):
    """Answer torch.cuda's device queries from the description; nothing reaches a driver."""

    def checked(device=None):
        index = getattr(device, "index", device)
        if isinstance(index, str):
            index = index.rsplit(":", 1)[-1] if ":" in index else 0
        if not 0 <= int(index or 0) < max(gpus.count, 1):
            raise AssertionError("Invalid device id (described GPUs: %d)" % gpus.count)

    answers = {
        "is_available": lambda: gpus.count > 0,
        "device_count": lambda: gpus.count,
        "current_device": lambda: 0,
        "get_device_capability": lambda device=None: checked(device) or gpus.capability,
        "get_device_name": lambda device=None: checked(device) or gpus.name,
        "get_device_properties": lambda device=None: checked(device) or gpus.properties(),
        "mem_get_info": lambda device=None: (gpus.memory_mib * MiB, gpus.memory_mib * MiB),
        "is_bf16_supported": lambda *a, **k: gpus.capability >= (8, 0),
    }
    for name, answer in answers.items():
        setattr(torch.cuda, name, answer)
    if hasattr(getattr(torch, "_C", None), "_cuda_getDeviceCount"):
        torch._C._cuda_getDeviceCount = answers["device_count"]


# ---- inert stand-ins for packages that need the driver ------------------------------------
class Inert:
    """Callable, indexable, attribute-rich nothing: what an absent CUDA library offers."""

    def __init__(self, name):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Inert(f"{self._name}.{name}")

    def __call__(self, *args, **kwargs):
        return Inert(f"{self._name}()")

    def __getitem__(self, key):
        return Inert(f"{self._name}[]")

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __repr__(self):
        return f"<inert {self._name}>"

    def __mro_entries__(self, bases):
        return (object,)


class DriverlessFinder:
    """Import hook: a top-level package whose import fails for want of the NVIDIA driver is
    replaced by an inert module (only installed where libcuda.so.1 cannot be loaded)."""

    def __init__(self):
        self.stubbed = {}

    def find_spec(self, name, path=None, target=None):
        top = name.split(".", 1)[0]
        if top in self.stubbed:
            return importlib.util.spec_from_loader(name, InertLoader(self), is_package=True)
        if "." in name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = GuardedLoader(spec.loader, self)
                return spec
        return None


class InertLoader:
    def __init__(self, finder):
        self.finder = finder

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        make_inert(module)


class GuardedLoader:
    """The real loader (resource readers and all), whose exec_module stubs on a missing driver."""

    def __init__(self, loader, finder):
        self.loader, self.finder = loader, finder

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        try:
            self.loader.exec_module(module)
        except Exception as exc:  # an import that needs the driver, and only that, is stubbed
            text = f"{type(exc).__name__}: {exc}"
            cause = exc.__cause__ or exc.__context__
            if cause is not None:
                text += f" (from {type(cause).__name__}: {cause})"
            if not DRIVER_MISSING.search(text):
                raise
            name = module.__name__
            for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                if loaded != name:
                    del sys.modules[loaded]
            self.finder.stubbed[name] = " ".join(text.split())[:300]
            make_inert(module)


def make_inert(module):
    name = module.__name__
    module.__file__ = f"<inert {name}: needs the NVIDIA driver>"
    module.__path__ = []
    module.__getattr__ = lambda attr: Inert(f"{name}.{attr}")
    module.__all__ = []


def driver_present():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


# ---- tracing what resolution writes --------------------------------------------------------
class Tracer:
    """Where each field got its value: writes to the record and declarations SGLang stashes."""

    def __init__(self, site):
        self.site = site
        self.events = []  # {field, value, file, line, function, source}
        self.asked = None
        self.untraced = []

    def where(self, frame):
        """The first frame from `frame` outwards that is real code outside this probe."""
        while frame is not None:
            code = frame.f_code
            if code.co_filename != __file__ and not code.co_filename.startswith("<"):
                return self.rel(code.co_filename), frame.f_lineno, \
                    getattr(code, "co_qualname", code.co_name)
            frame = frame.f_back
        return None, None, None

    def rel(self, path):
        path = os.path.abspath(path)
        if self.site and path.startswith(self.site + os.sep):
            return path[len(self.site) + 1:]
        return path

    def record(self, field, value, where, source=None):
        file, line, function = where
        self.events.append({"field": field, "value": value, "file": file, "line": line,
                            "function": function, "source": source})

    def declaration(self, source, fields, declaring):
        """A declaration (0.5.19+) made through the helper running in frame `declaring`:
        cite the function its source names where that is on the stack (or a pass that
        already returned its decisions), else the code that called the helper."""
        site = self.frame_named(source, declaring) or self.where(declaring.f_back)
        for field, value in fields.items():
            self.record(field, plain(value), site, source)

    def frame_named(self, source, frame):
        if not isinstance(source, str) or not source:
            return None
        short = source.rsplit(".", 1)[-1]
        start = frame
        while frame is not None:
            code = frame.f_code
            qual = getattr(code, "co_qualname", code.co_name)
            if qual == source or code.co_name == short:
                return self.rel(code.co_filename), frame.f_lineno, qual
            frame = frame.f_back
        frame = start
        while frame is not None:
            for value in list(frame.f_locals.values()):
                code = getattr(value, "__code__", None)
                if code is not None and getattr(value, "__qualname__", None) == source:
                    return self.rel(code.co_filename), code.co_firstlineno, source
            frame = frame.f_back
        return None


class TracedDeclarations(list):
    """The `_resolved_overrides` stash: each append is a declaration, traced."""

    tracer = None

    def append(self, item):
        try:
            source, fields = item
            if isinstance(fields, dict):
                self.tracer.declaration(source, fields, sys._getframe(1))
        except (TypeError, ValueError):
            pass
        super().append(item)


def trace_record(cls, tracer):
    """Trace writes to the record and to the records nested in its fields (0.5.15's
    `cuda_graph_config.prefill.backend = ...`), and the declarations it stashes. The asked
    values are the fields as `__post_init__` starts, i.e. the parser's output (0.5.19+: as
    `resolve_once` starts, see probe())."""
    TracedDeclarations.tracer = tracer
    nested = {}  # id(nested record) -> (the ServerArgs, its top-level field)
    wrapped = set()

    def adopt(root, field, value, depth=0):
        """Register the records inside a field's value so their writes are traced too."""
        if depth > 4 or value is None or isinstance(value, (bool, int, float, str)):
            return
        names = field_names(type(value))
        if not names:
            return
        nested[id(value)] = (root, field)
        wrap(type(value), names, nested_record=True)
        for name in names:
            adopt(root, field, getattr(value, name, None), depth + 1)

    def wrap(kind, names, nested_record):
        if kind in wrapped:
            return
        wrapped.add(kind)
        original = kind.__setattr__

        def __setattr__(self, name, value):
            if name == "_resolved_overrides" and isinstance(value, list) and \
                    not isinstance(value, TracedDeclarations):
                value = TracedDeclarations(value)
            original(self, name, value)
            if tracer.asked is None or name not in names:
                return
            if nested_record:
                owner = nested.get(id(self))
                if owner is None:
                    return
                root, field = owner
            else:
                root, field = self, name
                adopt(self, name, value)
            tracer.record(field, plain(getattr(root, field, None)),
                          tracer.where(sys._getframe(1)))

        try:
            kind.__setattr__ = __setattr__
        except (TypeError, AttributeError):  # a type that refuses it: its writes go untraced
            tracer.untraced.append(kind.__name__)

    names = field_names(cls)
    wrap(cls, names, nested_record=False)
    original_post_init = getattr(cls, "__post_init__", None)

    def start(record):
        tracer.asked = snapshot(record, names)
        for name in names:
            adopt(record, name, getattr(record, name, None))
        stash = getattr(record, "_resolved_overrides", None)
        if not isinstance(stash, TracedDeclarations):
            try:
                setattr(record, "_resolved_overrides", TracedDeclarations(stash or ()))
            except (AttributeError, TypeError):  # a record without room for the stash
                pass

    def __post_init__(self, *args, **kwargs):
        start(self)
        if original_post_init is not None:
            return original_post_init(self, *args, **kwargs)
        return None

    cls.__post_init__ = __post_init__
    return start


def field_names(cls):
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    fields = getattr(cls, "__struct_fields__", None)
    return list(fields or [])


def snapshot(obj, names):
    return {name: plain(getattr(obj, name, None)) for name in names}


def plain(value, depth=0):
    """JSON-able copy of a resolved value (records and enums included)."""
    if depth > 6:
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v, depth + 1) for v in value]
    return _record(value, depth)


def _record(value, depth):
    """A dataclass, an enum member or a msgspec struct as plain data, else its repr."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name), depth + 1)
                for f in dataclasses.fields(value)}
    enum_value = getattr(value, "value", None)
    if enum_value is not None and type(value).__module__ != "builtins" and \
            isinstance(enum_value, (str, int)):
        return enum_value
    fields = getattr(type(value), "__struct_fields__", None)
    if fields:
        return {f: plain(getattr(value, f, None), depth + 1) for f in fields}
    return repr(value)


def flatten(value, prefix=""):
    if isinstance(value, dict) and value:
        out = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def changes(asked, resolved, events, fallback_site=None):
    """Every field (nested keys dotted) whose resolved value differs from the asked one, with
    the last write or declaration that changed it. A value no write explains (a fallback the
    record applies when it is read) cites `fallback_site`."""
    out = []
    by_field = {}
    for event in events:
        by_field.setdefault(event["field"], []).append(event)
    for field in sorted(set(asked) & set(resolved)):
        before, after = flatten(asked[field], field), flatten(resolved[field], field)
        diffs = [k for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]
        if not diffs:
            continue
        sites, state = {}, dict(before)
        for event in by_field.get(field, []):
            now = flatten(event["value"], field)
            for key in set(now) | set(state):
                if now.get(key) != state.get(key):
                    sites[key] = event
            state = now
        for key in diffs:
            site = sites.get(key) if state.get(key) == after.get(key) else None
            site = site or fallback_site or {}
            out.append({"field": key, "asked": before.get(key), "resolved": after.get(key),
                        "file": site.get("file"), "line": site.get("line"),
                        "function": site.get("function"), "source": site.get("source")})
    return out


def fallback_site(record_type, tracer):
    """Where a record applies declared fallbacks as it is read (resolved_dict)."""
    function = getattr(record_type, "resolved_dict", None)
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    return {"file": tracer.rel(code.co_filename), "line": code.co_firstlineno,
            "function": getattr(code, "co_qualname", code.co_name),
            "source": "a fallback declared for the field, applied when the value is read"}


# ---- the parser's flags -------------------------------------------------------------------
def known_flags(server_args_module):
    import argparse

    parser = argparse.ArgumentParser(add_help=False)
    server_args_module.ServerArgs.add_cli_args(parser)
    flags = set()
    for action in parser._actions:
        for option in action.option_strings:
            if option.startswith("--"):
                flags.add(option[2:])
    return flags


def unknown_flags(config_path, flags):
    """Arguments of the config file the parser does not know, with the nearest names."""
    try:
        import yaml
    except ImportError:
        return []
    with open(config_path, encoding="utf-8") as handle:
        data = yaml.safe_load(handle) or {}
    out = []
    for name in sorted(data) if isinstance(data, dict) else []:
        dashed = str(name).replace("_", "-")
        if dashed in flags:
            continue
        close = difflib.get_close_matches(dashed, sorted(flags), n=3, cutoff=0.6)
        prefixed = sorted(k for k in flags if k.startswith(dashed + "-")
                          or dashed.startswith(k + "-"))
        out.append({"name": dashed, "suggestions": list(dict.fromkeys(prefixed[:3] + close))[:3]})
    return out


# ---- what SGLang logs while it resolves ---------------------------------------------------
class LogCapture:
    """SGLang's own log records (INFO and up) during parsing and resolution, with file:line:
    "Breakable CUDA graph is incompatible with multimodal model; disabling ..." is evidence."""

    def __init__(self, tracer_ref, limit=200):
        import logging

        self.records, self.limit, self.tracer_ref = [], limit, tracer_ref
        handler = logging.Handler(level=logging.INFO)
        handler.emit = self.emit
        # On "sglang", not the root: prepare_server_args resets the root's handlers.
        logging.getLogger("sglang").addHandler(handler)
        self.handler = handler

    def emit(self, record):
        if len(self.records) >= self.limit or not record.name.startswith("sglang"):
            return
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot format itself is not evidence
            return
        tracer = self.tracer_ref()
        message = re.sub(r"\x1b\[[0-9;]*m", "", message)
        self.records.append({"level": record.levelname, "message": message[:500],
                             "file": tracer.rel(record.pathname) if tracer else record.pathname,
                             "line": record.lineno, "function": record.funcName})


# ---- errors -------------------------------------------------------------------------------
def keep_parser_errors():
    """argparse reports a bad argument by printing and exiting: keep its message."""
    import argparse

    messages = []
    original = argparse.ArgumentParser.error

    def error(self, message):
        messages.append(f"{self.prog}: error: {message}")
        original(self, message)

    argparse.ArgumentParser.error = error
    return messages


def error_report(exc, tracer, parser_errors=()):
    """SGLang's exception: type, message, and the innermost frame inside the sglang package
    (else the innermost frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if f"{os.sep}sglang{os.sep}" in f.filename]
    frame = (inside or frames or [None])[-1]
    message = str(exc)
    if isinstance(exc, SystemExit) and parser_errors:
        message = parser_errors[-1]
    return {
        "type": type(exc).__name__,
        "message": message.strip()[:2000],
        "file": tracer.rel(frame.filename) if frame else None,
        "line": frame.lineno if frame else None,
        "function": frame.name if frame else None,
    }


# ---- main ---------------------------------------------------------------------------------
def resolved_record(args):
    """{field: value} of a resolved ServerArgs (its own resolved_dict where it has one)."""
    if hasattr(args, "resolved_dict"):
        return {k: plain(v) for k, v in args.resolved_dict().items()}
    return snapshot(args, field_names(type(args)))


class RandomDraws:
    """Where SGLang drew random numbers while it resolved (file, line): a field written on such
    a line (a random seed) is set otherwise on each run, so it is no difference between two
    versions. One resolution tells, where a second one used to be run to compare."""

    NAMES = ("random", "randint", "randrange", "choice", "choices", "getrandbits", "uniform",
             "sample", "shuffle")

    def __init__(self, tracer):
        import random

        self.module, self.tracer, self.sites, self.saved = random, tracer, set(), {}
        self.trees = {}  # file -> its parsed source (None: unreadable)

    def __enter__(self):
        for name in self.NAMES:
            original = getattr(self.module, name, None)
            if original is not None:
                self.saved[name] = original
                setattr(self.module, name, self._traced(original))
        return self

    def __exit__(self, *exc):
        for name, original in self.saved.items():
            setattr(self.module, name, original)

    def _traced(self, original):
        def draw(*args, **kwargs):
            file, line, _function = self.tracer.where(sys._getframe(1))
            self.sites.add((file, line))
            return original(*args, **kwargs)
        return draw

    def fields(self, changes):
        """The changed fields whose write is a statement that drew a random number. The
        statement counts whole: 0.5.23 declares `random_seed=random.randint(...)` on the line
        after its `declare_resolution(` (sglang/srt/arg_groups/serving_hook.py), and the
        declaration is traced to the line the call starts on."""
        out = set()
        for change in changes:
            file, line = change.get("file"), change.get("line")
            if not file or not isinstance(line, int):
                continue
            first, last = self.statement(file, line)
            if any(f == file and first <= at <= last for f, at in self.sites):
                out.add(change["field"])
        return sorted(out)

    def statement(self, file, line):
        """(first, last) line of the innermost statement holding `line` in `file`, as the
        tracer names it ((line, line) where the source cannot be read)."""
        if file not in self.trees:
            path = file if os.path.isabs(file) else os.path.join(self.tracer.site or "", file)
            try:
                with open(path, encoding="utf-8") as handle:
                    self.trees[file] = ast.parse(handle.read())
            except (OSError, SyntaxError, ValueError):
                self.trees[file] = None
        tree = self.trees[file]
        spans = [(node.lineno, node.end_lineno) for node in (ast.walk(tree) if tree else ())
                 if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or 0)]
        return min(spans, key=lambda span: span[1] - span[0], default=(line, line))


# ---- the weights SGLang would load ---------------------------------------------------------
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


def installed_versions():
    """{name: version} of every distribution in the env: what an upgrade plan compares."""
    from importlib import metadata

    out = {}
    for dist in metadata.distributions():
        try:
            name = dist.metadata["Name"]
        except Exception:  # a broken dist-info: skipped, it says nothing usable
            continue
        if name:
            out[str(name)] = str(dist.version)
    return out


def _config_path(request, workdir):
    """The release's config file, or one written from the request's text."""
    config = request.get("config_path")
    if not config:
        config = os.path.join(workdir, "config.yaml")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write(request.get("config_text") or "")
    return config


def _failed_stage(stage, tracer):
    """Where SGLang raised: before 0.5.19 resolution runs while prepare_server_args builds
    the record, so a raise in "parse" after the record was traced is a resolution error."""
    if stage == "parse" and tracer is not None and tracer.asked is not None:
        return "resolve"
    return stage


def probe(request, out):
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="sglang-resolve-")
    gpus = Gpus(request.get("gpus") or {})
    report = {"sglang_version": None, "entry": None, "resolved": None, "asked": None,
              "changes": [], "error": None, "unknown_flags": [], "known_flags": 0,
              "stubbed": {}, "driver": None, "gpus": vars(gpus).copy(), "python": sys.executable,
              "uid": os.getuid()}
    report["gpus"]["capability"] = list(gpus.capability)

    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    # torch.compile decorators SGLang applies while its modules import (0.5.23: moe_runner's
    # deep_gemm, reached through model_config from the resolution) build TorchInductor, about
    # 4 s of imports, for kernels a resolution never runs; with this torch returns the function
    # as it is (torch/_dynamo/eval_frame.py, _optimize). No rule of the resolution reads it
    # (tests/integration: the same answer with it "0"); a release's env may still set it.
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    install_fake_nvidia_smi(gpus, workdir)
    report["driver"] = driver_present()
    finder = DriverlessFinder()
    if not report["driver"]:
        sys.meta_path.insert(0, finder)
    tracer = None
    config = _config_path(request, workdir)
    argv = ["--config", config] + list(request.get("extra_argv") or [])
    stage = "import"
    log = LogCapture(lambda: tracer)
    parser_errors = keep_parser_errors()
    phases = report["phases_s"] = {}
    mark = time.monotonic()

    def phase(name):  # seconds per step, for bench_resolve
        nonlocal mark
        now = time.monotonic()
        phases[name] = round(now - mark, 2)
        mark = now

    try:
        report["packages"] = installed_versions()
        phase("packages")
        import torch

        describe_torch(torch, gpus)
        from importlib import metadata

        report["sglang_version"] = metadata.version("sglang")
        report["torch"] = {"version": torch.__version__, "cuda": getattr(torch.version, "cuda", None)}
        import sglang

        site = os.path.dirname(os.path.dirname(os.path.abspath(sglang.__file__)))
        tracer = Tracer(site)
        draws = RandomDraws(tracer)
        from sglang.srt import server_args as sa

        phase("import")
        start_tracing = trace_record(sa.ServerArgs, tracer)
        flags = known_flags(sa)
        report["known_flags"] = len(flags)
        report["unknown_flags"] = unknown_flags(config, flags)
        stage = "parse"
        # 0.5.19+ parse into an unresolved record and resolve in resolve_once(); earlier
        # releases resolve inside the record's __post_init__, while it is built.
        staged = hasattr(sa.ServerArgs, "resolve_once")
        report["entry"] = "ServerArgs.resolve_once" if staged else "ServerArgs.__post_init__"
        with draws:
            args = sa.prepare_server_args(argv)
        phase("parse")
        stage = "resolve"
        if staged:
            start_tracing(args)  # what was asked is the parsed record
            with draws:
                args.resolve_once()
        resolved = resolved_record(args)
        asked = tracer.asked if tracer.asked is not None else {}
        report["asked"], report["resolved"] = asked, resolved
        report["changes"] = changes(asked, resolved, tracer.events,
                                    fallback_site(type(args), tracer))
        report["volatile"] = draws.fields(report["changes"])
        phase("resolve")
        report["weights"] = checkpoint_weights(args, tracer)
        phase("weights")
    except BaseException as exc:  # SGLang's own verdict, whatever it raised
        if isinstance(exc, KeyboardInterrupt):
            raise
        report["error"] = error_report(exc, tracer or Tracer(None), parser_errors)
        report["error"]["stage"] = _failed_stage(stage, tracer)
    report["stubbed"] = finder.stubbed
    report["log"] = log.records
    report["elapsed_s"] = round(time.monotonic() - started, 2)
    shutil.rmtree(workdir, ignore_errors=True)  # the config text and the fake nvidia-smi
    out.write(json.dumps(report, default=repr))
    out.flush()


def run(request):
    # SGLang logs to stdout and stderr: the report goes to a descriptor of its own.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    probe(request, out)
    # The report is out and flushed; tearing down the ~6,000 modules SGLang imported would
    # cost seconds more and say nothing (no server, no child, nothing to clean up).
    sys.stderr.flush()
    os._exit(0)


# How the module starts this file in the ml-env's Python: the request on stdin's first line,
# this source after it (no file to place on the host, also inside a sandbox's private /tmp).
BOOTSTRAP = ("import json, sys; request = json.loads(sys.stdin.readline()); "
             "scope = {'__name__': 'sglang_probe', '__file__': '<sglang_probe>'}; "
             "exec(compile(sys.stdin.read(), '<sglang_probe>', 'exec'), scope); "
             "scope['run'](request)")


if __name__ == "__main__":
    run(json.loads(sys.stdin.readline() or "{}"))
