"""Turn a model profile plus the operator's overrides into what a release holds.

Pure functions, unit-tested without Ansible (tests/unit/test_sglang_render.py). Every bad
input raises AnsibleFilterError with a message that names the variable and what to change;
`sglang_input_violations` runs all those checks on the operator's inputs at once and returns
every refusal, each with the variable, its value (a secret's never shown) and what to change
(tests/unit/test_sglang_input_violations.py).
"""

import json
import os
import re

import yaml
from ansible.errors import AnsibleFilterError
from ansible.plugins.test.core import version_compare

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_workload as workloads
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_systemd import env_file_line
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_args import dashed, env_name, named, \
    not_owned, single_line
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_cache_env import unit_cache_env
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_expect import check_expect
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_fetch import sglang_fetch_plan
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_hosts import advertised_address, bracketed, \
    host_address
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_limits import sglang_smoke_limits
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_values import plain, truthy

ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
UNIT_NAME = re.compile(r"[A-Za-z0-9_.@:-]{1,200}")
# A Python module for `python -m` (sglang_launch_module), and an inventory name on the drift
# check's command line (`--host`): neither may split argv, start a systemd specifier (%) or an
# option.
MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
HOST_NAME = re.compile(r"[A-Za-z0-9_\[\]][A-Za-z0-9_.:\[\]-]{0,252}")
# Whole seconds or counts that land in the unit (LimitNOFILE=, TimeoutStopSec= summed in the
# template, OnUnitActiveSec=): a template's `| int` would make any other text 0.
COUNT_SUFFIXES = ("_nofile", "_timeout_stop", "_timeout", "_interval")
PROFILE_KEYS = {"tune", "description", "min_sglang_version", "model", "args", "env", "expect", "smoke",
                "workload"}
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
    *_path / sglang_venv absolute paths, *_name a unit name, *_nofile / *_timeout(_stop) /
    *_interval whole numbers, *_module a Python module, inventory_hostname an inventory name,
    the rest one word each (no control character, space or '%'). Returns the mapping unchanged.

    Args:
        settings (dict): {variable name: value} of the variables the unit and launch files use.
    Returns:
        dict: the settings unchanged (a value that cannot go in the unit is refused).
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
        elif name.endswith(COUNT_SUFFIXES):
            _count(value, name)
        elif name.endswith("_module"):
            named(single_line(value, name), MODULE, name, "a Python module name (sglang.launch_server)")
        elif name == "inventory_hostname":
            named(single_line(value, name), HOST_NAME, name,
                  "an inventory name without spaces or '%' (it is the drift check's --host)")
        else:
            _unit_word(value, name)
    return settings


def _count(value, where):
    """A whole number of at least 1, as an int or its digits; a limit (*_nofile) may also be
    systemd's `infinity` or `soft:hard`."""
    text = single_line(value, where)
    if where.endswith("_nofile") and (text == "infinity" or re.fullmatch(r"[1-9]\d*:[1-9]\d*", text)):
        return text
    if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
        raise AnsibleFilterError(f"{where}: {text!r} must be a whole number of at least 1 "
                                 "(seconds, or a count)")
    return int(text)


def _unit_word(value, where):
    """A single token of a unit line: no control character, space (it splits argv) or '%'
    (a systemd specifier)."""
    text = single_line(value, where)
    if not text or any(c.isspace() for c in text) or "%" in text:
        raise AnsibleFilterError(f"{where}: {text!r} must be one word without spaces or '%'")
    return text


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
        profile (dict): the profile as loaded: sglang_profile when it is a mapping, else
            roles/sglang/profiles/<sglang_profile>.yml read as YAML.
        name (str): what the error messages call the profile; the role leaves the default.
    Returns:
        dict: the profile unchanged (a malformed one is refused).
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
    for key in ("args", "env", "expect", "smoke", "workload"):
        if not isinstance(profile.get(key, {}), dict):
            raise AnsibleFilterError(f"{name}: {key} must be a mapping")
    return profile


def sglang_server_config(profile, overrides=None, model_path="", model_revision="",
                         host="127.0.0.1", port=30000, metrics=False):
    """Return the server arguments for the release's config.yaml, dashed and ordered.

    `metrics` (sglang_enable_metrics) adds `enable-metrics: true` when neither the profile nor
    the overrides name it (they win, `null` included).

    Args:
        profile (dict): the profile as loaded (a mapping, checked by sglang_profile_check).
        overrides (dict): sglang_server_args: SGLang arguments over the profile's args; a null
            value removes one.
        model_path (str): sglang_model_path: replaces the profile's model.path (empty: the
            profile's).
        model_revision (str): sglang_model_revision: replaces the profile's model.revision (empty:
            the profile's).
        host (str): sglang_host: the address the server listens on.
        port (int): sglang_port: a TCP port (digits as a string too).
        metrics (bool): sglang_enable_metrics: add enable-metrics unless the profile or the
            overrides name it.
    Returns:
        dict: {argument: value}, dashed: model-path, revision, served-model-name, host, port first,
            then the profile's and the overrides'.
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
        named |= _merge_args(merged, source, where)
    if metrics and "enable-metrics" not in named:
        merged["enable-metrics"] = True
    _check_speculative(merged)
    return merged


def _merge_args(merged, source, where):
    """`source`'s arguments (named in `where`) dashed into `merged`, a null removing one;
    returns the flags it named."""
    seen = {}
    for raw_name, value in source.items():
        flag = not_owned(dashed(raw_name, where), where)
        if flag in seen:
            raise AnsibleFilterError(
                f"{where}: {raw_name!r} and {seen[flag]!r} name the same argument "
                f"'--{flag}'; keep one"
            )
        seen[flag] = raw_name
        if value is None:
            merged.pop(flag, None)
        else:
            merged[flag] = _scalar(value, where, flag)
    return set(seen)


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


def config_yaml(args):
    """The release's config.yaml: dashed keys, stable order, for `--config PATH`, a comment line
    first."""
    header = "# Rendered by sglang-deploy. Passed to SGLang as --config PATH; edit the inventory.\n"
    return header + yaml.safe_dump(plain(dict(args)), default_flow_style=False, sort_keys=False)


def sglang_env_merge(profile, overrides=None):
    """Profile env, then the operator's sglang_env (a null value removes a variable).

    Args:
        profile (dict): the profile as loaded (its env: mapping, if any).
        overrides (dict): sglang_env: variables that replace the profile's; a null value removes
            one.
    Returns:
        dict: {NAME: value}, every value a single-line string.
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
        profile (dict): the profile as loaded (its expect: mapping, if any).
        overrides (dict): sglang_expect: expectations that replace the profile's; a null value
            removes one.
    Returns:
        dict: the expectations, {setting: expected}.
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


def env_file(env):
    """A systemd EnvironmentFile: a comment line, then one NAME="value" per line, sorted, escaped."""
    lines = ["# Rendered by sglang-deploy: environment of the SGLang server."]
    for name in sorted(env):
        env_name(name, "sglang_env")
        lines.append(env_file_line(name, single_line(env[name], f"sglang_env.{name}")))
    return "\n".join(lines) + "\n"


def sglang_release_files(args, env, launch, launch_py):
    """The files of a release, each with its name and mode: what it holds and what its content
    hash covers (plugins/module_utils/sglang_release_store.py).

    Args:
        args (dict): the server's arguments, SGLang's option names without `--` (config.yaml,
            passed as `--config PATH`).
        env (dict): the server's environment, {NAME: value} (sglang.env, the unit's
            EnvironmentFile, 0600: a hub token may be in it).
        launch (str): the text of the launch script (templates/launch.sh.j2).
        launch_py (str): the text of launch.py (files/sglang_launch.py); a lookup('file') strips
            its last newline, the file gets it back.
    Returns:
        list of dict: {name, content, mode} for config.yaml, sglang.env, launch and launch.py.
    """
    return [{"name": "config.yaml", "content": config_yaml(args), "mode": "0644"},
            {"name": "sglang.env", "content": env_file(env), "mode": "0600"},
            {"name": "launch", "content": launch, "mode": "0755"},
            {"name": "launch.py", "content": launch_py if launch_py.endswith("\n") else launch_py + "\n",
             "mode": "0644"}]


def sglang_pip_args(index_url="", extra_index_urls=None, wheelhouse="", no_index=False):
    """pip options for online installs, private indexes or an offline wheelhouse.

    Args:
        index_url (str): sglang_pip_index_url: the index in place of PyPI (empty: pip's default).
        extra_index_urls (list of str): sglang_pip_extra_index_urls: more indexes to search.
        wheelhouse (path): the directory of wheels on the host (--find-links).
        no_index (bool): install from the wheelhouse alone (--no-index); refused without one.
    Returns:
        str: the pip options, space-separated (empty: none).
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
    """The unit's sandboxing lines (Key=value; none when the hardening is empty): the `sandbox`
    of sglang_unit, whose docstring says what each argument is.

    ProtectHome is derived unless set: "yes" when the ml-env, model and base directory all
    live outside /root and /home, else "read-only". With any hardening every cache SGLang and
    its kernels write (plugin_utils/sglang_cache_env.py: SGLang, its JIT, Triton, Inductor, CUDA, TileLang,
    FlashInfer, the hub) is moved to `cache_dir`, the one writable place next to
    `read_write_paths`.
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


def sglang_unit(hardening, model_path, paths=(), cache_dir="", read_write_paths=()):
    """What the unit adds to the server's start: its sandbox (sglang_unit_hardening) and its
    own environment (hub_env).

    Args:
        hardening (dict): sglang_service_hardening: systemd sandboxing settings, a mapping (empty:
            none).
        model_path (str): the server's model-path (a local directory or a hub id).
        paths (list of path): the ml-env, model and base directory, which decide ProtectHome.
        cache_dir (path): the service user's cache directory, the one writable place SGLang's
            caches move to.
        read_write_paths (list of path): sglang_service_read_write_paths: more places the service
            may write.
    Returns:
        dict: {sandbox (list of str: Key=value lines, none when the hardening is empty; SGLang's
            resolution runs under the same properties), environment (list of str: the unit's
            Environment= lines)}.
    """
    return {"sandbox": sglang_unit_hardening(hardening, paths, cache_dir, read_write_paths),
            "environment": hub_env(model_path)}


def hub_env(model_path):
    """`Environment=HF_HUB_OFFLINE=1` when the model is a local directory (an absolute path):
    SGLang then never reaches the hub (no download into the cache, no waiting on a network it
    may not have). A hub id gets nothing. sglang_env can still set HF_HUB_OFFLINE itself."""
    path = str(model_path or "")
    return ["Environment=HF_HUB_OFFLINE=1"] if os.path.isabs(path) else []


def _writable_lines(cache_dir, read_write_paths):
    if cache_dir:
        _unit_path(cache_dir, "sglang_service_cache_dir")
    writable = [str(p) for p in [cache_dir, *(read_write_paths or [])] if p]
    for path in writable[1 if cache_dir else 0:]:
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
        hosts (list of str): the nodes, groups[sglang_nodes_group] in inventory order (empty or one
            host: a single node).
        host (str): this host's inventory name (inventory_hostname).
        hostvars (dict): Ansible's hostvars, for rank 0's sglang_advertise_host or ansible_host.
        port (int): sglang_dist_init_port: the port of the dist-init address on rank 0.
        nccl_env (dict): sglang_nccl_env: this host's NCCL_*/GLOO_*/UCX_*/TP_SOCKET_* variables, a
            mapping.
    Returns:
        dict: {nnodes, node_rank, rank0, args, env}: args the server's nnodes, node-rank and
            dist-init-addr (none on a single node), env the NCCL variables as strings.
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
        api_key (str): sglang_api_key, the key clients send (empty: none).
        admin_api_key (str): sglang_admin_api_key, the key of SGLang's admin endpoints (empty:
            none).
    Returns:
        str: the JSON text of the secrets file, {api-key, admin-api-key} as set.
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
        host (str): the address the server binds (sglang_host, sglang_router_host).
    Returns:
        str: the address to connect to: the loopback for a wildcard, an IPv6 one in brackets.
    """
    if host in ("0.0.0.0", "", None):
        return "127.0.0.1"
    if host in ("::", "[::]"):
        return "[::1]"
    return bracketed(host)


# The one-pass input check: the checks above, the fetch's, the expectations' and the smoke
# limits' run on the operator's inputs, each refusal kept (not raised) against its variable.
# A value under a name holding key, token, secret or password (sglang_api_key, sglang_env's
# HF_TOKEN...) is never shown, however deep; a count of tokens or a tokenizer is not a secret.
SECRET_NAME = re.compile(r"key|token(?!s|izer)|secret|passw", re.IGNORECASE)
REDACTED = "<redacted>"
# What sglang_unit_check reads, one variable at a time (the unit and launch files use them).
UNIT_SETTINGS = ("sglang_service_user", "sglang_service_group", "sglang_service_name",
                 "sglang_base_dir", "sglang_venv", "sglang_service_cache_dir",
                 "sglang_secrets_path", "sglang_service_limit_nofile",
                 "sglang_service_timeout_stop", "sglang_drain_timeout", "sglang_launch_module",
                 "sglang_monitoring_textfile_dir", "sglang_monitoring_drift_interval")
PRIVATE = re.compile(r"^/root(/|$)")
_GIVEN = object()


def _redacted(value, name=""):
    """`value` with every value under a secret's name replaced, however deep."""
    if SECRET_NAME.search(str(name)) and value not in (None, ""):
        return REDACTED
    if isinstance(value, dict):
        return {key: _redacted(item, key) for key, item in value.items()}
    if isinstance(value, list):
        return [_redacted(item) for item in value]
    return value


def _secret_texts(value, name="", hidden=False):
    """The text of every secret in `value` (what _redacted hides), to scrub from messages."""
    hidden = hidden or bool(SECRET_NAME.search(str(name)))
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in _secret_texts(item, key, hidden)]
    if isinstance(value, list):
        return [text for item in value for text in _secret_texts(item, "", hidden)]
    if not (hidden and isinstance(value, str) and len(value) >= 4):
        return []
    return [value, repr(value)[1:-1], json.dumps(value)[1:-1]]  # as messages may quote it


def _shown(value):
    """A value on one line of the refusal: JSON (control characters escaped), cut when long."""
    if value is None:
        return "unset"
    text = json.dumps(value, default=str)
    return text if len(text) <= 160 else text[:157] + "..."


class _Violations:
    """The refusals of the checks run on the inputs, each kept against the variable it names."""

    def __init__(self, inputs):
        self.inputs = inputs
        self.found = []
        self.secrets = sorted(set(_secret_texts(inputs)), key=len, reverse=True)  # longest first

    def run(self, variables, func, *args, value=_GIVEN):
        """func(*args), or None when it refuses: the refusal is kept against the first of
        `variables` its message starts with (else the first), with the input's value."""
        try:
            return own_errors(func)(*args)
        except AnsibleFilterError as exc:
            fix = str(exc)
            self.add(next((v for v in variables if fix.startswith(v)), variables[0]), fix, value)
            return None

    def add(self, variable, fix, value=_GIVEN):
        value = self.scrubbed(_redacted(self.inputs.get(variable) if value is _GIVEN else value,
                                        variable))
        fix = self.scrubbed(fix)
        self.found.append({"variable": variable, "value": value, "fix": fix,
                           "text": f"{variable} = {_shown(value)}: {fix}"})

    def scrubbed(self, value):
        """`value` with each secret's text replaced wherever it shows (a key pasted into
        another variable, a message that quotes a value)."""
        if isinstance(value, dict):
            return {key: self.scrubbed(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.scrubbed(item) for item in value]
        if isinstance(value, str):
            for secret in self.secrets:
                value = value.replace(secret, REDACTED)
        return value


def _checked_profile(checks, name, profile, profiles):
    """The profile the other checks read: the loaded one when it is sound, else only a model
    path (the operator's variables are checked all the same)."""
    fallback = {"model": {"path": checks.inputs.get("sglang_model_path") or "unset"}}
    if not isinstance(name, dict) and profiles is not None and name not in profiles:
        checks.add("sglang_profile", f"sglang_profile {name!r} is not a profile of this role. "
                   f"Known profiles: {', '.join(profiles)}. Add roles/sglang/profiles/<name>.yml "
                   "or give sglang_profile as a mapping.")
        return fallback
    if checks.run(("sglang_profile",), sglang_profile_check, profile) is None:
        return fallback
    return profile


def _checked_args(checks, profile, args_given):
    """The server's arguments: the caller's when given, else the profile's with the inventory's
    (the model path alone when they are refused)."""
    inputs = checks.inputs
    port = checks.run(("sglang_port",), _port, inputs.get("sglang_port"))
    checks.run(("sglang_host",), host_address, inputs.get("sglang_host"), "sglang_host")
    if args_given:
        return dict(args_given) if isinstance(args_given, dict) else {}
    args = checks.run(("sglang_server_args", "sglang_profile"), sglang_server_config, profile,
                      inputs.get("sglang_server_args"), inputs.get("sglang_model_path"),
                      inputs.get("sglang_model_revision"), inputs.get("sglang_host"),
                      port or 30000, inputs.get("sglang_enable_metrics"))
    return args or {"model-path": inputs.get("sglang_model_path") or profile["model"]["path"]}


def _check_nodes(checks, nodes, batch, host, hostvars):
    """The nodes that serve one model: NCCL variables, this host among them, the dist-init
    port, and a rollout batch that holds them all."""
    inputs = checks.inputs
    group = inputs.get("sglang_nodes_group") or ""
    checks.run(("sglang_nccl_env",), sglang_multinode, [], host, hostvars, 50000,
               inputs.get("sglang_nccl_env"))
    if group and nodes is None:
        checks.add("sglang_nodes_group", f"sglang_nodes_group: the inventory has no group {group!r}; "
                   "name the group of the hosts that serve one model, or leave it empty")
        return
    checks.run(("sglang_nodes_group", "sglang_dist_init_port"), sglang_multinode, nodes or [],
               host, hostvars, inputs.get("sglang_dist_init_port"), {})
    if group and batch is not None and [node for node in nodes if node not in batch]:
        count = len(nodes)
        checks.add("sglang_rollout_serial",
                   f"The {count} nodes of {group} serve one model and must restart together: set "
                   "sglang_rollout_serial so that they share a batch "
                   f"(e.g. -e '{{\"sglang_rollout_serial\": [{count}]}}').")


def _check_version(checks, profile):
    version, least = checks.inputs.get("sglang_version"), profile.get("min_sglang_version") or "0"
    try:
        recent = version_compare(str(version), str(least), ">=")
    except AnsibleFilterError as exc:
        checks.add("sglang_version", f"sglang_version: {version!r} is not a version to compare with "
                   f"the profile's min_sglang_version {least} ({exc}): give one like 0.5.23")
        return
    if not recent:
        checks.add("sglang_version", f"sglang_version {version} is older than {least}, the first "
                   "release that serves this profile's model: raise sglang_version.")


def _check_pip(checks):
    inputs = checks.inputs
    wheelhouse = inputs.get("sglang_pip_wheelhouse")
    if inputs.get("sglang_pip_wheelhouse_src") and not wheelhouse:
        checks.add("sglang_pip_wheelhouse", "sglang_pip_wheelhouse_src is set; also set "
                   "sglang_pip_wheelhouse, where it is copied on the host.")
    checks.run(("sglang_pip_no_index",), sglang_pip_args, inputs.get("sglang_pip_index_url"),
               inputs.get("sglang_pip_extra_index_urls"), wheelhouse,
               truthy(inputs.get("sglang_pip_no_index")))


def _check_expectations(checks, profile):
    """sglang_expect over the profile's, and the smoke limits (each variable, else the
    profile's smoke figure, as the smoke test reads them)."""
    inputs = checks.inputs
    merged = checks.run(("sglang_expect",), sglang_expect_merge, profile, inputs.get("sglang_expect"))
    if merged is not None:
        checks.run(("sglang_expect",), check_expect, merged)
    smoke = profile.get("smoke") or {}
    floor = inputs.get("sglang_smoke_min_decode_tok_s") or smoke.get("min_decode_tok_s")
    ceiling = inputs.get("sglang_smoke_max_ttft_ms") or smoke.get("max_ttft_ms")
    tolerance = inputs.get("sglang_smoke_regression_tolerance")
    checks.run(("sglang_smoke_min_decode_tok_s",), sglang_smoke_limits, floor, None, 0.1,
               value=floor)
    checks.run(("sglang_smoke_max_ttft_ms",), sglang_smoke_limits, None, ceiling, 0.1,
               value=ceiling)
    checks.run(("sglang_smoke_regression_tolerance",), sglang_smoke_limits, None, None, tolerance)


def _check_unit(checks, args, host=""):
    """What lands in the units (the server's, the drift check's and its timer's), the env file
    and launch, and who may read what it names; `host` is the drift check's --host."""
    inputs = checks.inputs
    checks.run(("sglang_service_hardening", "sglang_service_read_write_paths",
                "sglang_service_cache_dir"), sglang_unit_hardening, inputs.get("sglang_service_hardening"), [],
               inputs.get("sglang_service_cache_dir"), inputs.get("sglang_service_read_write_paths"))
    for name in UNIT_SETTINGS:
        checks.run((name,), sglang_unit_check, {name: inputs.get(name)})
    if host:
        checks.run(("inventory_hostname",), sglang_unit_check, {"inventory_hostname": host},
                   value=host)
    user = inputs.get("sglang_service_user")
    private = [str(path) for path in (inputs.get("sglang_venv"), args.get("model-path"),
                                      inputs.get("sglang_base_dir")) if PRIVATE.match(str(path))]
    if user != "root" and private:
        checks.add("sglang_service_user", f"sglang_service_user {user} cannot enter /root, where "
                   f"{', '.join(private)} live: move sglang_venv / sglang_model_path / "
                   "sglang_base_dir out of /root (e.g. /opt/ml-env) or run as root.")


def _check_keys(checks):
    """Each key alone (its own refusal), then the two together."""
    api, admin = checks.inputs.get("sglang_api_key"), checks.inputs.get("sglang_admin_api_key")
    alone = [checks.run(("sglang_api_key",), sglang_secrets_json, api, ""),
             checks.run(("sglang_admin_api_key",), sglang_secrets_json, "", admin)]
    if None not in alone:
        checks.run(("sglang_admin_api_key",), sglang_secrets_json, api, admin)


def _check_workload(checks, profile):
    """sglang_workload over the profile's workload, the SLOs and the levels, as the proof
    (sglang_serving_bench) reads them: refused here, before a restart, not by the proof after it."""
    inputs = checks.inputs
    given, slo, levels = (inputs.get(name) for name in (
        "sglang_workload", "sglang_workload_slo", "sglang_workload_levels"))
    if not isinstance(given, dict):
        checks.add("sglang_workload", "a mapping of the workload's keys ({} for the profile's), "
                   "docs/measuring.md")
    else:
        try:
            workloads.check({**(profile.get("workload") or {}), **given})
        except workloads.WorkloadError as exc:
            where = " (over the profile's workload)" if profile.get("workload") else ""
            checks.add("sglang_workload", f"{exc}{where}")
    try:
        if not isinstance(slo, dict):
            raise workloads.WorkloadError("a mapping of objectives (ttft_p99_ms, itl_p99_ms, "
                                          "min_tok_s_per_user)")
        workloads.check_slo(slo)
    except workloads.WorkloadError as exc:
        checks.add("sglang_workload_slo", str(exc))
    if not isinstance(levels, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in levels):
        checks.add("sglang_workload_levels", "a list of concurrency levels, whole numbers of at "
                   "least 1 (empty: 1, 2, 4, ... up to the max_running_requests SGLang resolves)")


def sglang_input_violations(inputs, profile=None, profiles=None, args_given=None, nodes=None,
                            batch=None, host="", hostvars=None):
    """Every check of the operator's inputs, run at once before anything uses them: {ok,
    violations}, each violation {variable, value, fix, text} (text: the line that says all three).

    The checks are the filters' own (sglang_profile_check, sglang_server_config, sglang_env_merge,
    sglang_multinode, sglang_fetch_plan, sglang_pip_args, sglang_expect_check,
    sglang_smoke_limits, sglang_unit_hardening, sglang_unit_check, sglang_secrets_json, and the
    workload's as the proof reads it), each refusal caught and kept against the variable its message names, and the role's rules on the
    profile name, the sglang version, the rollout batch, the wheelhouse and the service user.
    A secret's value (a name holding key, token, secret or password, however deep) is shown as
    <redacted>, and scrubbed from the messages.

    Args:
        inputs (dict): the role variables the checks read, by name: {sglang_profile, sglang_port,
            sglang_server_args, sglang_env, sglang_api_key, ...}, as the role's
            inputs/render_args.yml passes them.
        profile (dict): the profile as loaded: sglang_profile when it is a mapping, else
            roles/sglang/profiles/<sglang_profile>.yml read as YAML (none when there is no such
            file).
        profiles (list of str): the names of the role's profiles (none: the name is not checked).
        args_given (dict): the server's arguments when the caller gives them (a tuner's candidate,
            an upgrade's serving release): sglang_server_args is then not rendered nor checked.
        nodes (list of str): the hosts of sglang_nodes_group in inventory order (empty for one
            host; none when the inventory has no such group).
        batch (list of str): the hosts of this rollout batch (ansible_play_batch; none: not
            checked).
        host (str): this host's inventory name (inventory_hostname).
        hostvars (dict): Ansible's hostvars, for rank 0's sglang_advertise_host or ansible_host.
    Returns:
        dict: {ok, violations}: each violation {variable, value, fix, text}.
    """
    inputs = plain(inputs)
    if not isinstance(inputs, dict):
        raise AnsibleFilterError("sglang_input_violations takes a mapping of variable names to values")
    checks = _Violations(inputs)
    profile = _checked_profile(checks, inputs.get("sglang_profile"), plain(profile),
                               None if profiles is None else plain(profiles))
    args = _checked_args(checks, profile, plain(args_given))
    env = checks.run(("sglang_env", "sglang_profile"), sglang_env_merge, profile,
                     inputs.get("sglang_env"))
    _check_nodes(checks, plain(nodes), None if batch is None else plain(batch), host, hostvars)
    checks.run(("sglang_model_fetch", "sglang_model_path", "sglang_model_revision"),
               sglang_fetch_plan, inputs.get("sglang_model_fetch"), inputs.get("sglang_model_path"),
               inputs.get("sglang_model_revision"), env or {})
    _check_version(checks, profile)
    _check_pip(checks)
    _check_expectations(checks, profile)
    _check_workload(checks, profile)
    _check_unit(checks, args, host)
    _check_keys(checks)
    return {"ok": not checks.found, "violations": checks.found}


class FilterModule:
    def filters(self):
        return {
            "sglang_server_config": own_errors(sglang_server_config),
            "sglang_env_merge": own_errors(sglang_env_merge),
            "sglang_release_files": own_errors(sglang_release_files),
            "sglang_expect_merge": own_errors(sglang_expect_merge),
            "sglang_pip_args": own_errors(sglang_pip_args),
            "sglang_connect_host": own_errors(sglang_connect_host),
            "sglang_secrets_json": own_errors(sglang_secrets_json),
            "sglang_multinode": own_errors(sglang_multinode),
            "sglang_unit": own_errors(sglang_unit),
            "sglang_unit_check": own_errors(sglang_unit_check),
            "sglang_input_violations": own_errors(sglang_input_violations),
        }
