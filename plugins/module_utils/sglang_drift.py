"""The drift check: what the live server resolved (`/server_info`) against what the serving
release recorded when it was proven (`current/manifest.json`, verification.effective),
published for node_exporter's textfile collector.

A feature that turns itself off after the deploy (a CUDA graph backend, the speculative settings,
the attention backend) then raises an alert instead of a complaint. Standard library only: the
sglang_drift module writes this file and the two it imports (LIBRARY) side by side on the host,
and the `<service>-drift` timer runs it there:

    python3 sglang_drift.py --base-dir /opt/sglang --url http://127.0.0.1:30000 \\
        --secrets /opt/sglang/secrets.json --host gpu1 \\
        --out /var/lib/prometheus/node-exporter/sglang.prom

Fail closed: a record or a server it cannot read gives `sglang_drift_check_success 0` with the
reason, never a clean bill.
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

try:
    from ansible_collections.sglang.deploy.plugins.module_utils.sglang_effective import effective
    from ansible_collections.sglang.deploy.plugins.module_utils.sglang_files import write_atomic
    from ansible_collections.sglang.deploy.plugins.module_utils.sglang_read import read_text
except ImportError:  # run by the timer: the module wrote them beside this file (LIBRARY), and
    # Python puts a script's own directory first on its path
    from sglang_effective import effective  # type: ignore[no-redef]
    from sglang_files import write_atomic  # type: ignore[no-redef]
    from sglang_read import read_text  # type: ignore[no-redef]

# The files the timer runs, side by side in one directory (sglang_drift module).
LIBRARY = ("sglang_drift", "sglang_effective", "sglang_files", "sglang_read")
# What root reads here that the service user may write (the key file is the service user's):
# a bounded read of a regular file, its last component never a link followed. A key file is
# bytes; a manifest is kilobytes.
KEY_CAP, MANIFEST_CAP = 64 * 1024, 8 << 20
# The textfile's temp name while it is written: a dot and no .prom, so node_exporter skips it.
OUT_PREFIX = ".sglang-drift."

# The most /server_info may hold (SGLang's is a few kB): a larger answer is not read whole.
MAX_BODY = 4 * 1024 * 1024

# The settings of the effective view (sglang_effective) a release is held to after its proof.
SETTINGS = ("version", "tp_size", "decode_cuda_graph", "decode_backend", "prefill_cuda_graph",
            "prefill_backend", "speculative", "attention_backend")


class Unknown(Exception):
    """Evidence missing: the check says `unknown` with this reason (a short kind, then text)."""

    def __init__(self, kind, reason, release=None):
        super().__init__(reason)
        self.kind, self.release = kind, release


def recorded(base_dir):
    """(release id, effective view) the serving release recorded when it was proven."""
    link = os.path.join(base_dir, "current")
    if not os.path.islink(link):
        raise Unknown("no_record", f"{link} is not a link to a release")
    release = os.path.basename(os.path.realpath(link))
    try:
        manifest = json.loads(read_text(os.path.join(link, "manifest.json"), MANIFEST_CAP,
                                        follow=False))
    except (OSError, ValueError) as exc:
        raise Unknown("no_record", f"release {release}: cannot read manifest.json ({exc})",
                      release) from None
    # sglang_release state=good keeps the results at the manifest's top level.
    view = ((manifest.get("verification") or {}).get("effective")
            if isinstance(manifest, dict) else None)
    if not isinstance(view, dict):
        raise Unknown("no_record", f"release {release} recorded no verification (status "
                      f"{manifest.get('status') if isinstance(manifest, dict) else '?'}): "
                      "nothing to compare with", release)
    return release, view


def _key(secrets):
    """The key the check sends: the admin key, else the API key, of the key file (none: "").
    The file is the service user's: a link, a FIFO or an oversized file there is a named
    failure (sglang_read says which, never the content), published as such."""
    if not secrets or not os.path.lexists(secrets):
        return ""
    try:
        keys = json.loads(read_text(secrets, KEY_CAP, follow=False))
    except OSError as exc:
        # The path and what is wrong with it (a link, a FIFO, its size): no content.
        raise Unknown("no_key", f"cannot read the key file {secrets}: "
                                f"{exc.strerror or exc}") from None
    except ValueError as exc:
        raise Unknown("no_key", f"cannot read the key file {secrets} ({type(exc).__name__})") from None
    return (keys.get("admin-api-key") or keys.get("api-key") or "") if isinstance(keys, dict) else ""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, never followed: the key goes to the URL the check was given and
    to no other origin (the request's Authorization header would go with it)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _body(answer, deadline, where):
    """The answer's body, read until `deadline` (time.monotonic) and up to MAX_BODY: a server
    that trickles or never ends holds the check (and a deploy that runs it) at most one read's
    timeout past the deadline."""
    chunks, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Unknown("unreachable", f"{where}: the answer did not end within the timeout")
        chunk = answer.read1(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_BODY:
            raise Unknown("bad_answer", f"{where}: the answer is larger than {MAX_BODY} bytes")
        chunks.append(chunk)


def live(url, secrets="", timeout=10.0):
    """The effective view of the live server's /server_info (/get_server_info before 0.5.6),
    read within `timeout` seconds in all."""
    key = _key(secrets)
    deadline = time.monotonic() + timeout
    for path in ("/server_info", "/get_server_info"):
        request = urllib.request.Request(url.rstrip("/") + path)
        if key:
            request.add_header("Authorization", f"Bearer {key}")
        try:
            with _OPENER.open(request, timeout=timeout) as answer:  # noqa: S310 - our URL
                body = _body(answer, deadline, url + path)
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and path == "/server_info":
                continue
            kind = "auth" if exc.code in (401, 403) else "bad_answer"
            moved = " (a redirect is not followed)" if 300 <= exc.code < 400 else ""
            raise Unknown(kind, f"{url}{path} answered HTTP {exc.code}{moved}") from None
        except (OSError, ValueError) as exc:
            raise Unknown("unreachable", f"{url}{path}: {exc}") from None
        try:
            return effective(json.loads(body))
        except ValueError as exc:
            raise Unknown("bad_answer", f"{url}{path}: {exc}") from None
    raise Unknown("bad_answer", f"{url} has neither /server_info nor /get_server_info")


def compare(record, now):
    """One row per setting: the recorded and live values, and whether they differ (None: the
    release recorded nothing for it, so nothing can be said)."""
    rows = []
    for setting in SETTINGS:
        if record.get(setting) is None:
            rows.append({"setting": setting, "recorded": None, "live": now.get(setting),
                         "drift": None})
            continue
        rows.append({"setting": setting, "recorded": record[setting], "live": now.get(setting),
                     "drift": record[setting] != now.get(setting)})
    return rows


def check(base_dir, url, secrets="", timeout=10.0, now=None):
    """{ok, release, reason, kind, settings, checked_at}: ok is True (no drift), False (drift,
    named in settings) or None (unknown, with the reason)."""
    result = {"ok": None, "release": None, "reason": "", "kind": "", "settings": [],
              "checked_at": time.time() if now is None else now}
    try:
        result["release"], record = recorded(base_dir)
        result["settings"] = compare(record, live(url, secrets, timeout))
    except Unknown as exc:
        result.update(kind=exc.kind, reason=str(exc), release=result["release"] or exc.release)
        return result
    if not any(row["drift"] is not None for row in result["settings"]):
        # A record that holds none of the settings proves nothing: unknown, not "0 match".
        result.update(settings=[], kind="no_record",
                      reason=f"release {result['release']} recorded none of the settings "
                             f"({', '.join(SETTINGS)}): nothing to compare with")
        return result
    drifted = [row["setting"] for row in result["settings"] if row["drift"]]
    result["ok"] = not drifted
    result["reason"] = ("drift: " + ", ".join(drifted) if drifted else
                        f"{sum(row['drift'] is False for row in result['settings'])} settings "
                        "match the release's record")
    return result


def _value(value):
    if isinstance(value, dict):
        return ",".join(f"{k}={value[k]}" for k in sorted(value))
    return "" if value is None else str(value)


def _label(value):
    # A lone surrogate (JSON's "\ud800") has no UTF-8: written escaped, never a crash.
    text = _value(value).encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prom(result, host=""):
    """The result in Prometheus' text format, for node_exporter's textfile collector; every
    series carries `sglang_host` (the inventory name the alert rules select)."""
    labels = f'sglang_host="{_label(host)}",release="{_label(result["release"] or "")}"'
    lines = [
        "# HELP sglang_drift_check_success Whether the last drift check read the live server and "
        "the release's record (1) or could not (0, see sglang_drift_check_error).",
        "# TYPE sglang_drift_check_success gauge",
        f'sglang_drift_check_success{{{labels}}} {0 if result["ok"] is None else 1}',
        "# HELP sglang_drift_check_timestamp_seconds When the last drift check ran.",
        "# TYPE sglang_drift_check_timestamp_seconds gauge",
        f"sglang_drift_check_timestamp_seconds{{{labels}}} {result['checked_at']:.3f}",
    ]
    if result["ok"] is None:
        lines += ["# HELP sglang_drift_check_error Why the last drift check could not compare.",
                  "# TYPE sglang_drift_check_error gauge",
                  f'sglang_drift_check_error{{{labels},kind="{_label(result["kind"])}"}} 1']
    rows = [row for row in result["settings"] if row["drift"] is not None]
    if rows:
        lines += ["# HELP sglang_drift Whether a setting the live server resolved differs from what "
                  "the release recorded when it was proven (1) or matches it (0).",
                  "# TYPE sglang_drift gauge"]
        lines += [f'sglang_drift{{{labels},setting="{row["setting"]}",'
                  f'recorded="{_label(row["recorded"])}",live="{_label(row["live"])}"}} '
                  f'{int(row["drift"])}' for row in rows]
    return "\n".join(lines) + "\n"


def publish(out, result, host):
    """Replace the textfile whole: node_exporter never reads half a file."""
    write_atomic(out, prom(result, host), mode=0o644, prefix=OUT_PREFIX)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--base-dir", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--secrets", default="")
    parser.add_argument("--out", required=True, help="the .prom file node_exporter reads")
    parser.add_argument("--host", default="", help="the sglang_host label (inventory name)")
    parser.add_argument("--timeout", type=float, default=10.0)
    args = parser.parse_args(argv)
    result = check(args.base_dir, args.url, args.secrets, args.timeout)
    publish(args.out, result, args.host)
    state = {True: "ok", False: "DRIFT", None: "unknown"}[result["ok"]]
    print(f"sglang drift check, release {result['release']}: {state}: {result['reason']}")
    # The timer's unit fails on drift or on missing evidence: `systemctl --failed` shows it too.
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
