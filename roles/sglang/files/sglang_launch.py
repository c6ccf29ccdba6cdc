"""Start SGLang with its API keys, without the keys reaching argv, a file at rest or the journal.

Copied into every release as `launch.py` and run by the release's `launch` script with the
ml-env's Python, standard library only:

    python launch.py --secrets FILE --fifo-dir DIR -- python -m sglang.launch_server --config C
    python launch.py --secrets FILE --via stdin -- python router_main.py ROUTER-ARGS

SGLang reads its API keys only from its command line or its `--config` file, and 0.5.23 logs
the whole resolved argument dict (keys included) at start-up
(sglang/srt/entrypoints/engine.py, `logger.info(f"server_args=...")`). So this launcher

1. reads the keys from FILE (JSON, 0600, owned by the service user) at each start; without
   the file it exec's the command unchanged;
2. replaces `--config C` by `--config DIR/launch.yaml`, a named pipe (0600, in the unit's
   private RuntimeDirectory) through which SGLang reads C's text plus the keys once; the pipe
   is removed as soon as it has been read, so the keys never rest in a file;
3. runs SGLang with stdout and stderr on a pipe and copies that to its own stdout (the
   journal) with every key replaced by `<redacted>`, whatever process of SGLang printed it;
4. forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT (from its first instant: a signal before SGLang
   started ends the launcher without starting it, and the pipe is removed) and ends the way
   SGLang ended - with the same signal, or 128 + the signal when it cannot be re-raised
   (SIGKILL, e.g. from the OOM killer).

With `--via stdin` (the SGLang router, which has no config file) the keys are written as JSON
to the child's stdin instead, for an entry point that reads them there (router_main.py).
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

REDACTED = b"<redacted>"
# Keys are single-line tokens (checked by the role), so a line never hides half of one.
KEY_PATTERN = re.compile(r"^[A-Za-z0-9._~+/=-]{16,512}$")
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
# Flush a line that grows this long without a newline (progress bars, binary noise).
LONG_LINE = 64 * 1024


class LaunchError(Exception):
    pass


class Redactor:
    """Replace secrets in a byte stream that arrives in arbitrary chunks."""

    def __init__(self, secrets):
        self.secrets = sorted({s.encode() for s in secrets if s}, key=len, reverse=True)
        self.keep = max((len(s) for s in self.secrets), default=1) - 1
        self.buffer = b""

    def _scrub(self, data):
        for secret in self.secrets:
            data = data.replace(secret, REDACTED)
        return data

    def feed(self, chunk):
        """Return what can be written now: complete lines, or a long line's safe head."""
        self.buffer = self._scrub(self.buffer + chunk)
        end = max(self.buffer.rfind(b"\n"), self.buffer.rfind(b"\r")) + 1
        if not end and len(self.buffer) > LONG_LINE:
            # A secret starting before `end` would lie wholly inside the buffer: scrubbed.
            end = len(self.buffer) - self.keep
        out, self.buffer = self.buffer[:end], self.buffer[end:]
        return out

    def flush(self):
        out, self.buffer = self._scrub(self.buffer), b""
        return out


def read_secrets(path):
    """{"api-key": ..., "admin-api-key": ...} from the service's 0600 file; none: {}."""
    if not os.path.lexists(path):
        return {}  # none written yet (the roles write `{}` when no key is set)
    try:
        with open(path, encoding="utf-8") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise LaunchError(f"cannot read the secrets file {path}: {exc}") from exc
    if mode & 0o077:
        raise LaunchError(f"{path} is readable by others (mode {oct(mode & 0o777)}): make it 0600")
    if not isinstance(data, dict):
        raise LaunchError(f"{path}: expected a JSON object of SGLang arguments")
    secrets = {}
    for name, value in data.items():
        if value in (None, ""):
            continue
        if name not in ("api-key", "admin-api-key"):
            raise LaunchError(f"{path}: {name!r} is not an argument this launcher passes")
        if not isinstance(value, str) or not KEY_PATTERN.fullmatch(value):
            raise LaunchError(f"{path}: {name} is not a 16-512 character token")
        secrets[name] = value
    return secrets


def config_with_secrets(config_path, secrets):
    """The release's config text with the keys appended (JSON strings are YAML scalars)."""
    with open(config_path, encoding="utf-8") as handle:
        text = handle.read()
    if not text.endswith("\n"):
        text += "\n"
    for name, value in secrets.items():
        if re.search(rf"^{re.escape(name)}\s*:", text, re.MULTILINE):
            raise LaunchError(f"{config_path} already sets {name}: keys come from the secrets file")
        text += f"{name}: {json.dumps(value)}\n"
    return text


def swap_config(command, fifo):
    """Return (command with `--config FIFO`, the original config path)."""
    if command.count("--config") != 1:
        raise LaunchError("the SGLang command needs exactly one '--config PATH'")
    index = command.index("--config")
    if index + 1 >= len(command):
        raise LaunchError("'--config' is missing its path")
    return command[:index + 1] + [fifo] + command[index + 2:], command[index + 1]


def feed_fifo(fifo, text, child, deadline_s=600.0):
    """Write `text` to the pipe once its reader (SGLang) opens it, then remove the pipe."""
    data = text.encode()
    deadline = time.monotonic() + deadline_s
    try:
        while True:
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError:  # ENXIO: nobody reads yet
                if child.poll() is not None or time.monotonic() > deadline:
                    return
                time.sleep(0.05)
        os.set_blocking(fd, True)
        try:
            os.write(fd, data)
        except BrokenPipeError:
            pass
        finally:
            os.close(fd)
    finally:
        try:
            os.unlink(fifo)
        except FileNotFoundError:
            pass


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _end_like(code):
    """The launcher's exit status for the child's: a signal death is passed on as the same
    signal (SIGKILL from the OOM killer or SGLang itself included), else as 128 + signal."""
    if code >= 0:
        return code
    signum = -code
    if signum == signal.SIGSTOP:
        return 128 + signum
    try:
        # SGLang ends itself with SIGKILL (kill_process_tree) when a child fails: pass it on
        # as such, so systemd's journal says status=9/KILL as it would without the launcher.
        # SIGKILL takes no handler; any other signal first gets its default action back.
        if signum != signal.SIGKILL:
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    except (OSError, ValueError):
        pass
    return 128 + signum


def run(command, secrets_path, fifo_dir=None, out_fd=1, via="config"):
    secrets = read_secrets(secrets_path)
    if not secrets:
        os.execvp(command[0], command)
    # Signal handlers first: a SIGTERM at any moment reaches the child, or - before there is
    # one - ends the launcher cleanly (no child started, no pipe left behind).
    state = {"child": None, "pending": []}

    def forward(signum, _frame):
        if state["child"] is None:
            state["pending"].append(signum)
            return
        try:
            state["child"].send_signal(signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED:
        signal.signal(signum, forward)

    fifo = None
    writer = None
    try:
        if via == "stdin":
            popen = {"stdin": subprocess.PIPE}
        else:
            if not fifo_dir:
                raise LaunchError("--fifo-dir is required to pass the keys through --config")
            fifo = os.path.join(fifo_dir, "launch.yaml")
            command, config_path = swap_config(command, fifo)
            text = config_with_secrets(config_path, secrets)
            if os.path.lexists(fifo):
                os.unlink(fifo)
            os.mkfifo(fifo, 0o600)
            popen = {}
        if state["pending"]:
            return 128 + state["pending"][0]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 **popen)
        state["child"] = child
        for signum in state["pending"]:
            child.send_signal(signum)
        if via == "stdin":
            # A program of ours (the router's entry point) reads the keys as JSON on stdin.
            try:
                child.stdin.write(json.dumps(secrets).encode())
                child.stdin.close()
            except BrokenPipeError:
                pass
        else:
            writer = threading.Thread(target=feed_fifo, args=(fifo, text, child), daemon=True)
            writer.start()

        redactor = Redactor(secrets.values())
        while True:
            chunk = os.read(child.stdout.fileno(), 65536)
            if not chunk:
                break
            _write_all(out_fd, redactor.feed(chunk))
        _write_all(out_fd, redactor.flush())
        code = child.wait()
        if writer:
            writer.join(timeout=1)
    finally:
        if fifo:
            try:
                os.unlink(fifo)
            except FileNotFoundError:
                pass
    return _end_like(code)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--secrets", required=True, help="JSON file of SGLang API keys (0600)")
    parser.add_argument("--fifo-dir", help="private directory for the pipe (--via config)")
    parser.add_argument("--via", choices=("config", "stdin"), default="config",
                        help="config: SGLang's --config through a pipe; stdin: JSON on stdin")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the SGLang command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the SGLang command after --")
    try:
        return run(command, args.secrets, args.fifo_dir, via=args.via)
    except LaunchError as exc:
        sys.stderr.write(f"sglang-deploy launch: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
