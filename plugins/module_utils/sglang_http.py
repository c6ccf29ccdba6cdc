"""HTTP to an SGLang server (or its router) from the target host: standard library only.

Every module talks HTTP through `exchange` (or `request`, built on it), so one rule holds
everywhere: `timeout` is a wall-clock deadline for the whole exchange - connect, status line,
headers and body - not a per-socket-operation timeout. A server that trickles a byte every
second, or streams forever, is cut off at the deadline: a watchdog shuts the socket down,
which wakes any read blocked on it. A 401/403 raises AuthError at once: a wrong key will
not be right on the next poll.
"""

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.parse

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_redact import excerpt

# The largest body `request` reads: SGLang's answers are a few kB, /metrics some 100 kB.
MAX_BODY = 16 * 1024 * 1024


class HttpError(Exception):
    """The server could not be reached or did not answer with what was asked."""


class AuthError(HttpError):
    """The server refused the key (401/403): fail now, do not poll."""


class DeadlineError(HttpError):
    """The exchange did not end within its deadline."""


class _Watchdog:
    """Shut a connection's socket down when the deadline passes."""

    def __init__(self, conn, timeout):
        self.conn = conn
        self.expired = False
        self.timer = threading.Timer(max(0.0, timeout), self._expire)
        self.timer.daemon = True

    def _expire(self):
        self.expired = True
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _target(url):
    parts = urllib.parse.urlsplit(str(url))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError(f"{url!r} is not an http(s)://host[:port] URL")
    try:
        port = parts.port
    except ValueError as exc:
        raise HttpError(f"{url!r}: {exc}") from exc
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls, parts.hostname, port, path


MAX_TIMEOUT = 86400


@contextlib.contextmanager
def exchange(url, body=None, api_key=None, timeout=30.0, method=None, headers=None):
    """Yield (response, deadline check) of one request that must end within `timeout` seconds.

    Any OSError / HTTP protocol error inside the block (or the deadline) becomes HttpError;
    a 401/403 becomes AuthError before the block runs.
    """
    cls, host, port, path = _target(url)
    try:
        timeout = float(timeout)
    except (TypeError, ValueError):
        raise HttpError(f"timeout {timeout!r} is not a number of seconds") from None
    if timeout > MAX_TIMEOUT:
        # inf and 1e300 overflow the socket's time_t: no request waits more than a day.
        raise HttpError(f"timeout {timeout!r} is not a number of seconds up to {MAX_TIMEOUT}")
    if not timeout > 0:
        timeout = 0.001
    data = None if body is None else json.dumps(body).encode()
    all_headers = dict(headers or {})
    if data is not None:
        all_headers.setdefault("Content-Type", "application/json")
    if api_key:
        all_headers["Authorization"] = "Bearer " + api_key
    conn = cls(host, port, timeout=timeout)
    watchdog = _Watchdog(conn, timeout)
    started = time.monotonic()

    def check():
        if watchdog.expired or time.monotonic() - started > timeout:
            raise DeadlineError(f"{url}: no complete answer within {timeout:g} s")

    watchdog.timer.start()
    try:
        conn.request(method or ("POST" if data is not None else "GET"), path, data, all_headers)
        resp = conn.getresponse()
        if resp.status in (401, 403):
            raise AuthError(f"{url} answered HTTP {resp.status}: the API key is missing or "
                            "does not match the server's")
        yield resp, check
        check()
    except HttpError:
        raise
    except (OSError, ValueError, http.client.HTTPException) as exc:
        check()
        raise HttpError(f"{url}: {type(exc).__name__}: {excerpt(str(exc), [api_key])}") from None
    finally:
        watchdog.timer.cancel()
        conn.close()


def request(url, body=None, api_key=None, timeout=30.0, method=None):
    """Return (status, parsed JSON or text) within `timeout` seconds; raises HttpError/AuthError."""
    with exchange(url, body, api_key, timeout, method) as (resp, check):
        chunks, size = [], 0
        while True:
            check()
            chunk = resp.read1(65536)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_BODY:
                raise HttpError(f"{url}: the answer is larger than {MAX_BODY} bytes")
            chunks.append(chunk)
        check()
        if resp.length:  # Content-Length promised more than came
            raise HttpError(f"{url}: the answer ended {resp.length} bytes short of its length")
        status = resp.status
    return status, _decode(b"".join(chunks))


def _decode(raw):
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text
