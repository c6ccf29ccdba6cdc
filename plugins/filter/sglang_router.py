"""The SGLang router's command line and its workers, from the inventory.

Pure functions, unit-tested in tests/unit/test_sglang_router.py.
"""

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_filter_errors import own_errors
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_hosts import advertised_address
from ansible_collections.sglang.deploy.plugins.plugin_utils.sglang_values import ARG_NAME, plain

# Arguments the role sets from its own variables (or, for the key, through stdin).
OWNED = {"host": "sglang_router_host", "port": "sglang_router_port",
         "policy": "sglang_router_policy", "worker-urls": "the replica group's inventory",
         "prometheus-host": "sglang_router_prometheus_host",
         "prometheus-port": "sglang_router_prometheus_port",
         "api-key": "sglang_router_api_key (kept out of argv)"}
SAFE_TOKEN = re.compile(r"^[][A-Za-z0-9_./:@,=+-]+$")


def sglang_router_worker_url(host, hostvars):
    """http://<sglang_advertise_host, ansible_host or the name>:<sglang_port> of a replica.

    Args:
        host (str): the replica's inventory name.
        hostvars (dict): Ansible's hostvars, for that host's inventory inputs
            (sglang_advertise_host, ansible_host, sglang_port).
    Returns:
        str: the replica's URL, http://address:port.
    """
    port = hostvars[host].get("sglang_port") or 30000
    return f"http://{advertised_address(host, hostvars)}:{int(port)}"


def _token(value, where):
    value = str(plain(value))
    if not SAFE_TOKEN.match(value):
        # ExecStart= is split by systemd, which also expands % and $: keep tokens plain.
        raise AnsibleFilterError(
            f"{where}: {value!r} must be one plain token (letters, digits, _ . / : @ , = + -)")
    return value


def sglang_router_argv(workers, host="127.0.0.1", port=30000, policy="cache_aware",
                       prometheus_host="127.0.0.1", prometheus_port=29000, extra=None):
    """The router's arguments as a list of tokens (its api key is never one of them).

    Args:
        workers (list of str): the replicas' URLs (sglang_router_worker_url of each host of
            sglang_router_replica_group), at least one.
        host (str): sglang_router_host: the address the router listens on.
        port (int): sglang_router_port: the port the router listens on.
        policy (str): sglang_router_policy: the router's load-balancing policy.
        prometheus_host (str): sglang_router_prometheus_host: where the router serves its metrics.
        prometheus_port (int): sglang_router_prometheus_port: the port of its metrics.
        extra (dict): sglang_router_args: more router arguments, a mapping (true: a bare flag,
            false or null: left out, a list: several values); none the role sets itself.
    Returns:
        list of str: the router's command line after the program, one token each.
    """
    workers = plain(workers or [])
    if not workers:
        raise AnsibleFilterError(
            "sglang_router_replica_group: no replica in the inventory group; put the SGLang "
            "hosts in it or point sglang_router_replica_group at their group")
    argv = ["--host", _token(host, "sglang_router_host"),
            "--port", _token(port, "sglang_router_port"),
            "--policy", _token(policy, "sglang_router_policy"),
            "--prometheus-host", _token(prometheus_host, "sglang_router_prometheus_host"),
            "--prometheus-port", _token(prometheus_port, "sglang_router_prometheus_port"),
            "--worker-urls", *[_token(w, "worker URL") for w in workers]]
    extra = plain(extra or {})
    if not isinstance(extra, dict):
        raise AnsibleFilterError("sglang_router_args must be a mapping of router arguments")
    for name, value in extra.items():
        dashed = str(name).strip().lstrip("-").replace("_", "-")
        if not ARG_NAME.fullmatch(dashed):
            raise AnsibleFilterError(f"sglang_router_args: {name!r} is not a router argument name")
        if dashed in OWNED:
            raise AnsibleFilterError(
                f"sglang_router_args: set '{dashed}' through {OWNED[dashed]}")
        if value is None or value is False:
            continue
        argv.append(f"--{dashed}")
        if value is True:
            continue
        values = value if isinstance(value, list) else [value]
        argv += [_token(v, f"sglang_router_args.{dashed}") for v in values]
    return argv


class FilterModule:
    def filters(self):
        return {"sglang_router_worker_url": own_errors(sglang_router_worker_url),
                "sglang_router_argv": own_errors(sglang_router_argv)}
