"""The test connection (tests/support/connection/podman_pipelined.py) runs a module as
`podman exec` would: its channel is test tooling, and a test that passed through it must hold
for a module run the plain way. Compared here on the host converge left."""

import json
import os
import subprocess
import time

# What a module's process sees of where it runs: its cgroup, limits, identity, capabilities,
# seccomp, namespaces, working directory and environment (the names ansible sets are its own).
WHERE = ("cat /proc/self/cgroup; ulimit -n; ulimit -u; id; pwd; "
         "grep -E '^(Cap(Inh|Prm|Eff|Bnd)|Seccomp|NoNewPrivs):' /proc/self/status; "
         "for ns in mnt pid net uts ipc user cgroup; do readlink /proc/self/ns/$ns; done; "
         "env | grep -v -E '^(_|SHLVL|PWD|ANSIBLE_.*|LC_.*|LANG|LANGUAGE)=' | sort")


def module(container, channel):
    """The `where` probe run by ansible.builtin.shell on `container`: (stdout, seconds)."""
    env = dict(os.environ, PODMAN_PIPELINED_CHANNEL="on" if channel else "off",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    started = time.monotonic()
    out = subprocess.run(
        ["ansible", container, "-i", os.environ["MOLECULE_INVENTORY_FILE"],
         "-m", "ansible.builtin.shell", "-a", WHERE],
        env=env, capture_output=True, text=True, check=True)
    seconds = time.monotonic() - started
    return json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"][container]["stdout"], seconds


def test_a_module_on_the_channel_sees_what_podman_exec_gives_it(host):
    container = host.backend.get_hostname()
    plain, plain_s = module(container, channel=False)
    channel, channel_s = module(container, channel=True)
    assert "podman" in plain and "4096" in plain  # the container's env and limits, compared
    assert channel == plain
    print(f"one module: {plain_s:.2f} s through podman exec, {channel_s:.2f} s on the channel "
          "(ansible's start included)")
