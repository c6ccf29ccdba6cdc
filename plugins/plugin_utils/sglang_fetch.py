"""sglang_model_fetch read once: for the fetch (sglang_fetch_plan, host/fetch_model.yml)
and for the one-pass input check (sglang_input_violations), each refusal naming the variable
and the fix."""

import os

from ansible.errors import AnsibleFilterError

FETCH_KEYS = {"repo", "revision", "allow_patterns", "offline", "min_free_gb", "timeout"}


def sglang_fetch_plan(fetch, model_path="", model_revision="", env=None):
    """The checked sglang_model_fetch ({} when off): a hub id, pinned to a full commit, fetched
    into sglang_model_path (an absolute directory). Offline when asked, or when
    HF_HUB_OFFLINE=1 is in sglang_env: then only what is on disk is used.

    Args:
        fetch (dict): sglang_model_fetch: {repo, revision, allow_patterns, offline, min_free_gb,
            timeout}, or empty to fetch nothing.
        model_path (path): sglang_model_path: the absolute directory the checkpoint is fetched
            into.
        model_revision (str): sglang_model_revision: must be empty beside a fetch.
        env (dict): the server's environment (the profile's env merged with sglang_env):
            HF_HUB_OFFLINE 1 or true in it makes the fetch offline unless fetch sets offline.
    Returns:
        dict: {repo, revision, allow_patterns, offline, min_free_gb, timeout}, or empty when
            nothing is fetched.
    """
    if not fetch:
        return {}
    if not isinstance(fetch, dict):
        raise AnsibleFilterError("sglang_model_fetch must be a mapping, e.g. {repo: "
                                 "Qwen/Qwen3.6-27B, revision: <commit>}, or {} to fetch nothing")
    unknown = sorted(set(fetch) - FETCH_KEYS)
    if unknown:
        raise AnsibleFilterError(f"sglang_model_fetch: unknown keys {unknown}; known: "
                                 f"{sorted(FETCH_KEYS)}")
    repo, revision = _fetch_source(fetch)
    _fetch_target(model_path, model_revision)
    patterns = fetch.get("allow_patterns") or []
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        raise AnsibleFilterError("sglang_model_fetch.allow_patterns must be a list of globs, "
                                 "e.g. ['*.json', '*.safetensors', 'tokenizer*']")
    offline = fetch.get("offline", str((env or {}).get("HF_HUB_OFFLINE", "")) in ("1", "true"))
    return {"repo": repo, "revision": revision, "allow_patterns": patterns,
            "offline": bool(offline), **_fetch_numbers(fetch)}


def _fetch_source(fetch):
    """(repo, revision): a hub id pinned to a full commit."""
    repo, revision = str(fetch.get("repo") or ""), str(fetch.get("revision") or "")
    if repo.count("/") != 1 or repo.startswith(("/", ".", "~")) or " " in repo:
        raise AnsibleFilterError(f"sglang_model_fetch.repo {repo!r} is not a hub id: give "
                                 "owner/name, e.g. Qwen/Qwen3.6-27B")
    if not (len(revision) == 40 and all(c in "0123456789abcdef" for c in revision)):
        raise AnsibleFilterError(
            f"sglang_model_fetch.revision {revision!r} is not a commit: pin the full 40-character "
            f"commit hash (the hub's 'Files' tab, or `hf repo info {repo}`), so that every host "
            "and every re-run fetches the same weights")
    return repo, revision


def _fetch_target(model_path, model_revision):
    """sglang_model_path a directory of its own; no sglang_model_revision beside a fetch."""
    path = str(model_path or "")
    if not os.path.isabs(path) or os.path.normpath(path) in ("/", "/srv", "/opt", "/root"):
        raise AnsibleFilterError(
            f"sglang_model_path {path!r} must name the directory the checkpoint is fetched "
            "into, an absolute path of its own (e.g. /srv/models/Qwen3.6-27B)")
    if model_revision:
        raise AnsibleFilterError(
            "sglang_model_revision is for a hub id SGLang downloads itself; with "
            "sglang_model_fetch the directory is the revision: leave sglang_model_revision empty")


def _fetch_numbers(fetch):
    numbers = {}
    # Finite and in a sane range: nan passes `< 0`, inf and 1e30 overflow the module's int().
    for key, default, most in (("min_free_gb", 10, 10 ** 6), ("timeout", 14400, 30 * 86400)):
        value = fetch.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not 0 <= value <= most:
            raise AnsibleFilterError(f"sglang_model_fetch.{key} must be a number from 0 to "
                                     f"{most}, not {value!r}")
        numbers[key] = value
    return numbers
