"""Turn a model profile plus the operator's overrides into what a release holds.

Pure functions, unit-tested without Ansible (tests/unit/test_sglang_render.py). Every bad
input raises AnsibleFilterError with a message that names the variable and what to change.
"""

import os
import re
import sys

import yaml
from ansible.errors import AnsibleFilterError

# Ansible loads each filter file on its own: make the sibling helper importable.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sglang_filter_errors import own_errors  # noqa: E402


ARG_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PROFILE_KEYS = {"description", "min_sglang_version", "model", "args", "env", "expect", "smoke"}
MODEL_KEYS = {"path", "revision", "served_model_name"}
# Arguments the role owns through its own variables: set them there, not in args.
ROLE_OWNED = {
    "model-path": "sglang_model_path",
    "revision": "sglang_model_revision",
    "host": "sglang_host",
    "port": "sglang_port",
    "config": None,
}


def _plain(value):
    """Native Python types: ansible-core 2.19 hands filters tagged str/int/dict subclasses."""
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _dashed(name, where):
    if not isinstance(name, str):
        raise AnsibleFilterError(f"{where}: argument names must be strings, got {name!r}")
    dashed = name.strip().lstrip("-").replace("_", "-")
    if "=" in dashed:
        raise AnsibleFilterError(
            f"{where}: {name!r} looks like '--flag=value'; write it as a key and a value "
            "(e.g. 'tp-size: 2')"
        )
    if not ARG_NAME.match(dashed):
        raise AnsibleFilterError(
            f"{where}: {name!r} is not an SGLang argument name (lowercase, dashes)"
        )
    return dashed


def _owned(dashed, where):
    if dashed in ROLE_OWNED:
        owner = ROLE_OWNED[dashed]
        if owner is None:
            raise AnsibleFilterError(
                f"{where}: 'config' is not an argument you set: each release passes its own "
                "rendered file as '--config PATH' (never '--config=PATH', which SGLang ignores)"
            )
        raise AnsibleFilterError(f"{where}: set '{dashed}' through the variable {owner}")


def _scalar(value, where, name):
    if isinstance(value, (dict, list)):
        # SGLang's config file JSON-encodes dict values (0.5.16+); lists are nargs flags.
        return _plain(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return _plain(value)
    raise AnsibleFilterError(f"{where}: {name}: unsupported value {value!r}")


def sglang_profile_check(profile, name="sglang_profile"):
    """Validate the shape of a profile mapping; returns it unchanged."""
    if not isinstance(profile, dict):
        raise AnsibleFilterError(f"{name}: a profile is a mapping, got {type(profile).__name__}")
    unknown = sorted(set(profile) - PROFILE_KEYS)
    if unknown:
        raise AnsibleFilterError(
            f"{name}: unknown profile keys {unknown}; allowed: {sorted(PROFILE_KEYS)}"
        )
    model = profile.get("model")
    if not isinstance(model, dict) or not model.get("path"):
        raise AnsibleFilterError(f"{name}: model.path (a local directory or a hub id) is required")
    unknown = sorted(set(model) - MODEL_KEYS)
    if unknown:
        raise AnsibleFilterError(
            f"{name}: unknown model keys {unknown}; allowed: {sorted(MODEL_KEYS)}"
        )
    for key in ("args", "env", "expect", "smoke"):
        if not isinstance(profile.get(key, {}), dict):
            raise AnsibleFilterError(f"{name}: {key} must be a mapping")
    return profile


def sglang_server_config(profile, overrides=None, model_path="", model_revision="",
                         host="127.0.0.1", port=30000):
    """Return the server arguments for the release's config.yaml, dashed and ordered."""
    sglang_profile_check(profile)
    overrides = overrides or {}
    if not isinstance(overrides, dict):
        raise AnsibleFilterError("sglang_server_args must be a mapping of SGLang arguments")
    port = _port(port)

    model = profile["model"]
    merged = {"model-path": _plain(model_path or model["path"])}
    revision = model_revision or model.get("revision")
    if revision:
        merged["revision"] = _plain(revision)
    if model.get("served_model_name"):
        merged["served-model-name"] = _plain(model["served_model_name"])
    merged["host"] = _plain(host)
    merged["port"] = port

    for where, source in (("sglang_profile.args", profile.get("args") or {}),
                          ("sglang_server_args", overrides)):
        seen = {}
        for raw_name, value in source.items():
            dashed = _dashed(raw_name, where)
            if dashed in seen:
                raise AnsibleFilterError(
                    f"{where}: {raw_name!r} and {seen[dashed]!r} name the same argument "
                    f"'--{dashed}'; keep one"
                )
            seen[dashed] = raw_name
            _owned(dashed, where)
            if value is None:
                merged.pop(dashed, None)
            else:
                merged[dashed] = _scalar(value, where, dashed)

    _check_speculative(merged)
    return merged


def _port(port):
    """A TCP port from an int or the digits `-e sglang_port=...` gives as a string."""
    if isinstance(port, str) and port.strip().isdigit():
        port = int(port)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise AnsibleFilterError(f"sglang_port: {port!r} is not a TCP port (1-65535)")
    return port


def _check_speculative(args):
    algo = args.get("speculative-algorithm")
    if not algo:
        return
    if str(algo).upper() == "MTP":
        raise AnsibleFilterError(
            "speculative-algorithm: 'MTP' is not an SGLang value; MTP heads are run with "
            "'NEXTN' (SGLang resolves it to EAGLE)"
        )
    try:
        steps = int(args.get("speculative-num-steps", 0))
        topk = int(args.get("speculative-eagle-topk", 1))
        drafts = args.get("speculative-num-draft-tokens")
        drafts = None if drafts is None else int(drafts)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"speculative settings must be integers: {exc}") from exc
    if steps and topk == 1 and drafts is not None and drafts != steps + 1:
        raise AnsibleFilterError(
            f"speculative-eagle-topk 1 with speculative-num-steps {steps} needs "
            f"speculative-num-draft-tokens {steps + 1}, not {drafts}: set it to "
            f"{steps + 1} or drop it"
        )


def sglang_config_yaml(args):
    """The release's config.yaml: dashed keys, stable order, for `--config PATH`."""
    header = "# Rendered by sglang-deploy. Passed to SGLang as --config PATH; edit the inventory.\n"
    return header + yaml.safe_dump(_plain(dict(args)), default_flow_style=False, sort_keys=False)


def sglang_env_merge(profile, overrides=None):
    """Profile env, then the operator's sglang_env (a null value removes a variable)."""
    sglang_profile_check(profile)
    merged = {}
    for where, source in (("sglang_profile.env", profile.get("env") or {}),
                          ("sglang_env", overrides or {})):
        if not isinstance(source, dict):
            raise AnsibleFilterError(f"{where} must be a mapping of environment variables")
        for name, value in source.items():
            if not isinstance(name, str) or not ENV_NAME.match(name):
                raise AnsibleFilterError(f"{where}: {name!r} is not an environment variable name")
            if value is None:
                merged.pop(name, None)
                continue
            if isinstance(value, bool):
                value = "1" if value else "0"
            value = str(value)
            if "\n" in value or "\r" in value:
                raise AnsibleFilterError(f"{where}: {name} must be a single line")
            merged[name] = value
    return merged


def sglang_expect_merge(profile, overrides=None):
    """The profile's expectations, then the operator's sglang_expect (a null value removes one)."""
    merged = dict(profile.get("expect") or {})
    if not isinstance(overrides or {}, dict):
        raise AnsibleFilterError("sglang_expect must be a mapping")
    for key, value in (overrides or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return _plain(merged)


def sglang_env_file(env):
    """A systemd EnvironmentFile: one NAME="value" per line, sorted, escaped."""
    lines = ["# Rendered by sglang-deploy: environment of the SGLang server."]
    for name in sorted(env):
        value = str(env[name]).replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'{name}="{value}"')
    return "\n".join(lines) + "\n"


def sglang_pip_args(index_url="", extra_index_urls=None, wheelhouse="", no_index=False):
    """pip options for online installs, private indexes or an offline wheelhouse."""
    extra_index_urls = extra_index_urls or []
    if no_index and not wheelhouse:
        raise AnsibleFilterError(
            "sglang_pip_no_index needs sglang_pip_wheelhouse (the directory of wheels on the host)"
        )
    args = []
    if no_index:
        args.append("--no-index")
    elif index_url:
        args += ["--index-url", index_url]
    if not no_index:
        for url in extra_index_urls:
            args += ["--extra-index-url", url]
    if wheelhouse:
        args += ["--find-links", wheelhouse]
    return " ".join(args)


def sglang_connect_host(host):
    """Where a client on the host itself reaches a server bound to `host`."""
    if host in ("0.0.0.0", "", None):
        return "127.0.0.1"
    if host in ("::", "[::]"):
        return "[::1]"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class FilterModule:
    def filters(self):
        return {
            "sglang_profile_check": own_errors(sglang_profile_check),
            "sglang_server_config": own_errors(sglang_server_config),
            "sglang_config_yaml": own_errors(sglang_config_yaml),
            "sglang_env_merge": own_errors(sglang_env_merge),
            "sglang_env_file": own_errors(sglang_env_file),
            "sglang_expect_merge": own_errors(sglang_expect_merge),
            "sglang_pip_args": own_errors(sglang_pip_args),
            "sglang_connect_host": own_errors(sglang_connect_host),
        }
