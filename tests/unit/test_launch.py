"""launch.py: the keys reach SGLang through a pipe, never argv, a file at rest or the output."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from support import ROLE, _load

launch = _load("sglang_launch", ROLE / "files" / "sglang_launch.py")
KEY = "k3y-" + "A1b2C3d4" * 4
ADMIN = "adm-" + "Z9y8X7w6" * 4

# A stand-in for SGLang's start-up: reads its --config once, logs it the way 0.5.23 logs
# server_args (keys included), from a child process too, and waits for SIGTERM.
FAKE_SGLANG = r"""
import os, signal, subprocess, sys, time
path = sys.argv[sys.argv.index("--config") + 1]
with open(path) as handle:
    text = handle.read()
print("server_args=" + repr(text), flush=True)
print("argv=" + " ".join(sys.argv), flush=True)
subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write(%r)" % ("child " + text)])
if os.environ.get("FAKE_WAIT"):
    signal.signal(signal.SIGTERM, lambda *a: (print("got SIGTERM", flush=True), sys.exit(7)))
    time.sleep(60)
"""


@pytest.fixture
def release(tmp_path):
    (tmp_path / "config.yaml").write_text("model-path: /m\ntp-size: 2\n")
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"api-key": KEY, "admin-api-key": ADMIN}))
    secrets.chmod(0o600)
    fake = tmp_path / "fake_sglang.py"
    fake.write_text(FAKE_SGLANG)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    return tmp_path


def _launch(release, env=None):
    return subprocess.Popen(
        [sys.executable, str(ROLE / "files" / "sglang_launch.py"), "--secrets",
         str(release / "secrets.json"), "--fifo-dir", str(release / "run"), "--",
         sys.executable, str(release / "fake_sglang.py"), "--config", str(release / "config.yaml")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})


def test_sglang_reads_the_keys_and_the_output_never_shows_them(release):
    proc = _launch(release)
    out = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 0, out
    assert KEY not in out and ADMIN not in out
    # The config SGLang read held the keys (now redacted on the way out) and the release's text.
    assert 'api-key: "<redacted>"' in out and 'admin-api-key: "<redacted>"' in out
    assert "tp-size: 2" in out
    assert "child " in out  # a grandchild's stderr goes through the same filter
    argv = [line for line in out.splitlines() if line.startswith("argv=")][0]
    assert f"--config {release / 'run' / 'launch.yaml'}" in argv
    assert not (release / "run" / "launch.yaml").exists(), "the pipe is removed once read"
    assert KEY not in (release / "config.yaml").read_text()


def test_sigterm_is_forwarded_and_the_exit_code_kept(release):
    proc = _launch(release, {"FAKE_WAIT": "1"})
    time.sleep(1.5)  # the fake has read its config and installed its handler
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=30)[0].decode()
    assert "got SIGTERM" in out
    assert proc.returncode == 7


def test_sglang_killing_itself_ends_the_launcher_the_same_way(release):
    # SGLang 0.5.23's kill_process_tree(include_parent=True) SIGKILLs the server when its
    # scheduler fails (seen under the real unit in molecule/real).
    (release / "fake_sglang.py").write_text(
        FAKE_SGLANG + "\nimport os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    proc = _launch(release)
    out = proc.communicate(timeout=30)[0].decode()
    assert "Traceback" not in out, out
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("secrets", ["{}", None])
def test_without_keys_sglang_is_exec_d_directly(release, secrets):
    if secrets is None:
        (release / "secrets.json").unlink()  # no key on this host: the role removed the file
    else:
        (release / "secrets.json").write_text(secrets)
    proc = _launch(release)
    out = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 0
    assert f"--config {release / 'config.yaml'}" in out
    assert "server_args=" in out and "api-key" not in out


@pytest.mark.parametrize("mode, content, message", [
    (0o644, {"api-key": KEY}, "make it 0600"),
    (0o600, {"api-key": "short"}, "16-512 character token"),
    (0o600, {"tp-size": 2}, "not an argument this launcher passes"),
    (0o600, ["x"], "JSON object"),
])
def test_bad_secrets_files_are_refused(tmp_path, mode, content, message):
    path = tmp_path / "secrets.json"
    path.write_text(json.dumps(content))
    path.chmod(mode)
    with pytest.raises(launch.LaunchError, match=message):
        launch.read_secrets(str(path))


def test_a_config_that_already_sets_a_key_is_refused(tmp_path):
    (tmp_path / "c.yaml").write_text("api-key: x\n")
    with pytest.raises(launch.LaunchError, match="already sets api-key"):
        launch.config_with_secrets(str(tmp_path / "c.yaml"), {"api-key": KEY})


@pytest.mark.parametrize("command", [["python", "-m", "x"], ["x", "--config"],
                                     ["x", "--config", "a", "--config", "b"]])
def test_the_command_needs_one_config(command):
    with pytest.raises(launch.LaunchError):
        launch.swap_config(command, "/run/x/launch.yaml")


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 4096])
def test_redactor_catches_keys_split_across_chunks(chunk):
    stream = (f"a {KEY} b\nno newline {KEY}{KEY} tail " + "x" * 70000 + KEY + "\r" + KEY).encode()
    redactor = launch.Redactor([KEY, ADMIN])
    out = b"".join(redactor.feed(stream[i:i + chunk]) for i in range(0, len(stream), chunk))
    out += redactor.flush()
    assert KEY.encode() not in out
    assert out.count(b"<redacted>") == 5
    assert out.replace(b"<redacted>", KEY.encode()) == stream


def test_keys_on_stdin_for_an_entry_point_without_a_config_file(release):
    reader = release / "reader.py"
    reader.write_text("import json, sys\nkeys = json.load(sys.stdin)\n"
                      "print('got', sorted(keys), keys['api-key'], flush=True)\n")
    proc = subprocess.run(
        [sys.executable, str(ROLE / "files" / "sglang_launch.py"), "--secrets",
         str(release / "secrets.json"), "--via", "stdin", "--", sys.executable, str(reader)],
        capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "got ['admin-api-key', 'api-key'] <redacted>\n"


def test_a_sigkilled_child_ends_the_launcher_by_sigkill_not_a_traceback(release):
    """Before: the launcher re-raised SIGKILL through signal.signal and died of OSError."""
    proc = _launch(release, {"FAKE_WAIT": "1"})
    time.sleep(1.5)
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
    for pid in children.stdout.split():
        os.kill(int(pid), signal.SIGKILL)
    out = proc.communicate(timeout=30)[0].decode()
    assert "Traceback" not in out and "OSError" not in out, out
    assert proc.returncode == -signal.SIGKILL


def test_end_like_passes_on_what_can_be_passed_on(monkeypatch):
    sent = []
    monkeypatch.setattr(launch.os, "kill", lambda pid, signum: sent.append(signum))
    assert launch._end_like(0) == 0 and launch._end_like(3) == 3
    assert launch._end_like(-signal.SIGKILL) == 137 and sent == [signal.SIGKILL]
    assert launch._end_like(-signal.SIGSTOP) == 128 + signal.SIGSTOP and sent == [signal.SIGKILL]


def test_a_sigterm_before_the_child_starts_leaves_no_child_and_no_pipe(release, monkeypatch):
    """Before: handlers were installed after the child started: a SIGTERM in the first ~30 ms
    killed the launcher, orphaned SGLang and left launch.yaml behind."""
    started = []
    real_mkfifo = os.mkfifo

    def mkfifo_then_sigterm(path, mode):
        real_mkfifo(path, mode)
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the launcher sets up

    monkeypatch.setattr(launch.os, "mkfifo", mkfifo_then_sigterm)
    monkeypatch.setattr(launch.subprocess, "Popen", lambda *a, **k: started.append(a))
    saved = {s: signal.getsignal(s) for s in launch.FORWARDED}
    try:
        code = launch.run([sys.executable, "x.py", "--config", str(release / "config.yaml")],
                          str(release / "secrets.json"), str(release / "run"))
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    assert code == 128 + signal.SIGTERM
    assert started == []
    assert os.listdir(release / "run") == []
