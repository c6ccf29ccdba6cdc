"""A hub stand-in over HTTP, for the real huggingface_hub client (HF_ENDPOINT pointed here):
the model-info and tree APIs and the resolve endpoint, served from a directory of commits, the way the
hub answers a repo without Xet storage. Tests only.

    root/<owner>--<name>/<commit>/<files>   root/<owner>--<name>/refs.json {"main": commit}
"""

import contextlib
import hashlib
import json
import os
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _files(root):
    for base, _, names in os.walk(root):
        for name in names:
            path = os.path.join(base, name)
            yield os.path.relpath(path, root), path


class Handler(BaseHTTPRequestHandler):
    root = ""
    token = None
    requests = []

    def log_message(self, *args):
        pass

    def _commit(self, repo, revision):
        base = os.path.join(self.root, repo.replace("/", "--"))
        refs = os.path.join(base, "refs.json")
        if os.path.exists(refs):
            revision = json.load(open(refs, encoding="utf-8")).get(revision, revision)
        path = os.path.join(base, revision)
        return (revision, path) if os.path.isdir(path) else (None, None)

    def _send(self, status, body=b"", headers=None, head=False):
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _authorized(self, head):
        if self.token and self.headers.get("Authorization") != f"Bearer {self.token}":
            self._send(401, b'{"error": "Invalid credentials in Authorization header"}',
                       {"Content-Type": "application/json", "X-Error-Code": "GatedRepo"}, head)
            return False
        return True

    def _route(self, head):
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        type(self).requests.append((self.command, path))
        if not self._authorized(head):
            return
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and "revision" in parts:
            at = parts.index("revision")
            repo, revision = "/".join(parts[2:at]), "/".join(parts[at + 1:])
            sha, base = self._commit(repo, revision)
            if not sha:
                self._send(404, b'{"error": "Revision Not Found"}',
                           {"Content-Type": "application/json",
                            "X-Error-Code": "RevisionNotFound"}, head)
                return
            siblings = [{"rfilename": name, "size": os.path.getsize(full)}
                        for name, full in sorted(_files(base))]
            body = json.dumps({"id": repo, "modelId": repo, "sha": sha,
                               "siblings": siblings}).encode()
            self._send(200, body, {"Content-Type": "application/json"}, head)
            return
        if parts[:2] == ["api", "models"] and "tree" in parts:
            at = parts.index("tree")
            repo, revision = "/".join(parts[2:at]), parts[at + 1]
            sha, base = self._commit(repo, revision)
            if not sha:
                self._send(404, b"", {"X-Error-Code": "RevisionNotFound"}, head)
                return
            tree = [{"type": "file", "path": name, "size": os.path.getsize(full),
                     "oid": hashlib.sha1(open(full, "rb").read()).hexdigest()}
                    for name, full in sorted(_files(base))]
            self._send(200, json.dumps(tree).encode(), {"Content-Type": "application/json"}, head)
            return
        if len(parts) >= 5 and parts[2] == "resolve":
            repo, revision, name = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
            sha, base = self._commit(repo, revision)
            full = os.path.join(base, name) if sha else ""
            if not sha or not os.path.isfile(full):
                self._send(404, b"", {"X-Error-Code": "EntryNotFound"}, head)
                return
            data = open(full, "rb").read()
            etag = hashlib.sha256(data).hexdigest()
            self._send(200, data, {"X-Repo-Commit": sha, "ETag": f'"{etag}"',
                                   "Content-Type": "application/octet-stream"}, head)
            return
        self._send(404, b"")

    def do_GET(self):  # noqa: N802 (http.server's names)
        self._route(head=False)

    def do_HEAD(self):  # noqa: N802
        self._route(head=True)


@contextlib.contextmanager
def serve(root, token=None):
    """Yields (endpoint URL, the requests seen)."""
    handler = type("FakeHub", (Handler,), {"root": str(root), "token": token, "requests": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler.requests
    finally:
        httpd.shutdown()
        httpd.server_close()
