"""The API key never leaks: not in ps, the journal, play output or any file but the 0600 one;
the unit runs as a dedicated user in a sandbox."""

import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
from support.runner import api, demo_api_key, play, podman_exec  # noqa: E402

BASE = "/opt/sglang"


@pytest.fixture(scope="module")
def key():
    value = demo_api_key()
    assert len(value) == 40
    return value


def test_the_server_requires_the_key(host):
    name = host.backend.get_hostname()
    assert api(name, "/v1/models", key=False, status_only=True) == "401"
    assert api(name, "/v1/models", status_only=True) == "200"
    assert api(name, "/health", key=False, status_only=True) == "200"


def test_no_process_shows_the_key(host, key):
    argvs = host.check_output(
        r"for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f 2>/dev/null; echo; done")
    assert "/sbin/init" in argvs and "sglang_standin" in argvs
    assert key not in argvs
    # SGLang itself read its --config from the launcher's private pipe, now gone.
    standin = host.check_output("pgrep -f -a 'sglang_standin --config'")
    assert "--config /run/sglang/launch.yaml" in standin
    assert not host.file("/run/sglang/launch.yaml").exists
    assert host.file("/run/sglang").mode == 0o700 and host.file("/run/sglang").user == "sglang"


def test_the_journal_has_the_server_args_line_without_the_key(host, key):
    journal = host.check_output("journalctl --no-pager -o cat")
    assert key not in journal
    # The stand-in logs its resolved arguments with the keys, as SGLang 0.5.23 does: the line
    # is there, redacted on its way to the journal.
    lines = [line for line in journal.splitlines() if line.startswith("standin: server_args=")]
    assert lines and all("'api_key': '<redacted>'" in line for line in lines)


def test_only_the_0600_secrets_file_holds_the_key(host, key):
    # Every top-level directory but the kernel's (/proc, /sys, /dev); -D skip: no FIFOs.
    tops = host.check_output("ls -d /*/ | grep -vE '^/(proc|sys|dev)/$'").split()
    # The pattern goes on stdin (-f -): a command line of the test must not leak it either.
    hits = podman_exec(host.backend.get_hostname(),
                       ["grep", "-rlsF", "-D", "skip", "-f", "-", *tops], key + "\n").stdout.split()
    assert hits == [f"{BASE}/secrets.json"]
    secrets = host.file(f"{BASE}/secrets.json")
    assert secrets.mode == 0o600 and secrets.user == "sglang"


def test_the_saved_server_info_is_redacted(host):
    # What the server resolved, kept as evidence: SGLang answers with its keys in it.
    info = host.check_output(f"cat {BASE}/current/server_info.json")
    assert '"api_key": "<redacted>"' in info and '"tp_size": 2' in info


@pytest.mark.parametrize("playbook, check", [("deploy.yml", False), ("deploy.yml", True),
                                             ("playbooks/smoke.yml", False),
                                             ("playbooks/doctor.yml", False)])
def test_play_output_never_shows_the_key(key, playbook, check):
    out = play(playbook, check=check, diff=check, verbosity=3)
    assert out["status"] == "successful", out["msg"]
    assert key not in out["stdout"]
    assert key not in repr(out["events"])
    assert "TASK [sglang" in out["stdout"]  # the output is there to be searched


def test_the_unit_is_sandboxed_and_runs_as_the_service_user(host):
    user = host.check_output("ps -o user= -p $(systemctl show sglang -p MainPID --value)")
    assert user == "sglang"
    report = host.run("systemd-analyze security sglang --no-pager")
    print(report.stdout)
    level = re.search(r"Overall exposure level for sglang.service: ([0-9.]+)", report.stdout)
    assert level and float(level.group(1)) < 6.0, report.stdout[-300:]
