"""Molecule's connection to its podman hosts, pipelined as users' ssh is (ansible.cfg).

containers.podman.podman runs six podman commands per module (mount, the home directory, a
temporary directory, chmod, python, rm), about 1.3 s a task here; users' hosts, over ssh with
pipelining, get one. This plugin gives the test hosts the same single round trip: the module
goes to the host's Python on stdin (`podman exec -i`), and the container is mounted only when
a file is copied. The tests then time what users would see, and the scenarios run faster.
Test tooling only: .config/molecule/config.yml names it, the collection does not ship it.
"""

from __future__ import annotations

DOCUMENTATION = """
name: podman_pipelined
short_description: containers.podman.podman with pipelining (molecule's test hosts)
description:
  - Runs modules in an existing podman container with one C(podman exec -i) each.
author: sglang.deploy tests
extends_documentation_fragment:
  - connection_pipelining
options:
  remote_addr:
    description: The container's name or ID.
    default: inventory_hostname
    vars:
      - name: ansible_host
      - name: inventory_hostname
      - name: ansible_podman_host
  remote_user:
    description: The user commands run as in the container.
    vars:
      - name: ansible_user
  podman_extra_args:
    description: Extra arguments to podman.
    default: ''
    vars:
      - name: ansible_podman_extra_args
  podman_executable:
    description: The podman command.
    default: podman
    vars:
      - name: ansible_podman_executable
"""

import shlex

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.connection import ConnectionBase
from ansible_collections.containers.podman.plugins.connection.podman import Connection as Podman


class Connection(Podman):
    """containers.podman.podman, with stdin passed to `podman exec` and a lazy mount."""

    transport = "podman_pipelined"
    has_pipelining = True

    def _connect(self):
        # The mount is one podman command per task; only file copies need it (_mounted).
        ConnectionBase._connect(self)
        self._connected = True
        return self

    def _mounted(self):
        if self._mount_point is None:
            Podman._connect(self)

    def exec_command(self, cmd, in_data=None, sudoable=False):
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        args = ["exec", "-i"] if in_data is not None else ["exec"]
        if self.user:
            args += ["--user", self.user]
        return self._podman(args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)

    def put_file(self, in_path, out_path):
        self._mounted()
        super().put_file(in_path, out_path)

    def fetch_file(self, in_path, out_path):
        self._mounted()
        super().fetch_file(in_path, out_path)
