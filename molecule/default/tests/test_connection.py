"""The test connection (tests/support/connection/podman_pipelined.py) runs a module as
`podman exec` would: its channel is test tooling, and a test that passed through it must hold
for a module run the plain way. Compared here on the host converge left."""

import importlib.util
import json
import os
import subprocess
import time

CONNECTION = os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"],
                          "tests/support/connection/podman_pipelined.py")


def channel_file(container):
    """The controller's record of `container`'s channel (address, token), as the plugin keeps it."""
    spec = importlib.util.spec_from_file_location("podman_pipelined", CONNECTION)
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    return os.path.join(plugin.CHANNEL_DIR, container + ".json")

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
    record = channel_file(container)
    if os.path.exists(record):  # a channel that ran before: this run starts its own
        os.remove(record)
    channel, channel_s = module(container, channel=True)
    assert "podman" in plain and "4096" in plain  # the container's env and limits, compared
    assert channel == plain
    # The second run went over a channel it started, not a podman exec: its record, 0600.
    assert os.stat(record).st_mode & 0o777 == 0o600
    print(f"one module: {plain_s:.2f} s through podman exec, {channel_s:.2f} s on the channel "
          "(ansible's start included)")
