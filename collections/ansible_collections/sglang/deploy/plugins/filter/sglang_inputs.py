"""Refuse inputs the host contradicts, before anything on the host changes.

`sglang_host_inputs` judges the rendered arguments against read-only facts gathered before
the lock, the install and the release: GPUs for the tensor-parallel size, the model
directory and its config.json, the port. Each failure names the variable and the fix.
Unit-tested in tests/unit/test_sglang_inputs.py.
"""


from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors
from ansible_collections.sglang.deploy.plugins.filter.sglang_preflight import _int, _tp_gpus, local_tp


def _gpus(facts, args, env):
    tp = _int(args, "tp-size", 1)
    if tp is None or tp < 1:
        return [f"tp-size: {tp} is not a tensor-parallel size; set tp-size to 1 or more "
                "(sglang_server_args or the profile)"]
    local = local_tp(args)  # one model over several nodes: this node's ranks
    if not (facts.get("gpus") or {}).get("present"):
        return []  # preflight reports a host without GPU facts; nothing to count here
    indices, why = _tp_gpus(facts, env, local)
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


def _port(facts, service):
    port = facts.get("port") or {}
    if not port.get("listening"):
        return []
    mine = f"{service}.service"
    others = [h for h in port.get("holders") or [] if h.get("unit") != mine]
    if port.get("holders") and not others:
        return []  # this service, on a re-run
    unit = facts.get("service") or {}
    if not port.get("holders") and unit.get("active") and port.get("uids") == [unit.get("uid")]:
        # Holders unreadable (no CAP_SYS_PTRACE): a socket of the running service's user, on
        # a port nobody else can hold while it runs, is taken to be this service's.
        return []
    who = "; ".join(f"pid {h['pid']} ({h.get('command') or '?'}"
                    + (f", {h['unit']}" if h.get("unit") else "") + ")" for h in others)
    return [f"sglang_port: {port['port']} is already held by "
            f"{who or 'a process of uid ' + ','.join(map(str, port.get('uids') or ['?']))}"
            "; choose another sglang_port or stop it"]


def sglang_host_inputs(facts, args, env=None, service="sglang"):
    """{ok, failures}: what the host says against the rendered arguments."""
    if not isinstance(facts, dict) or not isinstance(args, dict):
        raise AnsibleFilterError("sglang_host_inputs: facts and args must be mappings")
    env = dict(env or {})
    failures = _gpus(facts, args, env) + _model(facts, args) + _port(facts, service)
    return {"ok": not failures, "failures": failures}


class FilterModule:
    def filters(self):
        return {"sglang_host_inputs": own_errors(sglang_host_inputs)}
