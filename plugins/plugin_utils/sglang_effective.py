"""The controller's door to module_utils/sglang_effective: its errors as filter errors."""

from ansible.errors import AnsibleFilterError
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_effective import effective


def sglang_effective(info):
    """One view of /server_info (0.5.16+ cuda_graph_config, or the <= 0.5.12 flags).

    Args:
        info (dict): the JSON object /server_info (or /get_server_info) answered.
    Returns:
        dict: {version, shape, tp_size, decode_cuda_graph, decode_backend, decode_max_bs,
            prefill_cuda_graph, prefill_backend, speculative, attention_backend, accept_length,
            launch_command}.
    """
    try:
        return effective(info)
    except ValueError as exc:
        raise AnsibleFilterError(f"sglang_effective: {exc}") from None
