"""One view of a server's /server_info, whatever the 0.5.x shape: what verification checks, what
preflight reads from SGLang's own resolution, and what the drift check on the host compares with
the release's record (standard library only: sglang_drift runs it outside Ansible)."""

SPEC_FIELDS = {"algorithm": "speculative_algorithm", "num_steps": "speculative_num_steps",
               "eagle_topk": "speculative_eagle_topk",
               "num_draft_tokens": "speculative_num_draft_tokens"}


def _on(backend):
    """Whether a graph backend is on; None when no backend is named (no evidence either way)."""
    return backend != "disabled" if isinstance(backend, str) else None


def _onoff(on):
    return None if on is None else ("on" if on else "off")


def _graphs(config):
    """(decode backend, prefill backend, prefill on, decode max bs, shape) from 0.5.16+
    cuda_graph_config."""
    decode = config.get("decode") if isinstance(config.get("decode"), dict) else {}
    prefill = config.get("prefill") if isinstance(config.get("prefill"), dict) else {}
    return (decode.get("backend"), prefill.get("backend"), _on(prefill.get("backend")),
            decode.get("max_bs"), "cuda_graph_config (0.5.16+)")


def effective_backend(info, phase):
    """The backend cuda_graph_config names for a phase (0.5.16+), or None."""
    config = info.get("cuda_graph_config")
    return _graphs(config)[0 if phase == "decode" else 1] if isinstance(config, dict) else None


def _legacy_graphs(info):
    """The same from the <= 0.5.12 flags (prefill on: None when this version does not say)."""
    decode_on = not info["disable_cuda_graph"] if "disable_cuda_graph" in info else None
    if "disable_piecewise_cuda_graph" in info:
        asked = not info["disable_piecewise_cuda_graph"]
    elif "enable_piecewise_cuda_graph" in info:  # 0.5.4 - 0.5.9: opt-in
        asked = bool(info["enable_piecewise_cuda_graph"])
    else:
        asked = None
    # Off when its own flag says so; on only when the decode graph is on too.
    prefill_on = False if asked is False or decode_on is False else (
        None if asked is None or decode_on is None else True)
    prefill_backend = None if prefill_on is None else ("piecewise" if prefill_on else "disabled")
    decode_backend = None if decode_on is None else ("full" if decode_on else "disabled")
    return (decode_backend, prefill_backend, prefill_on,
            info.get("cuda_graph_max_bs"), "legacy flags (<= 0.5.12)")


def _speculative(info):
    if not info.get("speculative_algorithm"):
        return None
    speculative = {k: info.get(v) for k, v in SPEC_FIELDS.items()}
    speculative["algorithm"] = str(speculative["algorithm"]).upper()
    return speculative


def _accept_length(info):
    accepts = [s.get("avg_spec_accept_length") for s in info.get("internal_states") or []
               if isinstance(s, dict) and s.get("avg_spec_accept_length") is not None]
    return round(sum(accepts) / len(accepts), 3) if accepts else None


def effective(info):
    """One view of /server_info (0.5.16+ cuda_graph_config, or the <= 0.5.12 flags); ValueError
    when it is not a JSON object."""
    if not isinstance(info, dict):
        raise ValueError("/server_info did not answer a JSON object")
    config = info.get("cuda_graph_config")
    decode_backend, prefill_backend, prefill_on, max_bs, shape = \
        _graphs(config) if isinstance(config, dict) else _legacy_graphs(info)
    return {
        "version": info.get("version"),
        "shape": shape,
        "tp_size": info.get("tp_size"),
        "decode_cuda_graph": _onoff(_on(decode_backend)),
        "decode_backend": decode_backend,
        "decode_max_bs": max_bs,
        "prefill_cuda_graph": _onoff(prefill_on),
        "prefill_backend": prefill_backend,
        "speculative": _speculative(info),
        "attention_backend": info.get("attention_backend"),
        "accept_length": _accept_length(info),
        "launch_command": info.get("launch_command"),
    }
