"""Which GPUs of a host a release's tensor-parallel ranks use (preflight and host inputs)."""

from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_values import int_arg


def tp_gpus(facts, env, tp):
    """(nvidia-smi indices of the GPUs the TP ranks use, None) — the first tp of
    CUDA_VISIBLE_DEVICES — or (None, why) when CUDA_VISIBLE_DEVICES names one not listed."""
    gpus = facts.get("gpus") or {}
    indices = [d["index"] for d in gpus.get("devices") or []]
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and str(visible).strip() != "":
        chosen = []
        for item in str(visible).split(","):
            item = item.strip()
            if item.isdigit() and int(item) in indices:
                chosen.append(int(item))
            elif item.isdigit():
                return None, f"CUDA_VISIBLE_DEVICES names GPU {item}, which nvidia-smi does not list"
            else:
                return None, f"CUDA_VISIBLE_DEVICES entry {item!r} is not an index this check reads"
        indices = chosen
    return indices, None


def local_tp(args):
    """Tensor-parallel ranks on this node: --tp-size over --nnodes."""
    tp, nnodes = int_arg(args, "tp-size", 1) or 1, int_arg(args, "nnodes", 1) or 1
    if tp % nnodes:
        raise AnsibleFilterError(
            f"tp-size {tp} is not a multiple of nnodes {nnodes} (the hosts of sglang_nodes_group): "
            "each node runs tp-size / nnodes ranks")
    return tp // nnodes
