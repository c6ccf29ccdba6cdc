"""What SGLang says besides the values it resolves, for the probe (sglang_probe): the flags its
parser knows (and the config's arguments it does not), its log records, and the exception it
raises, with its own type, message, file and line.

Part of the program `sglang_resolve` runs in the ml-env's own Python (standard library only).
"""

import difflib
import os
import re
import traceback


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
