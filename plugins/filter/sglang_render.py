"""Turn a model profile plus the operator's overrides into what a release holds.

Pure functions, unit-tested without Ansible (tests/unit/test_sglang_render.py). Every bad
input raises AnsibleFilterError with a message that names the variable and what to change.
"""

import json
import os
import re

import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_systemd import env_file_line
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_args import dashed, env_name, named, \
    not_owned, single_line
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_cache_env import unit_cache_env
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_hosts import advertised_address, bracketed
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_values import plain

ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
UNIT_NAME = re.compile(r"[A-Za-z0-9_.@:-]{1,200}")
PROFILE_KEYS = {"tune", "description", "min_sglang_version", "model", "args", "env", "expect", "smoke"}
MODEL_KEYS = {"path", "revision", "served_model_name"}
# What launch.py passes on: single-line tokens, so a log line never splits one.
API_KEY = re.compile(r"^[A-Za-z0-9._~+/=-]{16,512}$")


def _unit_path(path, where):
    path = single_line(path, where)
    if not os.path.isabs(path) or any(c.isspace() for c in path) or "%" in path \
            or os.path.normpath(path) != path:
        raise AnsibleFilterError(f"{where}: {path!r} must be a normalised absolute path without "
                                 "spaces or '%'")
    return path


def sglang_unit_check(settings):
    """Validate the role variables that the unit and launch files are rendered from.

    `settings` maps variable names to values: *_user / *_group are account names, *_dir /
    *_path / sglang_venv absolute paths, sglang_service_name a unit name, the rest single
    lines. Returns the mapping unchanged.

    Args:
        settings: {variable name: value} of the variables the unit and launch files use.
    """
    settings = plain(settings)
    if not isinstance(settings, dict):
        raise AnsibleFilterError("sglang_unit_check takes a mapping of variable names to values")
    for name, value in settings.items():
        if name.endswith("cache_dir") and value in ("", None):
            continue  # no cache directory: none is rendered
        if name.endswith(("_user", "_group")):
            named(single_line(value, name), ACCOUNT, name, "a user or group name ([a-z_][a-z0-9_-]*)")
        elif name.endswith(("_dir", "_path", "_venv")):
            _unit_path(value, name)
        elif name.endswith("_name"):
            named(single_line(value, name), UNIT_NAME, name, "a systemd unit name")
        else:
            single_line(value, name)
    return settings


def _scalar(value, where, name):
    if isinstance(value, (dict, list)):
        # SGLang's config file JSON-encodes dict values (0.5.16+); lists are nargs flags.
        return plain(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return plain(value)
    raise AnsibleFilterError(f"{where}: {name}: unsupported value {value!r}")


def sglang_profile_check(profile, name="sglang_profile"):
    """Validate the shape of a profile mapping; returns it unchanged.

    Args:
        profile: the profile as loaded: sglang_profile when it is a mapping, else
            roles/sglang/profiles/<sglang_profile>.yml read as YAML.
        name: what the error messages call the profile; the role leaves the default.
    """
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
                         host="127.0.0.1", port=30000, metrics=False):
    """Return the server arguments for the release's config.yaml, dashed and ordered.

    `metrics` (sglang_enable_metrics) adds `enable-metrics: true` when neither the profile nor
    the overrides name it (they win, `null` included).

    Args:
        profile: the profile as loaded (a mapping, checked by sglang_profile_check).
        overrides: sglang_server_args: SGLang arguments over the profile's args; a null value
            removes one.
        model_path: sglang_model_path: replaces the profile's model.path (empty: the
            profile's).
        model_revision: sglang_model_revision: replaces the profile's model.revision (empty:
            the profile's).
        host: sglang_host: the address the server listens on.
        port: sglang_port: a TCP port (digits as a string too).
        metrics: sglang_enable_metrics: add enable-metrics unless the profile or the overrides
            name it.
    """
    sglang_profile_check(profile)
    overrides = overrides or {}
    if not isinstance(overrides, dict):
        raise AnsibleFilterError("sglang_server_args must be a mapping of SGLang arguments")
    port = _port(port)

    model = profile["model"]
    merged = {"model-path": plain(model_path or model["path"])}
    revision = model_revision or model.get("revision")
    if revision:
        merged["revision"] = plain(revision)
    if model.get("served_model_name"):
        merged["served-model-name"] = plain(model["served_model_name"])
    merged["host"] = plain(host)
    merged["port"] = port

    named = set()
    for where, source in (("sglang_profile.args", profile.get("args") or {}),
                          ("sglang_server_args", overrides)):
        seen = {}
        for raw_name, value in source.items():
            flag = not_owned(dashed(raw_name, where), where)
            if flag in seen:
                raise AnsibleFilterError(
                    f"{where}: {raw_name!r} and {seen[flag]!r} name the same argument "
                    f"'--{flag}'; keep one"
                )
            seen[flag] = raw_name
            named.add(flag)
            if value is None:
                merged.pop(flag, None)
            else:
                merged[flag] = _scalar(value, where, flag)

    if metrics and "enable-metrics" not in named:
        merged["enable-metrics"] = True
    _check_speculative(merged)
    return merged


def _port(port, variable="sglang_port"):
    """A TCP port from an int or the digits `-e sglang_port=...` gives as a string."""
    if isinstance(port, str) and port.strip().isdigit():
        port = int(port)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise AnsibleFilterError(f"{variable}: {port!r} is not a TCP port (1-65535)")
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
    """The release's config.yaml: dashed keys, stable order, for `--config PATH`.

    Args:
        args: the server's arguments, SGLang's option names without `--`.
    """
    header = "# Rendered by sglang-deploy. Passed to SGLang as --config PATH; edit the inventory.\n"
    return header + yaml.safe_dump(plain(dict(args)), default_flow_style=False, sort_keys=False)


def sglang_env_merge(profile, overrides=None):
    """Profile env, then the operator's sglang_env (a null value removes a variable).

    Args:
        profile: the profile as loaded (its env: mapping, if any).
        overrides: sglang_env: variables that replace the profile's; a null value removes one.
    """
    sglang_profile_check(profile)
    merged = {}
    for where, source in (("sglang_profile.env", profile.get("env") or {}),
                          ("sglang_env", overrides or {})):
        if not isinstance(source, dict):
            raise AnsibleFilterError(f"{where} must be a mapping of environment variables")
        for name, value in source.items():
            env_name(name, where)
            if value is None:
                merged.pop(name, None)
                continue
            if isinstance(value, bool):
                value = "1" if value else "0"
            merged[name] = single_line(value, f"{where}.{name}")
    return merged


def sglang_expect_merge(profile, overrides=None):
    """The profile's expectations, then the operator's sglang_expect (a null value removes one).

    Args:
        profile: the profile as loaded (its expect: mapping, if any).
        overrides: sglang_expect: expectations that replace the profile's; a null value
            removes one.
    """
    merged = dict(profile.get("expect") or {})
    if not isinstance(overrides or {}, dict):
        raise AnsibleFilterError("sglang_expect must be a mapping")
    for key, value in (overrides or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return plain(merged)


def sglang_env_file(env):
    """A systemd EnvironmentFile: one NAME="value" per line, sorted, escaped.

    Args:
        env: the server's environment, {NAME: value}.
    """
    lines = ["# Rendered by sglang-deploy: environment of the SGLang server."]
    for name in sorted(env):
        env_name(name, "sglang_env")
        lines.append(env_file_line(name, single_line(env[name], f"sglang_env.{name}")))
    return "\n".join(lines) + "\n"


def sglang_pip_args(index_url="", extra_index_urls=None, wheelhouse="", no_index=False):
    """pip options for online installs, private indexes or an offline wheelhouse.

    Args:
        index_url: sglang_pip_index_url: the index in place of PyPI (empty: pip's default).
        extra_index_urls: sglang_pip_extra_index_urls: more indexes to search.
        wheelhouse: the directory of wheels on the host (--find-links).
        no_index: install from the wheelhouse alone (--no-index); refused without one.
    """
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


# Unit settings the role writes itself: sglang_service_hardening may not override them.
UNIT_OWNED = {"User", "Group", "ExecStart", "EnvironmentFile", "Environment", "WorkingDirectory",
              "RuntimeDirectory", "RuntimeDirectoryMode", "Restart", "Type", "KillMode",
              "ReadWritePaths"}
UNIT_KEY = re.compile(r"[A-Z][A-Za-z]+")
HOME_DIRS = ("/root", "/home", "/run/user")


def _under(path, roots):
    path = os.path.normpath(str(path))
    return any(path == root or path.startswith(root + "/") for root in roots)


def sglang_unit_hardening(hardening, paths=(), cache_dir="", read_write_paths=()):
    """The unit's sandboxing lines for sglang_service_hardening (a mapping; empty = none).

    ProtectHome is derived unless set: "yes" when the ml-env, model and base directory all
    live outside /root and /home, else "read-only". With any hardening every cache SGLang and
    its kernels write (plugin_utils/sglang_cache_env.py: SGLang, its JIT, Triton, Inductor, CUDA, TileLang,
    FlashInfer, the hub) is moved to `cache_dir`, the one writable place next to
    `read_write_paths`.

    Args:
        hardening: sglang_service_hardening: systemd sandboxing settings, a mapping (empty:
            none).
        paths: the ml-env, model and base directory, which decide ProtectHome.
        cache_dir: the service user's cache directory, the one writable place SGLang's caches
            move to.
        read_write_paths: sglang_service_read_write_paths: more places the service may write.
    """
    hardening = {} if hardening is None else plain(hardening)
    if not isinstance(hardening, dict):
        raise AnsibleFilterError("sglang_service_hardening must be a mapping of unit settings")
    lines = [line for line in (_hardening_line(key, value) for key, value in hardening.items())
             if line]
    if not lines:
        return []
    if "ProtectHome" not in hardening:
        home = "read-only" if any(_under(p, HOME_DIRS) for p in paths if p) else "yes"
        lines.append(f"ProtectHome={home}")
    return lines + _writable_lines(cache_dir, read_write_paths) + unit_cache_env(cache_dir)


def _writable_lines(cache_dir, read_write_paths):
    writable = [str(p) for p in [cache_dir, *(read_write_paths or [])] if p]
    for path in writable:
        _unit_path(path, "sglang_service_read_write_paths")
    return ["ReadWritePaths=" + " ".join(writable)] if writable else []


def _hardening_line(key, value):
    """`Key=value` for one sandboxing setting; None for a null value (the setting left out)."""
    named(key, UNIT_KEY, "sglang_service_hardening", "a systemd setting name")
    if key in UNIT_OWNED:
        raise AnsibleFilterError(
            f"sglang_service_hardening: {key} is written by the role; "
            + ("use sglang_service_read_write_paths" if key == "ReadWritePaths"
               else "set it through the role's own variables"))
    if value is None:
        return None
    if isinstance(value, bool):
        value = "yes" if value else "no"
    if isinstance(value, (dict, list)):
        raise AnsibleFilterError(f"sglang_service_hardening.{key}: a single-line value")
    return f"{key}={single_line(value, f'sglang_service_hardening.{key}')}"


NCCL_ENV = re.compile(r"(NCCL|GLOO|UCX|TP_SOCKET)_[A-Z0-9_]+")


def sglang_multinode(hosts, host, hostvars, port=50000, nccl_env=None):
    """One model over several nodes: {nnodes, node_rank, rank0, args, env} for `host`.

    `hosts` is the inventory group of the nodes (sglang_nodes_group), in inventory order:
    the first is rank 0 and hosts the dist-init address (its sglang_advertise_host,
    ansible_host or name). `nccl_env` is this host's NCCL_*/GLOO_* variables (per-host
    interface names and HCAs).

    Args:
        hosts: the nodes, groups[sglang_nodes_group] in inventory order (empty or one host: a
            single node).
        host: this host's inventory name (inventory_hostname).
        hostvars: Ansible's hostvars, for rank 0's sglang_advertise_host or ansible_host.
        port: sglang_dist_init_port: the port of the dist-init address on rank 0.
        nccl_env: sglang_nccl_env: this host's NCCL_*/GLOO_*/UCX_*/TP_SOCKET_* variables, a
            mapping.
    """
    hosts = [str(h) for h in plain(hosts or [])]
    nccl_env = plain(nccl_env or {})
    if not isinstance(nccl_env, dict):
        raise AnsibleFilterError("sglang_nccl_env must be a mapping of NCCL_*/GLOO_* variables")
    for name, value in nccl_env.items():
        named(name, NCCL_ENV, "sglang_nccl_env",
              "an NCCL_*/GLOO_*/UCX_* variable; put other variables in sglang_env")
        single_line(value, f"sglang_nccl_env.{name}")
    env = {k: str(v) for k, v in nccl_env.items()}
    if len(hosts) < 2:
        if hosts and host not in hosts:
            raise AnsibleFilterError(f"sglang_nodes_group does not hold {host}")
        return {"nnodes": 1, "node_rank": 0, "rank0": host, "args": {}, "env": env}
    if host not in hosts:
        raise AnsibleFilterError(
            f"sglang_nodes_group: {host} is not in the group it names ({', '.join(hosts)})")
    port = _port(port, "sglang_dist_init_port")
    address = advertised_address(hosts[0], hostvars)
    rank = hosts.index(host)
    return {"nnodes": len(hosts), "node_rank": rank, "rank0": hosts[0], "env": env,
            "args": {"nnodes": len(hosts), "node-rank": rank,
                     "dist-init-addr": f"{address}:{port}"}}


def sglang_secrets_json(api_key="", admin_api_key=""):
    """The 0600 secrets file launch.py reads; with no key, an empty object. Messages never
    quote a key.

    Args:
        api_key: sglang_api_key, the key clients send (empty: none).
        admin_api_key: sglang_admin_api_key, the key of SGLang's admin endpoints (empty:
            none).
    """
    secrets = {}
    for variable, arg, value in (("sglang_api_key", "api-key", api_key),
                                 ("sglang_admin_api_key", "admin-api-key", admin_api_key)):
        value = plain(value)
        if value in (None, ""):
            continue
        if not isinstance(value, str) or not API_KEY.fullmatch(value):
            raise AnsibleFilterError(
                f"{variable}: must be a token of 16-512 characters from A-Za-z0-9._~+/=- "
                "(e.g. `openssl rand -hex 32`); the value is not shown")
        secrets[arg] = value
    if len(secrets) == 2 and secrets["api-key"] == secrets["admin-api-key"]:
        raise AnsibleFilterError(
            "sglang_admin_api_key: equals sglang_api_key, which makes every client an admin; "
            "give it its own value or leave it empty")
    return json.dumps(secrets, indent=2, sort_keys=True) + "\n"


def sglang_connect_host(host):
    """Where a client on the host itself reaches a server bound to `host`.

    Args:
        host: the address the server binds (sglang_host, sglang_router_host).
    """
    if host in ("0.0.0.0", "", None):
        return "127.0.0.1"
    if host in ("::", "[::]"):
        return "[::1]"
    return bracketed(host)


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
            "sglang_unit_hardening": own_errors(sglang_unit_hardening),
            "sglang_unit_check": own_errors(sglang_unit_check),
            "sglang_secrets_json": own_errors(sglang_secrets_json),
            "sglang_multinode": own_errors(sglang_multinode),
        }
