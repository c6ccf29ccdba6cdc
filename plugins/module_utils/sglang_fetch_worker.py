"""Fetch a checkpoint from the Hugging Face hub into a local directory.

Runs detached, in the ml-env's Python (huggingface_hub comes with SGLang), started by the
`sglang_model_fetch` module, so that a download of ~54 GB outlives the module calls that watch
it and a re-run attaches to it instead of starting a second one. It writes its phase to a
JSON state file; the module reads it, and the bytes on disk, for the progress it shows.

    python sglang_fetch_worker.py REQUEST.json      (the token only in $HF_TOKEN)

Request: repo, revision (a commit), local_dir, state_file, allow_patterns, offline,
min_free_bytes. Standard library + huggingface_hub.
"""

import json
import os
import shutil
import sys
import tempfile
import time

MARKER = ".sglang-fetch.json"


def write_json(path, data):
    """Replace the state file whole (the module reads it at any time) through a temp file made
    safely beside it; this worker runs outside Ansible, so os.replace, not atomic_move."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                               prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def present_bytes(local_dir, files):
    """Bytes of `files` ({name: size}) already complete in local_dir."""
    done = 0
    for name, size in files.items():
        try:
            if os.path.getsize(os.path.join(local_dir, name)) == size:
                done += size
        except OSError:
            pass
    return done


def plan(request, token):
    """{name: size} of the files to fetch, and the commit the revision names."""
    from huggingface_hub import HfApi
    from huggingface_hub.utils import filter_repo_objects

    info = HfApi().model_info(request["repo"], revision=request["revision"],
                              files_metadata=True, token=token or None)
    # A hub or mirror that omits the sha: the asked revision is what gets fetched (never
    # revision=None, the default branch); one that answers another commit for a pinned one
    # is not trusted.
    sha = info.sha if isinstance(info.sha, str) and info.sha else request["revision"]
    pinned = len(request["revision"]) == 40 and all(c in "0123456789abcdef" for c in request["revision"])
    if pinned and sha != request["revision"]:
        raise RuntimeError(f"{request['repo']}: asked for commit {request['revision']}, the hub "
                           f"answered commit {sha[:40]!r}")
    siblings = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
    # An empty list would match nothing (huggingface_hub's rule): no patterns means all files.
    chosen = filter_repo_objects(list(siblings), allow_patterns=request.get("allow_patterns") or None)
    files = {name: siblings[name] for name in chosen}
    if not files:
        raise RuntimeError(f"{request['repo']}@{sha} has no file matching "
                           f"{request.get('allow_patterns')} (sglang_model_fetch.allow_patterns)")
    return files, sha


def check_disk(local_dir, files, min_free_bytes):
    need = sum(files.values()) - present_bytes(local_dir, files)
    free = shutil.disk_usage(local_dir).free
    if need + min_free_bytes > free:
        gb = 1e9
        raise RuntimeError(
            f"{local_dir} has {free / gb:.1f} GB free; the checkpoint needs {need / gb:.1f} GB "
            f"more plus {min_free_bytes / gb:.0f} GB kept free (sglang_model_fetch.min_free_gb): "
            "free space, or point sglang_model_path at a larger filesystem")
    return need


def run(request):
    state_file = request["state_file"]
    token = os.environ.pop("HF_TOKEN", "")
    local_dir = request["local_dir"]
    state = {"phase": "planning", "pid": os.getpid(), "started": time.time()}
    write_json(state_file, state)
    try:
        from huggingface_hub import snapshot_download

        if request.get("offline"):
            files, sha = None, request["revision"]
        else:
            files, sha = plan(request, token)
            state.update(phase="downloading", sha=sha, files=files,
                         total_bytes=sum(files.values()),
                         need_bytes=check_disk(local_dir, files, request["min_free_bytes"]))
            write_json(state_file, state)
        snapshot_download(repo_id=request["repo"], revision=sha, local_dir=local_dir,
                          allow_patterns=request.get("allow_patterns") or None, token=token or None,
                          local_files_only=bool(request.get("offline")))
        if not os.path.isfile(os.path.join(local_dir, "config.json")):
            raise RuntimeError(f"{request['repo']}@{sha} has no config.json: not a checkpoint "
                               "SGLang can serve (check the repo and allow_patterns)")
        if files is None:
            files = {}
            for root, dirs, names in os.walk(local_dir):
                dirs[:] = [d for d in dirs if d != ".cache"]
                for name in names:
                    if name != MARKER:
                        path = os.path.join(root, name)
                        files[os.path.relpath(path, local_dir)] = os.path.getsize(path)
        marker = {"repo": request["repo"], "revision": request["revision"], "sha": sha,
                  "allow_patterns": request.get("allow_patterns"), "files": len(files),
                  "total_bytes": sum(files.values()), "fetched_at": time.time()}
        write_json(os.path.join(local_dir, MARKER), marker)
        state.update(phase="done", **{k: marker[k] for k in ("files", "total_bytes")})
        state.pop("need_bytes", None)
    except Exception as exc:  # everything the hub or the disk can raise ends as a state
        state.update(phase="failed", error=f"{type(exc).__name__}: {exc}")
    state["ended"] = time.time()
    write_json(state_file, state)
    return 0 if state["phase"] == "done" else 1


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as request_file:
        sys.exit(run(json.load(request_file)))
