"""Whether the unit lets SGLang reach the Hugging Face hub.

Where SGLang and its kernels write their caches under a hardened unit (one writable directory)
is plugins/plugin_utils/sglang_cache_env.py, whose lines sglang_unit_hardening appends.
"""

import os


def sglang_unit_hub_env(model_path):
    """`Environment=HF_HUB_OFFLINE=1` when the model is a local directory (an absolute path):
    SGLang then never reaches the hub (no download into the cache, no waiting on a network it
    may not have). A hub id gets nothing. sglang_env can still set HF_HUB_OFFLINE itself.

    Args:
        model_path (str): the server's model-path (a local directory or a hub id).
    Returns:
        list of str: the unit's Environment= line, or no line for a hub id.
    """
    path = str(model_path or "")
    return ["Environment=HF_HUB_OFFLINE=1"] if os.path.isabs(path) else []


class FilterModule:
    def filters(self):
        return {
            "sglang_unit_hub_env": sglang_unit_hub_env,
        }
