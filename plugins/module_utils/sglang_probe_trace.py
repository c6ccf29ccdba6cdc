"""Where each value SGLang resolved came from: the probe's (sglang_probe) trace of SGLang's
resolution, and the changes it reports.

Part of the program `sglang_resolve` runs in the ml-env's own Python (standard library only).
Every write to a field of `ServerArgs` (and of the records nested in its fields) and every
declaration SGLang records (`_resolved_overrides`, 0.5.19+) is traced with the file, line and
function that made it, so each value SGLang changed from what was asked names where; a field
set from a random draw while SGLang resolved (a random seed) is named volatile.
"""

import ast
import dataclasses
import os
import sys


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


class TracedWrites:
    """The record types whose field writes are traced: ServerArgs', and those of the records
    nested in its fields, whose writes count as writes of the top-level field holding them."""

    def __init__(self, tracer):
        self.tracer = tracer
        self.nested = {}  # id(nested record) -> (the ServerArgs, its top-level field)
        self.wrapped = set()

    def adopt(self, root, field, value, depth=0):
        """Register the records inside a field's value so their writes are traced too."""
        if depth > 4 or value is None or isinstance(value, (bool, int, float, str)):
            return
        names = field_names(type(value))
        if not names:
            return
        self.nested[id(value)] = (root, field)
        self.wrap(type(value), names, nested_record=True)
        for name in names:
            self.adopt(root, field, getattr(value, name, None), depth + 1)

    def wrap(self, kind, names, nested_record):
        if kind in self.wrapped:
            return
        self.wrapped.add(kind)
        setter = self.setter(kind.__setattr__, names, nested_record)
        try:
            kind.__setattr__ = setter
        except (TypeError, AttributeError):  # a type that refuses it: its writes go untraced
            self.tracer.untraced.append(kind.__name__)

    def setter(self, original, names, nested_record):
        """A __setattr__ that writes through `original`, then records the write (its field's
        value as it now is) and where it was made."""
        tracer, nested, adopt = self.tracer, self.nested, self.adopt

        def __setattr__(record, name, value):
            if name == "_resolved_overrides" and isinstance(value, list) and \
                    not isinstance(value, TracedDeclarations):
                value = TracedDeclarations(value)
            original(record, name, value)
            if tracer.asked is None or name not in names:
                return
            if nested_record:
                owner = nested.get(id(record))
                if owner is None:
                    return
                root, field = owner
            else:
                root, field = record, name
                adopt(record, name, value)
            tracer.record(field, plain(getattr(root, field, None)),
                          tracer.where(sys._getframe(1)))

        return __setattr__


def trace_record(cls, tracer):
    """Trace writes to the record and to the records nested in its fields (0.5.15's
    `cuda_graph_config.prefill.backend = ...`), and the declarations it stashes. The asked
    values are the fields as `__post_init__` starts, i.e. the parser's output (0.5.19+: as
    `resolve_once` starts, see probe())."""
    TracedDeclarations.tracer = tracer
    writes = TracedWrites(tracer)
    names = field_names(cls)
    writes.wrap(cls, names, nested_record=False)
    original_post_init = getattr(cls, "__post_init__", None)

    def start(record):
        tracer.asked = snapshot(record, names)
        for name in names:
            writes.adopt(record, name, getattr(record, name, None))
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
