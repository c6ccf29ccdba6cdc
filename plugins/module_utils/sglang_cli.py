"""The flags the installed SGLang's own argument parser knows, from its `--help`."""

import difflib
import re
import subprocess
import time

# An option line of argparse's help: "  --tp-size TP_SIZE, --tensor-parallel-size TP_SIZE".
OPTION_LINE = re.compile(r"^\s{1,8}(--?\w[\w-]*.*)$")
FLAG = re.compile(r"(?<![\w-])--([a-z0-9][a-z0-9-]*)")


def parse_help(text):
    """Set of long option names (without dashes) declared in argparse help output."""
    flags = set()
    for line in text.splitlines():
        match = OPTION_LINE.match(line)
        if not match:
            continue
        # The option names end where argparse starts the description (two or more spaces).
        head = re.split(r"\s{2,}", match.group(1).strip(), maxsplit=1)[0]
        flags.update(FLAG.findall(head))
    return flags


def suggestions(name, known, limit=3):
    close = difflib.get_close_matches(name, sorted(known), n=limit, cutoff=0.6)
    prefixed = sorted(k for k in known if k.startswith(name + "-") or name.startswith(k + "-"))
    return list(dict.fromkeys(prefixed[:limit] + close))[:limit]


def unknown_args(names, known):
    return [{"name": n, "suggestions": suggestions(n, known)} for n in names if n not in known]


def run_help(python, module="sglang.launch_server", timeout=120):
    """(help text, None) or (None, why it could not run)."""
    started = time.monotonic()
    try:
        # cwd "/": `-m` and `-c` put the working directory first on the import path, and a run started
        # in /tmp would import what any local user left there, as root.
        proc = subprocess.run([python, "-m", module, "--help"], capture_output=True, text=True,
                              timeout=timeout, check=False, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{python} -m {module} --help: {exc}", time.monotonic() - started
    elapsed = time.monotonic() - started
    if proc.returncode != 0 or "usage:" not in proc.stdout:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"{python} -m {module} --help exited {proc.returncode}: {last}", elapsed
    return proc.stdout, None, elapsed
