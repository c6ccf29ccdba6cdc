"""HTTP to an SGLang server from the target host: standard library only."""

import json
import urllib.error
import urllib.request


class HttpError(Exception):
    """The server could not be reached or did not answer with what was asked."""


def request(url, body=None, api_key=None, timeout=30.0, method=None):
    """Return (status, parsed JSON or text). Raises HttpError when the server is unreachable."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data else "GET"))
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if api_key:
        req.add_header("Authorization", "Bearer " + api_key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, _decode(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, _decode(exc.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise HttpError(f"{url}: {getattr(exc, 'reason', exc)}") from exc


def _decode(raw):
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text
