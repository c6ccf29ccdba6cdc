"""The checks every SGLang argument name and environment variable goes through, wherever it
comes from: the profile's args and env, sglang_server_args, sglang_env, the tune space.

One reading of each, so that a name the profile refuses is refused everywhere else too.
"""

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.module_utils.sglang_systemd import ENV_NAME
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_values import ARG_NAME, plain

# Anything that ends up in a unit or environment file: no C0/C1 control character (newline,
# carriage return, NUL, tab, ESC...) nor Unicode line/paragraph separator; systemd splits
# lines on more than "\n" and a NUL truncates. `%` would be a systemd specifier in a path.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# Arguments the role owns through its own variables: set them there, not in args.
ROLE_OWNED = {
    "model-path": "sglang_model_path",
    "revision": "sglang_model_revision",
    "host": "sglang_host",
    "port": "sglang_port",
    "api-key": "sglang_api_key (kept out of argv, files and the journal)",
    "admin-api-key": "sglang_admin_api_key (kept out of argv, files and the journal)",
    "nnodes": "sglang_nodes_group (its hosts, in inventory order, are the ranks)",
    "node-rank": "sglang_nodes_group (its hosts, in inventory order, are the ranks)",
    "dist-init-addr": "sglang_nodes_group and sglang_dist_init_port",
    "config": None,
}


def single_line(value, where):
    """The one check for a value that lands in a unit or environment file; returns its text.

    Refuses any control character (a trailing newline too) by position, never quoting the
    value (it may be a token).
    """
    text = str(plain(value))
    bad = CONTROL.search(text)
    if bad:
        raise AnsibleFilterError(
            f"{where}: holds the control character {bad.group()!r} at position {bad.start()}; "
            "unit and environment files take single-line values without control characters")
    return text


def named(name, pattern, where, what):
    """A name (env variable, unit key, account) that must match `pattern` whole."""
    if not isinstance(name, str) or not pattern.fullmatch(name):
        shown = single_line(name, where) if isinstance(name, str) and not CONTROL.search(name) \
            else "a name with a control character"
        raise AnsibleFilterError(f"{where}: {shown!r} is not {what}")
    return name


def env_name(name, where):
    """An environment variable's name, whole ([A-Za-z_][A-Za-z0-9_]*, no trailing newline)."""
    return named(name, ENV_NAME, where, "an environment variable name")


def dashed(name, where):
    """An SGLang argument name as SGLang spells it (`tp-size`) from `tp_size`, `--tp-size`..."""
    if not isinstance(name, str):
        raise AnsibleFilterError(f"{where}: argument names must be strings, got {name!r}")
    flag = name.strip().lstrip("-").replace("_", "-")
    if "=" in flag:
        raise AnsibleFilterError(
            f"{where}: {name!r} looks like '--flag=value'; write it as a key and a value "
            "(e.g. 'tp-size: 2')"
        )
    if not ARG_NAME.fullmatch(flag):
        raise AnsibleFilterError(
            f"{where}: {name!r} is not an SGLang argument name (lowercase, dashes)"
        )
    return flag


def not_owned(flag, where):
    """Refuse an argument the role sets through its own variable (ROLE_OWNED); returns it."""
    if flag in ROLE_OWNED:
        owner = ROLE_OWNED[flag]
        if owner is None:
            raise AnsibleFilterError(
                f"{where}: 'config' is not an argument you set: each release passes its own "
                "rendered file as '--config PATH' (never '--config=PATH', which SGLang ignores)"
            )
        raise AnsibleFilterError(f"{where}: set '{flag}' through the variable {owner}")
    return flag
