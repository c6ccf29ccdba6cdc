"""sglang_free: who holds a release's port and GPUs, this service's leftovers ended, others refused.

GPU cases read nvidia-smi's --query-compute-apps rows (tests/unit/data/nvidia-smi/apps-*.csv,
in the format `--format=csv,noheader,nounits` prints) against a /proc tree built in a temporary
directory; the port and the ending of leftovers run on real processes of this machine."""

import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import free_port, load_module
from support.modules import run_module

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_holders as holders

free = load_module("sglang_free")
DATA = Path(__file__).parent / "data" / "nvidia-smi"
ME = pwd.getpwuid(os.getuid())
SERVICE_UID = 990
OTHER_UID = 1234


def recorded(name):
    return (DATA / name).read_text()


def fake_proc(tmp_path, processes, listen=None):
    """A /proc tree: processes [{pid, uid, argv, unit, state, start, sockets}], and `listen`
    {port: (uid, inode)} written to net/tcp."""
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    rows = ["  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
            "timeout inode"]
    for port, (uid, inode) in (listen or {}).items():
        rows.append(f"   0: 0100007F:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 "
                    f"00000000 {uid:>5}        0 {inode} 1 0000000000000000 100 0 0 10 0")
    (proc / "net" / "tcp").write_text("\n".join(rows) + "\n")
    for p in processes:
        d = proc / str(p["pid"])
        (d / "fd").mkdir(parents=True)
        (d / "stat").write_text(f"{p['pid']} (python) {p.get('state', 'S')} 1 1 1 0 -1 0 0 0 0 0 "
                                f"0 0 0 0 20 0 8 0 {p.get('start', 1000)} 0 0\n")
        (d / "status").write_text(f"Name:\tpython\nUid:\t{p['uid']}\t{p['uid']}\t{p['uid']}\t"
                                  f"{p['uid']}\n")
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in p["argv"]) + b"\0")
        unit = p.get("unit")
        (d / "cgroup").write_text(p.get("cgroup") or (f"0::/system.slice/{unit}\n" if unit
                                                      else "0::/user.slice\n"))
        for n, inode in enumerate(p.get("sockets") or []):
            os.symlink(f"socket:[{inode}]", d / "fd" / str(n + 3))
    return str(proc)


RANKS = [{"pid": 41872, "uid": SERVICE_UID, "unit": "sglang.service",
          "argv": ["/opt/sglang/envs/3f9a/bin/python", "-m", "sglang.launch_server"],
          "sockets": [555]},
         {"pid": 41873, "uid": SERVICE_UID, "unit": "sglang.service",
          "argv": ["/opt/sglang/envs/3f9a/bin/python", "-c", "scheduler"]}]
FOREIGN = [{"pid": 5120, "uid": OTHER_UID, "argv": ["python3", "train.py", "--epochs", "3"]},
           {"pid": 7781, "uid": OTHER_UID, "argv": ["/usr/bin/python3", "notebook.py"]}]


def smi(apps, gpus="query-4gpu.csv"):
    """nvidia-smi answering the recorded files: --query-gpu and --query-compute-apps."""
    def answer(argv, timeout=60):
        return recorded(gpus if argv[1].startswith("--query-gpu") else apps), None
    return answer


def survey(proc, apps, visible="", running=True, **extra):
    params = {"service": "sglang", "user": "sglang", "base_dir": "/opt/sglang", "port": 30000,
              "nvidia_smi": sys.executable, "visible_devices": visible, **extra}
    return free.survey(params, SERVICE_UID, running, proc, smi(apps))


def test_compute_apps_reads_rows_unknown_memory_and_ignores_prose():
    apps = holders.compute_apps(recorded("apps-foreign-job.csv"))
    assert [a["pid"] for a in apps] == [41872, 41873, 5120, 7781]
    assert apps[0] == {"pid": 41872, "name": "/opt/sglang/envs/3f9a/bin/python",
                       "memory_mib": 43210, "bus_id": "00000000:01:00.0"}
    assert apps[2]["memory_mib"] is None  # [N/A]: unknown, not zero
    assert holders.compute_apps(recorded("apps-none.txt")) == []


@pytest.mark.parametrize("visible, chosen, why", [
    ("", [0, 1, 2, 3], None),
    ("0,1", [0, 1], None),
    (" 2 ", [2], None),
    ("7", None, "names GPU 7, which nvidia-smi does not list"),
    ("GPU-8c3f1e", None, "is not a GPU index"),
])
def test_the_release_gpus_come_from_cuda_visible_devices(visible, chosen, why):
    rows = [line.split(", ") for line in recorded("query-4gpu.csv").splitlines()]
    gpus, reason = holders.release_gpus(rows, visible)
    assert (sorted(gpus.values()) if gpus else None) == chosen
    assert (why or "") in (reason or "")


def test_the_running_service_holds_its_own_gpus_and_port(tmp_path):
    proc = fake_proc(tmp_path, RANKS, listen={30000: (SERVICE_UID, 555)})
    out = survey(proc, "apps-two-ranks.csv", visible="0,1")
    assert sorted((h["pid"], h["owner"]) for h in out["holders"]) == [
        (41872, "service"), (41873, "service")]
    assert out["gpus"] == {"checked": True, "indices": [0, 1], "reason": None}
    assert "port 30000, 43210 MiB on GPU 0" in next(h["text"] for h in out["holders"]
                                                    if h["pid"] == 41872)


def test_a_foreign_job_on_a_release_gpu_refuses_naming_pid_user_command_and_memory(tmp_path):
    proc = fake_proc(tmp_path, RANKS + FOREIGN, listen={30000: (SERVICE_UID, 555)})
    out = survey(proc, "apps-foreign-job.csv", visible="0,1")
    foreign = [h for h in out["holders"] if h["owner"] != "service"]
    # 7781 sits on GPU 2, which this release does not see: not a holder of its GPUs.
    assert [h["pid"] for h in foreign] == [5120]
    assert foreign[0]["text"] == "pid 5120 (user 1234, `python3 train.py --epochs 3`): ? MiB on GPU 1"
    message = free.refusal(foreign, {"visible_devices": "0,1"})
    assert message.startswith("Refused before SGLang starts: pid 5120 (user 1234")
    assert "another sglang_port, or CUDA_VISIBLE_DEVICES in sglang_env (GPUs now: 0,1)" in message
    # With every GPU visible, the notebook on GPU 2 holds one of the release's GPUs too.
    everything = survey(proc, "apps-foreign-job.csv")
    assert sorted(h["pid"] for h in everything["holders"] if h["owner"] == "foreign") == [5120, 7781]


def test_a_pid_this_host_cannot_see_is_unknown_and_refuses(tmp_path):
    proc = fake_proc(tmp_path, [])
    out = survey(proc, "apps-other-namespace.csv")
    assert [(h["pid"], h["owner"]) for h in out["holders"]] == [(998877, "unknown")]
    assert "another PID namespace" in out["holders"][0]["text"]


def test_without_nvidia_smi_the_gpu_half_is_unknown_and_says_why(tmp_path):
    proc = fake_proc(tmp_path, [])
    out = survey(proc, "apps-two-ranks.csv", nvidia_smi="/nonexistent/nvidia-smi")
    assert out["gpus"]["checked"] is False and "not found" in out["gpus"]["reason"]
    failing = free.gpu_side(sys.executable, "", proc,
                            lambda argv, timeout=60: ("", "nvidia-smi exited 9: NVML not loaded"))
    assert failing == ({}, {"checked": False, "indices": [], "reason": "nvidia-smi exited 9: NVML not loaded"})


@pytest.mark.parametrize("uid, running, mine, owner", [
    (SERVICE_UID, True, [], "service"),      # the running unit's socket
    (SERVICE_UID, False, RANKS[:1], "service"),  # a leftover of the service user's
    (SERVICE_UID, False, [], "foreign"),     # the service user, but nothing of this service runs
    (OTHER_UID, True, [], "foreign"),
])
def test_a_socket_whose_pid_is_unreadable_is_judged_by_its_owner(tmp_path, uid, running, mine, owner):
    # No fd links: root without CAP_SYS_PTRACE sees the socket's uid, not its process.
    processes = [dict(p, sockets=[], unit=None) for p in mine]
    proc = fake_proc(tmp_path, processes, listen={30000: (uid, 777)})
    params = {"service": "sglang", "user": "sglang", "base_dir": "/opt/sglang", "port": 30000,
              "nvidia_smi": "/nonexistent/nvidia-smi", "visible_devices": ""}
    out = free.survey(params, SERVICE_UID, running, proc)
    assert [(h["pid"], h["owner"]) for h in out["holders"]] == [(None, owner)]


def test_the_service_users_command_under_base_dir_is_the_services_and_nothing_else_is():
    leftover = {"uid": SERVICE_UID, "argv": ["/opt/sglang/envs/3f9a/bin/python", "-m", "x"]}
    assert holders.owner(leftover, "sglang", SERVICE_UID, "/opt/sglang")
    assert holders.owner({**leftover, "uid": OTHER_UID}, "sglang", SERVICE_UID, "/opt/sglang") is None
    # A program elsewhere with a release's file as its argument (an editor, a tail) is not.
    assert holders.owner({**leftover, "argv": ["vim", "/opt/sglang/current/config.yaml"]},
                         "sglang", SERVICE_UID, "/opt/sglang") is None
    # A sibling directory that shares the prefix is not under base_dir.
    assert holders.owner({**leftover, "argv": ["/opt/sglang2/bin/python"]}, "sglang", SERVICE_UID,
                         "/opt/sglang") is None
    assert holders.owner({"uid": OTHER_UID, "unit": "sglang.service", "argv": []}, "sglang",
                         SERVICE_UID, "/opt/sglang") == "in sglang.service's cgroup"
    assert holders.owner({"uid": OTHER_UID, "unit": "sglang-router.service", "argv": []},
                         "sglang", SERVICE_UID, "/opt/sglang") is None


def test_a_reused_pid_is_not_the_process_that_was_ended(tmp_path):
    proc = fake_proc(tmp_path, [dict(RANKS[0], start=5000)])
    assert not free._gone(41872, "5000", proc)
    assert free._gone(41872, "4000", proc)  # same pid, another start time: a new process
    assert free._gone(41999, "5000", proc)


def test_a_leftover_on_a_release_gpu_is_named_with_its_memory(tmp_path, monkeypatch):
    # The unit is stopped; its two ranks were left on GPUs 0 and 1 (apps-two-ranks.csv).
    monkeypatch.setattr(free, "unit_state", lambda unit: {"ActiveState": "inactive"})
    proc = fake_proc(tmp_path, RANKS)
    params = {"service": "sglang", "user": "sglang", "base_dir": "/opt/sglang", "port": 30000,
              "nvidia_smi": sys.executable, "visible_devices": "", "state": "checked",
              "timeout": 5, "term_grace": 1}
    monkeypatch.setattr(free.pwd, "getpwnam", lambda name: type("P", (), {"pw_uid": SERVICE_UID}))
    result = free.run(params, True, proc, smi("apps-two-ranks.csv"))
    texts = {h["pid"]: h["text"] for h in result["leftovers"]}
    assert "MiB on GPU" in texts[41872] and "MiB on GPU" in texts[41873], texts
    assert "nothing" not in " ".join(texts.values())


# --- other units and containers: a service of the same name is not this one ------------------

@pytest.mark.parametrize("cgroup, unit", [
    ("0::/system.slice/sglang.service\n", "sglang.service"),
    ("0::/system.slice/sglang.service/worker\n", "sglang.service"),
    ("0::/gpu.slice/gpu-serving.slice/sglang.service\n", "sglang.service"),
    ("12:pids:/system.slice/x.service\n1:name=systemd:/system.slice/sglang.service\n",
     "sglang.service"),
    # Another user's `systemctl --user` unit of the same name.
    ("0::/user.slice/user-1234.slice/user@1234.service/app.slice/sglang.service\n",
     "user@1234.service"),
    # A container's own systemd (podman --systemd, systemd-nspawn), seen from the host.
    ("0::/machine.slice/libpod-8f3e.scope/container/system.slice/sglang.service\n", None),
    ("0::/machine.slice/systemd-nspawn@gpu.service/payload/system.slice/sglang.service\n",
     "systemd-nspawn@gpu.service"),
    ("0::/user.slice/user-1234.slice/session-4.scope\n", None),
    ("0::/\n", None),
])
def test_the_unit_is_the_first_service_under_slices_only(tmp_path, cgroup, unit):
    proc = fake_proc(tmp_path, [dict(FOREIGN[0], cgroup=cgroup)])
    assert holders.unit_of(FOREIGN[0]["pid"], proc) == unit


def test_inside_a_container_whose_paths_show_the_hosts_prefix_the_root_is_its_own(tmp_path):
    # A podman container on a host that shares its cgroup namespace: every path there starts
    # with the container's scope, which is the root its own systemd (PID 1) manages.
    scope = "/machine.slice/libpod-8f3e.scope"
    proc = fake_proc(tmp_path, [
        {"pid": 1, "uid": 0, "argv": ["/sbin/init"], "cgroup": f"0::{scope}/init.scope\n"},
        {"pid": 923, "uid": 0, "argv": ["python3"],
         "cgroup": f"0::{scope}/system.slice/sglang-port-hog.service\n"},
        {"pid": 924, "uid": 0, "argv": ["python3"],
         "cgroup": f"0::{scope}/user.slice/user-1000.slice/user@1000.service/app.slice/"
                   "sglang.service\n"}])
    assert holders.unit_of(923, proc) == "sglang-port-hog.service"
    assert holders.unit_of(924, proc) == "user@1000.service"


def test_on_a_hybrid_host_the_unit_is_read_from_name_systemd(tmp_path):
    # podman (runc, cgroup v1 hybrid) as this machine runs it: the unified line names no unit.
    pod = "/libpod_parent/libpod-4a5b08e5"
    proc = fake_proc(tmp_path, [
        {"pid": 1, "uid": 0, "argv": ["/sbin/init"],
         "cgroup": f"9:name=systemd:{pod}/init.scope\n8:pids:{pod}\n0::{pod}\n"},
        {"pid": 40, "uid": 0, "argv": ["sleep"],
         "cgroup": f"9:name=systemd:{pod}/system.slice/hog.service\n8:pids:{pod}\n0::{pod}\n"}])
    assert holders.unit_of(40, proc) == "hog.service"


@pytest.mark.parametrize("cgroup", [
    "0::/user.slice/user-1234.slice/user@1234.service/app.slice/sglang.service\n",
    "0::/machine.slice/libpod-8f3e.scope/container/system.slice/sglang.service\n",
    "0::/machine.slice/systemd-nspawn@gpu.service/payload/system.slice/sglang.service\n"])
def test_another_users_unit_or_a_containers_of_the_same_name_is_foreign(tmp_path, cgroup):
    # On the release's port: refused by name, never ended as a leftover.
    other = {"pid": 6100, "uid": OTHER_UID, "cgroup": cgroup, "sockets": [777],
             "argv": ["/home/eve/venv/bin/python", "-m", "sglang.launch_server"]}
    proc = fake_proc(tmp_path, [other], listen={30000: (OTHER_UID, 777)})
    params = {"service": "sglang", "user": "sglang", "base_dir": "/opt/sglang", "port": 30000,
              "nvidia_smi": "/nonexistent/nvidia-smi", "visible_devices": ""}
    found = free.survey(params, SERVICE_UID, False, proc)
    assert found["mine"] == {}
    assert [(h["pid"], h["owner"]) for h in found["holders"]] == [(6100, "foreign")]


def test_a_pid_reused_between_the_survey_and_the_signal_is_never_signalled(tmp_path):
    # The survey read the leftover's start time; by the signal its PID names a process that
    # started later (here: this test's own child, whose start differs from the recorded one).
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        recorded_start = str(int(holders.process(other.pid)["start"]) - 1)
        leftovers = {other.pid: {"start": recorded_start, "text": f"pid {other.pid}"}}
        ended, alive = free.end(leftovers, term_grace=1, deadline=time.monotonic() + 5)
        assert alive == {} and ended == [{"pid": other.pid, "text": f"pid {other.pid}",
                                          "signal": None}]
        time.sleep(0.2)
        assert other.poll() is None, "the process that reused the PID was signalled"
        # The same process, its start as read: ended.
        same = {other.pid: {"start": holders.process(other.pid)["start"], "text": "it"}}
        ended, alive = free.end(same, term_grace=5, deadline=time.monotonic() + 60)
        assert [e["signal"] for e in ended] == ["SIGTERM"] and other.wait(timeout=60) == -15
    finally:
        other.kill()
        other.wait()


# --- real processes: the port, the ending of leftovers ---------------------------------------

def _server(base_dir, port, ignore_term=False):
    """A process listening on `port` whose command runs under base_dir (a release's python)."""
    python = base_dir / "envs" / "e1" / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    if not python.exists():
        python.symlink_to(sys.executable)
    code = ("import signal, socket, sys, time\n"
            + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
            + "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(('127.0.0.1', {port})); s.listen(); print('up', flush=True)\n"
            "time.sleep(600)\n")
    proc = subprocess.Popen([str(python), "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"  # waits on progress: the socket is bound
    return proc


def _args(base_dir, port, **extra):
    return {"service": "sglang-free-test-unit", "user": ME.pw_name, "base_dir": str(base_dir),
            "port": port, "nvidia_smi": "/nonexistent/nvidia-smi", **extra}


@pytest.mark.parametrize("ignore_term, signal_name", [(False, "SIGTERM"), (True, "SIGKILL")])
def test_a_leftover_of_this_service_on_the_port_is_ended_and_named(tmp_path, ignore_term, signal_name):
    port = free_port()
    leftover = _server(tmp_path, port, ignore_term)
    try:
        checked, code = run_module("sglang_free", _args(tmp_path, port))
        assert code == 0, checked
        assert [h["pid"] for h in checked["leftovers"]] == [leftover.pid]
        # Named with what it holds (it said "nothing" for a process on the port).
        assert checked["leftovers"][0]["text"].endswith(
            f": port {port} ({ME.pw_name}'s command under {tmp_path})"), checked["leftovers"]
        assert "to end at the start" in checked["summary"] and not checked["changed"]
        assert leftover.poll() is None  # checked ends nothing

        result, code = run_module("sglang_free", _args(tmp_path, port, state="free", term_grace=2))
        assert code == 0, result
        assert result["changed"] and [e["pid"] for e in result["ended"]] == [leftover.pid]
        assert result["ended"][0]["signal"] == signal_name
        assert f"pid {leftover.pid} (user {ME.pw_name}" in result["summary"]
        assert leftover.wait(timeout=120) is not None
        assert not holders.port_holders(port)["listening"]
    finally:
        leftover.kill()
        leftover.wait()


def test_check_mode_names_the_leftover_and_ends_nothing(tmp_path):
    port = free_port()
    leftover = _server(tmp_path, port)
    try:
        result, code = run_module("sglang_free", _args(tmp_path, port, state="free"), check_mode=True)
        assert code == 0, result
        assert not result["changed"] and result["ended"] == []
        assert "would end" in result["summary"] and str(leftover.pid) in result["summary"]
        assert leftover.poll() is None
    finally:
        leftover.kill()
        leftover.wait()


def test_a_foreign_process_on_the_port_refuses_and_is_left_running(tmp_path):
    port = free_port()
    elsewhere = tmp_path / "elsewhere"
    foreign = _server(elsewhere, port)  # its command is not under base_dir
    base_dir = tmp_path / "base"
    base_dir.mkdir()
    try:
        for state in ("checked", "free"):
            result, code = run_module("sglang_free", _args(base_dir, port, state=state))
            assert code == 1, result
            assert result["msg"].startswith(f"Refused before SGLang starts: pid {foreign.pid} "
                                            f"(user {ME.pw_name}, `{elsewhere}/envs/e1/bin/python -c")
            assert f"port {port}" in result["msg"] and result["ended"] == []
        time.sleep(0.2)
        assert foreign.poll() is None
    finally:
        foreign.send_signal(signal.SIGKILL)
        foreign.wait()


def test_free_without_holders_changes_nothing(tmp_path):
    result, code = run_module("sglang_free", _args(tmp_path, free_port(), state="free"))
    assert code == 0, result
    assert not result["changed"] and result["holders"] == [] and result["leftovers"] == []
    assert result["summary"].endswith("GPUs unknown (/nonexistent/nvidia-smi not found: no NVIDIA "
                                      "driver, no GPU to free): free")


def test_gpu_memory_the_driver_never_frees_fails_at_the_bound_naming_the_process(tmp_path):
    port = free_port()
    leftover = _server(tmp_path, port)
    # nvidia-smi keeps listing the ended process on GPU 0: its memory is never released.
    apps = f"{leftover.pid}, {tmp_path}/envs/e1/bin/python, 40960, 00000000:01:00.0\n"
    stuck = lambda argv, timeout=60: (  # noqa: E731
        recorded("query-4gpu.csv") if argv[1].startswith("--query-gpu") else apps, None)
    params = dict(_args(tmp_path, port, nvidia_smi=sys.executable), visible_devices="0",
                  state="free", timeout=3, term_grace=1)
    try:
        result = free.run(params, False, smi=stuck)
    finally:
        leftover.kill()
        leftover.wait()
    assert result["failed"] and [e["pid"] for e in result["ended"]] == [leftover.pid]
    assert result["msg"].startswith("This service's leftovers still hold the port or GPU memory "
                                    f"after 3 s: pid {leftover.pid} ")
    assert "40960 MiB on GPU 0" in result["msg"] and "sglang_free_timeout" in result["msg"]
