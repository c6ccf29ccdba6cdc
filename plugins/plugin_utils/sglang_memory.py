"""Do the checkpoint's weights fit the GPUs? The preflight's `memory` row.

SGLang accepting the arguments says nothing of this: 2x 24 GB with a 27B bf16 checkpoint at
tp 2 resolves fine and then stops loading. What is counted is what SGLang's own loader would
load: the probe asks `DefaultModelLoader._prepare_weights` which files it selects for this
checkpoint and load format (a `consolidated.safetensors` beside indexed shards, `.bin` files
beside safetensors are never loaded) and reads their tensors' sizes from the safetensors
headers (sglang_probe_weights.checkpoint_weights).

Per GPU, as SGLang shards them: matrices (2 or more dimensions: the parallel linear layers and
the vocabulary-parallel embedding) are split over the tp x pp ranks; vectors (norms, biases) are
kept whole on each rank of a pipeline stage. Each GPU keeps `mem_fraction_static` of its memory
for the weights and the KV cache together (SGLang's own figure when it resolved the release), so
what the weights leave of that share is the KV cache.

Fail closed: without SGLang's selection, the GPUs' memory or the resolved fraction, the row is
`unknown` with the reason, never `fits`.
"""

from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_values import positive

GIB = 1024 ** 3
# Less than this share of a GPU left for the KV cache is a warning: a handful of requests.
LITTLE_KV = 0.10


def _gpu_mib(facts, used):
    """The smallest memory (MiB) among the GPUs the ranks use, or None when unknown."""
    devices = [d for d in (facts.get("gpus") or {}).get("devices") or [] if isinstance(d, dict)]
    if used is not None:
        devices = [d for d in devices if d.get("index") in used]
    sizes = [positive(d.get("memory_mib")) for d in devices]
    return min(sizes) if sizes and None not in sizes else None


def _byte_count(weights, name):
    value = weights.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def per_gpu_bytes(weights, tp, pp):
    """(bytes per GPU, None) from SGLang's file selection, or (None, why it cannot be said)."""
    if not isinstance(weights, dict):
        return None, "SGLang did not resolve the release here, so its loader was not asked " \
                     "which weight files it loads"
    if weights.get("error"):
        return None, f"SGLang's loader could not select the weight files: {weights['error']}"
    files = weights.get("files")
    sharded = _byte_count(weights, "sharded_bytes")
    replicated = _byte_count(weights, "replicated_bytes")
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files) \
            or sharded is None or replicated is None:
        return None, "the loader's answer holds no files and sizes"
    unread = weights.get("unread")
    if not isinstance(unread, list):
        return None, "the loader's answer does not say which headers it could not read"
    if unread:
        return None, f"headers that cannot be read: {'; '.join(map(str, unread))}"
    tp, pp = max(int(tp or 1), 1), max(int(pp or 1), 1)
    return sharded / (tp * pp) + replicated / pp, None


def _selection(weights, per_gpu, tp, pp):
    files = weights["files"]
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    total = (weights["sharded_bytes"] + weights["replicated_bytes"]) / GIB
    by_file = weights.get("sized_by_file") or []
    return (f"{len(files)} files SGLang loads ({shown}; {weights.get('selected_by')}), "
            f"{total:.1f} GiB" + (f" ({len(by_file)} sized by the file: no header)" if by_file
                                  else f" in {weights.get('tensors')} tensors")
            + f": {per_gpu / GIB:.1f} GiB per GPU at tp {tp} x pp {pp}")


def memory(facts, weights, tp, pp, used, fraction):
    """(predicted, status, evidence) of the weights per GPU against the GPU's memory.

    `weights`: the resolution's `weights` (None when SGLang did not resolve); `tp`, `pp`: the
    resolved sizes; `used`: the GPU indices of this node's ranks (None: all listed);
    `fraction`: the resolved mem_fraction_static."""
    per_gpu, why = per_gpu_bytes(weights, tp, pp)
    if per_gpu is None:
        return "unknown", "unknown", f"{why}: nothing to check the GPUs' memory against"
    split = _selection(weights, per_gpu, max(int(tp or 1), 1), max(int(pp or 1), 1))
    mib = _gpu_mib(facts, used)
    if mib is None:
        return "unknown", "unknown", f"{split}; no GPU memory to check it against"
    gpu, need = mib / 1024, per_gpu / GIB
    if need >= gpu:
        return ("does not fit", "fail",
                f"{split}, more than the {gpu:.1f} GiB a GPU has: the weights alone cannot be "
                "loaded. Use more GPUs (tp-size), a smaller or quantized checkpoint")
    fraction = positive(fraction)
    if fraction is None:
        return "unknown", "unknown", (f"{split} of {gpu:.1f} GiB; mem_fraction_static not "
                                      "resolved: whether the KV cache gets room is unknown")
    budget = gpu * min(fraction, 1.0)
    left = budget - need
    where = (f"{split}; mem_fraction_static {fraction:g} of {gpu:.1f} GiB is {budget:.1f} GiB "
             "for weights and KV cache")
    if left <= 0:
        return ("does not fit", "fail",
                f"{where}: nothing left for the KV cache, SGLang stops at start. Raise "
                "mem-fraction-static, use more GPUs (tp-size) or a smaller checkpoint")
    if left < LITTLE_KV * gpu:
        return ("tight", "warn",
                f"{where}: {left:.1f} GiB left for the KV cache, under {LITTLE_KV:.0%} of the "
                "GPU: few requests at once")
    return "fits", "ok", f"{where}: {left:.1f} GiB left for the KV cache"
