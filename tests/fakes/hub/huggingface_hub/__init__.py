"""A stand-in for huggingface_hub in tests (never in the role): the two calls the fetch
worker makes, served from a directory instead of the hub.

$FAKE_HUB_DIR/<owner>--<name>/<commit>/...   the files of each commit
$FAKE_HUB_DIR/<owner>--<name>/refs.json      {"main": "<commit>"}: names for commits
$FAKE_HUB_DIR/<owner>--<name>/token          when present, the token the repo needs
$FAKE_HUB_DELAY                              seconds per 1 MB chunk copied (default 0)
"""

import os
import shutil
import time
from types import SimpleNamespace

__version__ = "0.0-fake"
CHUNK = 1 << 20


class HfHubError(Exception):
    pass


def _repo(repo_id, token):
    path = os.path.join(os.environ["FAKE_HUB_DIR"], repo_id.replace("/", "--"))
    if not os.path.isdir(path):
        raise HfHubError(f"404 Repository Not Found for url: /api/models/{repo_id}")
    needed = os.path.join(path, "token")
    if os.path.exists(needed) and open(needed, encoding="utf-8").read().strip() != token:
        # The real hub does not echo tokens; a careless wrapper might: the module must redact.
        raise HfHubError(f"401 Unauthorized: token {token!r} cannot read {repo_id}")
    return path


def _commit(path, revision):
    refs = os.path.join(path, "refs.json")
    if os.path.exists(refs):
        import json
        revision = json.load(open(refs, encoding="utf-8")).get(revision, revision)
    if not os.path.isdir(os.path.join(path, revision)):
        raise HfHubError(f"404 Revision Not Found: {revision}")
    return revision


def _files(root):
    for base, _, names in os.walk(root):
        for name in names:
            full = os.path.join(base, name)
            yield os.path.relpath(full, root), os.path.getsize(full)


class HfApi:
    def model_info(self, repo_id, revision=None, files_metadata=False, token=None):
        path = _repo(repo_id, token)
        sha = _commit(path, revision or "main")
        siblings = [SimpleNamespace(rfilename=name, size=size if files_metadata else None)
                    for name, size in sorted(_files(os.path.join(path, sha)))]
        return SimpleNamespace(sha=sha, siblings=siblings)


def snapshot_download(repo_id, revision=None, local_dir=None, allow_patterns=None, token=None,
                      local_files_only=False):
    from .utils import filter_repo_objects

    if local_files_only or os.environ.get("HF_HUB_OFFLINE") == "1":
        if not os.path.isfile(os.path.join(local_dir, "config.json")):
            raise HfHubError("LocalEntryNotFoundError: offline and the snapshot is not on disk")
        return local_dir
    path = _repo(repo_id, token)
    source = os.path.join(path, _commit(path, revision or "main"))
    delay = float(os.environ.get("FAKE_HUB_DELAY", "0"))
    parts = os.path.join(local_dir, ".cache", "huggingface", "download")
    for name in filter_repo_objects([n for n, _ in _files(source)], allow_patterns=allow_patterns):
        target = os.path.join(local_dir, name)
        if os.path.exists(target) and os.path.getsize(target) == os.path.getsize(
                os.path.join(source, name)):
            continue
        part = os.path.join(parts, name + ".incomplete")
        os.makedirs(os.path.dirname(part), exist_ok=True)
        with open(os.path.join(source, name), "rb") as src, open(part, "wb") as dst:
            while chunk := src.read(CHUNK):
                dst.write(chunk)
                dst.flush()
                time.sleep(delay)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.move(part, target)
    return local_dir
