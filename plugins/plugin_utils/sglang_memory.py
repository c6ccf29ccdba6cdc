"""Do the checkpoint's weights fit the GPUs? The preflight's `memory` row.

SGLang accepting the arguments says nothing of this: 2x 24 GB with a 27B bf16 checkpoint at
tp 2 resolves fine and then stops loading. The weights are split over the ranks of tensor and
pipeline parallelism; each GPU keeps `mem_fraction_static` of its memory for the weights and
the KV cache together (SGLang's own figure when it resolved the release), so what the weights
leave of that share is the KV cache.
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


def memory(facts, ranks, used, fraction):
    """(predicted, status, evidence) of the weights per GPU against the GPU's memory.

    `ranks`: the GPUs the weights are split over (tp x pp); `used`: the GPU indices of this
    node's ranks (None: all listed); `fraction`: the resolved mem_fraction_static (None when
    SGLang did not resolve the release)."""
    weights = positive((facts.get("model") or {}).get("weight_bytes"))
    if weights is None:
        return ("unknown", "ok", "the checkpoint's size cannot be read (no *.safetensors or "
                "*.bin beside its config.json): nothing to check the GPUs' memory against")
    per_gpu = weights / max(int(ranks or 1), 1) / GIB
    mib = _gpu_mib(facts, used)
    split = f"{weights / GIB:.1f} GiB of weights over {ranks} GPUs: {per_gpu:.1f} GiB per GPU"
    if mib is None:
        return "unknown", "ok", f"{split}; no GPU memory to check it against"
    gpu = mib / 1024
    if per_gpu >= gpu:
        return ("does not fit", "fail",
                f"{split}, more than the {gpu:.1f} GiB a GPU has: the weights alone cannot be "
                "loaded. Use more GPUs (tp-size), a smaller or quantized checkpoint")
    fraction = positive(fraction)
    if fraction is None:
        return "fits", "ok", (f"{split} of {gpu:.1f} GiB (mem_fraction_static not resolved: "
                              "the KV cache's share unknown)")
    budget = gpu * min(fraction, 1.0)
    left = budget - per_gpu
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
