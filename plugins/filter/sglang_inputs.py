"""Refuse inputs the host contradicts, before anything on the host changes.

`sglang_host_inputs` judges the rendered arguments against read-only facts gathered before
the lock, the install and the release: GPUs for the tensor-parallel size, the model
directory and its config.json (who holds the port and the GPUs: the sglang_free module).
Each failure names the variable and the fix. `sglang_fetch_plan`, the checked checkpoint fetch,
is read in plugin_utils/sglang_fetch.py (the one-pass input check reads it too).
Unit-tested in tests/unit/test_sglang_inputs.py.
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_fetch import sglang_fetch_plan
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
        facts (dict): what sglang_facts read on the host before the lock (__sglang_host_facts): its
            GPUs and the model directory with its config.json, a mapping.
        args (dict): the rendered server arguments (__sglang_server_config), dashed: tp-size and
            model-path are read.
        env (dict): the server's environment (__sglang_server_env): its CUDA_VISIBLE_DEVICES picks
            the GPUs counted.
        fetching (bool): true when the deploy fetches the checkpoint (sglang_model_fetch set): the
            model directory is then not checked.
    Returns:
        dict: {ok, failures}: ok when nothing failed, each failure naming the variable and the fix.
    """
    if not isinstance(facts, dict) or not isinstance(args, dict):
        raise AnsibleFilterError("sglang_host_inputs: facts and args must be mappings")
    env = dict(env or {})
    model = [] if fetching else _model(facts, args)
    failures = _gpus(facts, args, env) + model
    return {"ok": not failures, "failures": failures}


class FilterModule:
    def filters(self):
        return {"sglang_host_inputs": own_errors(sglang_host_inputs),
                "sglang_fetch_plan": own_errors(sglang_fetch_plan)}
