"""Refuse inputs the host contradicts, before anything on the host changes.

`sglang_host_inputs` judges the rendered arguments against read-only facts gathered before
the lock, the install and the release: GPUs for the tensor-parallel size, the model
directory and its config.json (who holds the port and the GPUs: the sglang_free module).
Each failure names the variable and the fix.
Unit-tested in tests/unit/test_sglang_inputs.py.
"""

import os

from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_tp import local_tp, tp_gpus
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_values import int_arg


def _gpus(facts, args, env):
    tp = int_arg(args, "tp-size", 1)
    if tp is None or tp < 1:
        return [f"tp-size: {tp} is not a tensor-parallel size; set tp-size to 1 or more "
                "(sglang_server_args or the profile)"]
    local = local_tp(args)  # one model over several nodes: this node's ranks
    if not (facts.get("gpus") or {}).get("present"):
        return []  # preflight reports a host without GPU facts; nothing to count here
    indices, why = tp_gpus(facts, env, local)
    if why:
        return [f"sglang_env: {why}; fix CUDA_VISIBLE_DEVICES"]
    if local > len(indices):
        where = "" if local == tp else f" on each of its {tp // local} nodes"
        return [f"tp-size: {tp} needs {local} GPUs{where} and this host shows {len(indices)} "
                f"(CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', 'unset')}); lower tp-size "
                "in sglang_server_args or deploy to a host with more GPUs"]
    return []


def _model(facts, args):
    model = facts.get("model") or {}
    path = str(args.get("model-path") or "")
    if not model.get("source"):
        if path.startswith(("/", ".", "~")) or path.count("/") != 1:
            return [f"sglang_model_path: {path!r} is not a directory on this host; copy the "
                    "checkpoint there or point sglang_model_path at it"]
        return []  # a hub id SGLang downloads at start
    if not model.get("config_path"):
        return [f"sglang_model_path: {path} has no config.json; point sglang_model_path at the "
                "checkpoint directory itself (the one holding config.json and the weights)"]
    archs = model.get("architectures")
    if archs is not None and (not isinstance(archs, list)
                              or not all(isinstance(a, str) for a in archs)):
        return [f"sglang_model_path: {model['config_path']} has architectures {archs!r}; a "
                "checkpoint's config.json lists them, e.g. [\"Qwen3_5ForConditionalGeneration\"]: "
                "fix the file or point sglang_model_path at the right checkpoint"]
    return []


def sglang_host_inputs(facts, args, env=None, fetching=False):
    """{ok, failures}: what the host says against the rendered arguments. A checkpoint the
    deploy fetches (`fetching`) is not there yet: the fetch checks it once it is.

    Args:
        facts: what sglang_facts read on the host before the lock (__sglang_host_facts):
            its GPUs and the model directory with its config.json, a mapping.
        args: the rendered server arguments (__sglang_server_config), dashed: tp-size and
            model-path are read.
        env: the server's environment (__sglang_server_env): its CUDA_VISIBLE_DEVICES picks
            the GPUs counted.
        fetching: true when the deploy fetches the checkpoint (sglang_model_fetch set): the
            model directory is then not checked.
    """
    if not isinstance(facts, dict) or not isinstance(args, dict):
        raise AnsibleFilterError("sglang_host_inputs: facts and args must be mappings")
    env = dict(env or {})
    model = [] if fetching else _model(facts, args)
    failures = _gpus(facts, args, env) + model
    return {"ok": not failures, "failures": failures}


FETCH_KEYS = {"repo", "revision", "allow_patterns", "offline", "min_free_gb", "timeout"}


def sglang_fetch_plan(fetch, model_path="", model_revision="", env=None):
    """The checked sglang_model_fetch ({} when off): a hub id, pinned to a full commit, fetched
    into sglang_model_path (an absolute directory). Offline when asked, or when
    HF_HUB_OFFLINE=1 is in sglang_env: then only what is on disk is used.

    Args:
        fetch: sglang_model_fetch: {repo, revision, allow_patterns, offline, min_free_gb,
            timeout}, or empty to fetch nothing.
        model_path: sglang_model_path: the absolute directory the checkpoint is fetched into.
        model_revision: sglang_model_revision: must be empty beside a fetch.
        env: the server's environment (the profile's env merged with sglang_env): HF_HUB_OFFLINE
            1 or true in it makes the fetch offline unless fetch sets offline.
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


class FilterModule:
    def filters(self):
        return {"sglang_host_inputs": own_errors(sglang_host_inputs),
                "sglang_fetch_plan": own_errors(sglang_fetch_plan)}
