"""What every scenario's testinfra tests share (pytest loads it for molecule/*/tests).

testinfra runs each command of a host whose inventory connection it does not know (ours,
podman_pipelined: tests/support/connection) as a whole `ansible` command line: about 1.7 s
and 1.3 s of CPU a `host.run` here. Those hosts are podman containers: testinfra's own podman
backend reaches them with one `podman exec` (0.2 s), as it would a host whose connection is
`podman`. The inventory, the host names and everything a test asks stay the same.
"""

import testinfra
from testinfra.utils import ansible_runner

_ansible_host = ansible_runner.get_ansible_host


def _podman_host(config, inventory, host, *args, **kwargs):
    hostvars = inventory.get("_meta", {}).get("hostvars", {}).get(host, {})
    if hostvars.get("ansible_connection") == "podman_pipelined":
        return testinfra.get_host("podman://" + hostvars.get("ansible_host", host))
    return _ansible_host(config, inventory, host, *args, **kwargs)


ansible_runner.get_ansible_host = _podman_host
