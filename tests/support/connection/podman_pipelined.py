"""Molecule's connection to its podman hosts, pipelined as users' ssh is (ansible.cfg).

containers.podman.podman runs six podman commands per module (mount, the home directory, a
temporary directory, chmod, python, rm), about 1.3 s a task here; users' hosts, over ssh with
pipelining and a persistent connection (ControlPersist), get one round trip of a few
milliseconds. This plugin gives the test hosts the same: the module goes to the host's Python
on stdin, through a channel that stays open as ssh's master connection does. The channel is a
small server started once per container with `podman exec -d` (so what it runs has the
container's namespaces, cgroup, environment and limits, as `podman exec` gives), listening on
the container's address and answering only requests that carry the token it was started with
(kept on the controller, 0600). A `podman exec` costs about 0.25 s here (podman, conmon, runc);
a request on the channel a few milliseconds. Where the channel cannot be had (another user, no
route to the container) or PODMAN_PIPELINED_CHANNEL=off, each module takes one
`podman exec -i`. The container is mounted only when a file is copied. The tests then time
what users would see, and the scenarios run faster. Test tooling only:
.config/molecule/config.yml names it, the collection does not ship it.
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

import fcntl
import json
import os
import secrets
import shlex
import socket
import tempfile
import time

from ansible.errors import AnsibleConnectionFailure
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.plugins.connection import ConnectionBase
from ansible.utils.display import Display
from ansible_collections.containers.podman.plugins.connection.podman import Connection as Podman


display = Display()


class ChannelGone(Exception):
    """The channel did not take the request: nothing ran."""


# The port the channel listens on in each container (its own network namespace).
CHANNEL_PORT = 40404
# Where the controller keeps each container's channel (address, token): one file a container.
CHANNEL_DIR = os.path.join(tempfile.gettempdir(), "podman-channel-%d" % os.getuid())
# How long a new channel may take to answer (a busy host starts Python slowly): then plain exec.
CHANNEL_START_S = 120

# How soon a connection whose other end says nothing, not even to TCP's keepalive probes, is
# taken for lost (idle, interval, probes): a module's answer is then asked for again.
KEEPALIVE = (10, 5, 3)
# How many times in a row the channel may be found unreachable while asking for an answer.
RECLAIMS = 20

# The channel, run by the container's Python. A request is a connection: a JSON line with the
# token, the request's id, the argv and the length of stdin, then stdin; the answer a JSON line
# with the exit code and the lengths, then stdout and stderr. The answer is kept (the last 256)
# until asked for again: a connection lost while the module ran (a bridge reconfigured as
# another container goes, seen in CI) costs no run and no hang, the controller asks for the
# answer by id ({"token", "fetch": id}) and gets it, or `unknown` when the request never
# arrived whole (then nothing ran and it is sent again). A channel started before it is ended
# first.
SERVER = r"""
import collections, hmac, json, os, signal, socketserver, subprocess, threading, time
TOKEN = os.environ.pop("PODMAN_CHANNEL_TOKEN").encode()
PIDFILE = "/run/podman-channel.pid"
try:
    os.kill(int(open(PIDFILE).read()), signal.SIGTERM)
except (OSError, ValueError):
    pass
open(PIDFILE, "w").write(str(os.getpid()))
JOBS = collections.OrderedDict()  # id -> [event, answer bytes, or None when dropped]
LOCK = threading.Lock()

def job(key):
    with LOCK:
        if key not in JOBS:
            JOBS[key] = [threading.Event(), None]
            while len(JOBS) > 256:
                JOBS.popitem(last=False)
        return JOBS[key]

def run(head, data):
    try:
        proc = subprocess.Popen(head["argv"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL if data is None else subprocess.PIPE)
        out, err = proc.communicate(data)
        rc = proc.returncode
    except OSError as exc:
        out, err, rc = b"", str(exc).encode(), 127
    return json.dumps({"rc": rc, "out": len(out), "err": len(err)}).encode() + b"\n" + out + err

class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        head = json.loads(self.rfile.readline())
        if not hmac.compare_digest(head.get("token", "").encode(), TOKEN):
            self.wfile.write(b'{"refused": "token"}\n')
            return
        if "fetch" in head:
            with LOCK:
                known = JOBS.get(head["fetch"])
            if known is not None:
                known[0].wait()
            if known is None or known[1] is None:
                self.wfile.write(b'{"unknown": true}\n')
            else:
                self.wfile.write(known[1])
            return
        entry = job(head["id"])
        data = self.rfile.read(head["stdin"]) if head["stdin"] >= 0 else None
        if data is not None and len(data) != head["stdin"]:
            entry[0].set()  # cut short: dropped, never run
            return
        entry[1] = run(head, data)
        entry[0].set()
        self.wfile.write(entry[1])

class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

for _ in range(200):  # the channel ended above lets go of the port
    try:
        server = Server(("0.0.0.0", %d), Handler)
        break
    except OSError:
        time.sleep(0.1)
server.serve_forever()
""" % CHANNEL_PORT


class Connection(Podman):
    """containers.podman.podman: modules on the channel (else stdin to `podman exec`), a lazy
    mount."""

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
        argv = shlex.split(to_native(cmd, errors="surrogate_or_strict"))
        gone = None
        tries = 0 if self.user or os.environ.get("PODMAN_PIPELINED_CHANNEL") == "off" else 2
        for _ in range(tries):  # a channel that is gone is started again, once
            channel = self._channel(gone)
            if channel is None:
                break
            try:
                return self._over(channel, argv, in_data)
            except ChannelGone:
                gone = channel[1]
        args = ["exec", "-i"] if in_data is not None else ["exec"]
        if self.user:
            args += ["--user", self.user]
        return self._podman(args, argv, in_data)

    # ---- the channel -------------------------------------------------------------------
    def _channel(self, gone):
        """(address, token) of this container's channel, started when there is none or the
        one known has token `gone`; None when it cannot be had (then a podman exec)."""
        os.makedirs(CHANNEL_DIR, mode=0o700, exist_ok=True)
        path = os.path.join(CHANNEL_DIR, self._container_id.replace("/", "_") + ".json")
        with os.fdopen(os.open(path + ".lock", os.O_WRONLY | os.O_CREAT, 0o600), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one start at a time, across forks and runs
            try:
                with open(path, encoding="utf-8") as handle:
                    known = json.load(handle)
                if known["token"] != gone:
                    return known["address"], known["token"]
            except (OSError, ValueError, KeyError):
                pass
            return self._start_channel(path)

    def _start_channel(self, path):
        rc, address, _ = self._podman(
            "inspect", ["--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}"])
        address = to_native(address).split()
        if rc != 0 or not address:
            return None
        token = secrets.token_hex(16)
        rc, _, err = self._podman(["exec", "-d", "-e", "PODMAN_CHANNEL_TOKEN=" + token],
                                  ["/usr/bin/python3", "-c", SERVER])
        if rc != 0:
            display.warning("podman channel to %s not started (%s): a podman exec a module"
                            % (self._container_id, to_native(err).strip()))
            return None
        channel = (address[0], token)
        started = time.monotonic()
        while True:  # until the new channel answers (Python starting on a busy host)
            try:
                self._over(channel, ["true"], None)
                break
            except ChannelGone:
                if time.monotonic() - started > CHANNEL_START_S:
                    display.warning("podman channel to %s did not answer in %d s: a podman "
                                    "exec a module" % (self._container_id, CHANNEL_START_S))
                    return None
                time.sleep(0.05)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"address": address[0], "token": token}, handle)
        return channel

    def _over(self, channel, argv, in_data):
        """argv run on the channel: (rc, stdout, stderr); ChannelGone when nothing ran. A
        connection lost before the answer asks for the answer again by the request's id."""
        address, token = channel
        data = b"" if in_data is None else to_bytes(in_data)
        key = secrets.token_hex(8)
        head = {"token": token, "id": key, "argv": argv,
                "stdin": -1 if in_data is None else len(data)}
        display.vvv("CHANNEL %s %s" % (address, argv), host=self._container_id)
        try:
            sock = self._connect_channel(address)
        except OSError as exc:
            raise ChannelGone(exc) from exc
        try:
            with sock:
                sock.sendall(json.dumps(head).encode() + b"\n" + data)
                return self._answer(sock)
        except (OSError, EOFError) as exc:
            display.warning("podman channel to %s lost the connection (%s): asking for the "
                            "answer of request %s again" % (self._container_id, exc, key))
        return self._reclaim(address, token, key, argv, in_data)

    def _reclaim(self, address, token, key, argv, in_data):
        """The answer of request `key`, asked for on new connections; the request sent again
        (as a new one) when the channel says it never arrived whole."""
        for _ in range(RECLAIMS):
            try:
                with self._connect_channel(address) as sock:
                    sock.sendall(json.dumps({"token": token, "fetch": key}).encode() + b"\n")
                    return self._answer(sock)
            except ChannelGone:  # never arrived whole: nothing ran
                return self._over((address, token), argv, in_data)
            except (OSError, EOFError) as exc:
                display.warning("podman channel to %s: %s; asking again" % (self._container_id, exc))
                time.sleep(1)
        raise AnsibleConnectionFailure("the podman channel to %s did not give the answer of "
                                       "request %s in %d tries" % (self._container_id, key, RECLAIMS))

    @staticmethod
    def _connect_channel(address):
        """A connection to the channel that notices a silent peer (keepalive), then blocks as
        long as a module runs."""
        sock = socket.create_connection((address, CHANNEL_PORT), timeout=10)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        idle, interval, probes = KEEPALIVE
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, probes)
        sock.settimeout(None)  # a module runs as long as it runs
        return sock

    def _answer(self, sock):
        """(rc, stdout, stderr) read from the channel; ChannelGone when it refused or does not
        know the request; EOFError when the connection ended before the whole answer."""
        answer = sock.makefile("rb")
        line = answer.readline()
        if not line:
            raise EOFError("closed without an answer")
        reply = json.loads(line)
        if "refused" in reply or "unknown" in reply:  # nothing ran
            raise ChannelGone(reply)
        out, err = answer.read(reply["out"]), answer.read(reply["err"])
        if len(out) != reply["out"] or len(err) != reply["err"]:
            raise EOFError("the answer was cut short")
        return reply["rc"], out, err

    def put_file(self, in_path, out_path):
        self._mounted()
        super().put_file(in_path, out_path)

    def fetch_file(self, in_path, out_path):
        self._mounted()
        super().fetch_file(in_path, out_path)
