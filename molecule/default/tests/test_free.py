"""Free before a start, on a real systemd host: a leftover of this service holding the port is
ended and named; another process on the port refuses the deploy before anything stops."""

import os
import sys

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
from support.runner import play  # noqa: E402

BASE = "/opt/sglang"
# Waits on progress (the socket accepting), bounded generously for a loaded host.
WAIT_LISTEN = ("for i in $(seq 1 1200); do python3 -c \"import socket; "
               "socket.create_connection(('127.0.0.1', {port}), 1)\" 2>/dev/null && exit 0; "
               "sleep 0.25; done; echo 'nothing listens on {port} after 300 s' >&2; exit 1")


def debug_messages(events):
    return [e["event_data"]["res"]["msg"] for e in events
            if e["event"] == "runner_on_ok" and "msg" in (e["event_data"].get("res") or {})
            and e["event_data"].get("task_action") in ("ansible.builtin.debug", "debug")]


def _started(host, user, argv, port):
    """Start argv in the background as `user` (outside the unit), wait until it listens on
    `port`, and return its PID (the shell writes its own, then execs argv in its place)."""
    pidfile = f"/tmp/free-test-{port}.pid"
    host.check_output(f"rm -f {pidfile}; nohup runuser -u {user} -- sh -c "
                      f"'echo $$ > {pidfile}; exec {argv}' >/dev/null 2>&1 < /dev/null &")
    host.check_output(WAIT_LISTEN.format(port=port))
    return int(host.check_output(f"cat {pidfile}"))


def test_a_leftover_of_this_service_on_the_port_is_ended_and_named(host):
    release = host.check_output(f"readlink {BASE}/current")
    env_python = host.check_output(f"readlink -f {BASE}/current/env") + "/bin/python"
    host.check_output("systemctl stop sglang")
    # The stand-in server from the release's env, by hand, as the service user: what a worker
    # that escaped the unit, or a server started for a test and forgotten, looks like.
    argv = f"{env_python} -m sglang_standin --config {BASE}/current/config.yaml"
    pid = _started(host, "sglang", argv, 30000)

    out = play("deploy.yml")
    assert out["status"] == "successful", out["msg"]
    said = "\n".join(map(str, debug_messages(out["events"])))
    assert f"ended pid {pid} (user sglang, `{env_python} -m sglang_standin" in said, said
    assert "sglang's command under /opt/sglang" in said
    assert not host.run(f"kill -0 {pid}").succeeded  # ended, not left beside the new start
    assert host.service("sglang").is_running
    assert host.check_output(f"readlink {BASE}/current") == release  # the same release serves


def test_another_process_on_the_port_refuses_the_deploy_before_anything_stops(host):
    release = host.check_output(f"readlink {BASE}/current")
    main_pid = host.check_output("systemctl show -p MainPID --value sglang")
    argv = "python3 -m http.server --bind 127.0.0.1 30001"
    pid = _started(host, "root", argv, 30001)
    try:
        # Moving to port 30001 changes the release: without the check, the restart would stop
        # the serving release and start one that cannot bind.
        out = play("deploy.yml", extravars={"sglang_port": 30001})
        assert out["status"] == "failed"
        assert out["msg"].startswith(f"Refused before SGLang starts: pid {pid} (user root, "
                                     f"`{argv}`"), out["msg"]
        assert "port 30001" in out["msg"] and "another sglang_port" in out["msg"]
        assert not any(e["event"] == "runner_on_ok" and e["event_data"].get("task", "").startswith(
            ("Take the host's deploy lock", "Stop the release")) for e in out["events"])
        # Nothing stopped, nothing moved, and the other process was left alone.
        assert host.check_output("systemctl show -p MainPID --value sglang") == main_pid
        assert host.check_output(f"readlink {BASE}/current") == release
        assert host.run(f"kill -0 {pid}").succeeded
    finally:
        host.run(f"kill {pid}")
