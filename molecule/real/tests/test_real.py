"""How far the real sglang.launch_server got under the deployed unit on a host without a GPU.

Each point SGLang passes on its way to the GPU leaves a journal line; the last one must be
CUDA finding no driver, and no line may show a sandbox error (read-only, permission, missing
file). The caches it wrote must be under the unit's cache directory, writable there under the
same sandbox, and still there after a restart.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests"))
from support.runner import play  # noqa: E402

BASE = "/opt/sglang"
CACHE = f"{BASE}/cache"
VENV = "/opt/ml-env"
UNIT = "sglang"
CONTAINER = "sglang-real"
KEY_FILE = Path.home() / ".cache" / "sglang-deploy" / "real-api-key"
SANDBOX_ERRORS = ["Read-only file system", "Permission denied", "No such file or directory",
                  "Errno 30", "Errno 13", "PermissionError", "FileNotFoundError"]

# What SGLang 0.5.23 logs at each point, in order (sglang/srt/...: engine.py logs the
# resolved arguments, the tokenizer manager loads config and tokenizer, the scheduler
# process starts its parallel runtime, then torch initialises CUDA).
PROGRESS = [
    ("imported and resolved its arguments", "server_args={'model_path': '/srv/models/tiny-qwen2'"),
    ("loaded the model config and tokenizer", "No chat template found"),
    ("started its scheduler process", "Init parallel begin."),
    ("failed at CUDA initialisation", "RuntimeError: Found no NVIDIA driver on your system"),
]


LIST_PACKAGES = ("import importlib.metadata as m; print(\"\\n\".join(sorted("
                 "f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions())))")


def in_host(argv, stdin=None):
    """argv straight to podman: no shell or module quoting in between."""
    run = subprocess.run(["podman", "exec", "-i", CONTAINER, *argv], input=stdin,
                         capture_output=True, text=True, check=False, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def journal(host):
    return host.check_output(f"journalctl -u {UNIT} --no-pager -o cat")


def test_the_role_installed_the_full_sglang(host):
    versions = json.loads(host.check_output(
        f"{VENV}/bin/python -c 'import importlib.metadata as m, json; print(json.dumps("
        "{d: m.version(d) for d in [\"sglang\", \"torch\", \"flashinfer-python\", \"transformers\"]}))'"))
    assert versions["sglang"] == "0.5.23"
    assert versions["torch"] == "2.14.1"
    count = int(host.check_output(
        f"{VENV}/bin/python -c 'import importlib.metadata as m; print(len(list(m.distributions())))'"))
    assert count > 150  # the whole dependency set, not --no-deps
    assert host.file(f"{VENV}/bin/pip").exists  # still a plain venv the operator can use


def test_the_unit_is_the_deployed_one(host):
    unit = host.file(f"/etc/systemd/system/{UNIT}.service").content_string
    assert "User=sglang" in unit and "ProtectSystem=strict" in unit
    assert "ExecStart=/opt/sglang/current/launch" in unit
    assert "Environment=HF_HUB_OFFLINE=1" in unit  # a local model directory
    launch = host.file(f"{BASE}/current/launch").content_string
    assert "sglang.launch_server" in launch and "sglang_standin" not in launch


def test_sglang_got_past_each_point_and_failed_for_want_of_a_gpu(host):
    text = journal(host)
    positions = []
    for point, line in PROGRESS:
        assert line in text, f"SGLang never {point}: no {line!r} in the journal"
        positions.append(text.index(line))
    assert positions == sorted(positions), "the points were reached out of order"
    for error in SANDBOX_ERRORS:
        assert error not in text, f"a sandbox error in the journal: {error}"


def test_the_key_reached_sglang_and_never_the_journal(host):
    text = journal(host)
    assert "'api_key': '<redacted>'" in text
    assert KEY_FILE.read_text(encoding="utf-8").split()[0] not in text


def test_sglang_wrote_its_caches_under_the_cache_dir_only(host):
    files = host.check_output(f"find {CACHE} -type f").splitlines()
    assert any("/sglang/.cache/flashinfer/" in f for f in files), files  # FlashInfer's log
    assert host.file(f"{CACHE}/sglang/inductor").is_directory
    owners = host.check_output(f"find {CACHE} -mindepth 1 -printf '%u\\n' | sort -u").split()
    assert owners == ["sglang"]
    # The service user's home is the read-only base directory: nothing went there.
    assert not host.file(f"{BASE}/.cache").exists


def _sandbox_properties(host):
    """The unit's [Service] settings that shape the process (not how systemd runs it)."""
    skip = ("ExecStart=", "Type=", "Restart", "Timeout", "KillMode=", "SyslogIdentifier=",
            "RuntimeDirectory")
    unit = host.file(f"/etc/systemd/system/{UNIT}.service").content_string
    service = unit.split("[Service]", 1)[1].split("[Install]", 1)[0]
    return [line for line in service.splitlines()
            if "=" in line and not line.startswith(("#", *skip))]


PROBE = r"""
import hashlib, json, os
import sglang  # SGLang's own cache redirection runs first, as in the server
from triton.runtime.cache import get_cache_manager
import torch._dynamo  # failed with Errno 30 under a read-only home
from torch._inductor.runtime.cache_dir_utils import cache_dir
from flashinfer.jit import env as fi
from sglang.kernels.jit.utils.compile.cache import cache_root
import huggingface_hub.constants as hub
key = hashlib.sha256(b"sglang-deploy-probe").hexdigest()  # Triton's keys are hashes
out = {"triton": get_cache_manager(key).put(b"probe", "probe.txt"),
       "inductor": cache_dir(), "flashinfer": str(fi.FLASHINFER_WORKSPACE_DIR),
       "sglang_jit": str(cache_root()), "hf_hub": hub.HF_HUB_CACHE}
for name in NAMES:
    os.makedirs(os.environ[name], exist_ok=True)
    path = os.path.join(os.environ[name], ".sglang-deploy-probe")
    with open(path, "w") as f:
        f.write("probe")
    out[name] = path
for name in ("flashinfer", "sglang_jit", "hf_hub"):
    os.makedirs(out[name], exist_ok=True)
print("PROBE" + json.dumps(out))
"""


def test_every_cache_is_writable_under_the_units_sandbox(host):
    env = host.check_output(f"systemctl show {UNIT} -p Environment --value").split()
    names = [item.split("=", 1)[0] for item in env
             if item.split("=", 1)[1].startswith(CACHE)]
    assert {"SGLANG_CACHE_DIR", "SGLANG_JIT_CACHE_DIR", "TRITON_CACHE_DIR",
            "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "TILELANG_CACHE_DIR",
            "FLASHINFER_WORKSPACE_BASE", "HF_HOME"} <= set(names)
    # A oneshot unit with the service's own settings: the probe runs as the service user
    # inside the same sandbox.
    probe = "/usr/local/lib/sglang-probe.py"
    in_host(["sh", "-c", f"cat > {probe}"], PROBE.replace("NAMES", repr(names)))
    unit = "\n".join(["[Service]", "Type=oneshot", *_sandbox_properties(host),
                       f"ExecStart={VENV}/bin/python {probe}"]) + "\n"
    in_host(["sh", "-c", "cat > /etc/systemd/system/sglang-probe.service"], unit)
    try:
        in_host(["systemctl", "daemon-reload"])
        started = subprocess.run(["podman", "exec", CONTAINER, "systemctl", "start",
                                  "sglang-probe"], capture_output=True, text=True, check=False,
                                 timeout=300)
        out = in_host(["journalctl", "-u", "sglang-probe", "--no-pager", "-o", "cat"])
        assert started.returncode == 0, out
    finally:
        in_host(["rm", "-f", "/etc/systemd/system/sglang-probe.service", probe])
        in_host(["systemctl", "daemon-reload"])
    written = json.loads(out.split("PROBE", 1)[1].splitlines()[0])
    assert set(names) <= set(written)
    for what, path in written.items():
        assert path.startswith(CACHE + "/"), f"{what} writes to {path}"
    owners = host.check_output(f"find {CACHE} -mindepth 1 -printf '%u\\n' | sort -u").split()
    assert owners == ["sglang"]


def test_the_caches_survive_a_restart(host):
    before = set(host.check_output(f"find {CACHE} -type f").splitlines())
    starts = journal(host).count("Found no NVIDIA driver")
    host.run_expect([0], f"systemctl reset-failed {UNIT}; systemctl start {UNIT}")
    # Waits while the unit runs (its start is progress however slow the host); a unit that
    # ended without reaching CUDA fails, and 15 minutes is a bound nothing healthy reaches.
    bound = time.monotonic() + 900
    while True:
        state = host.run(f"systemctl is-active {UNIT}").stdout.strip()  # before the journal
        if journal(host).count("Found no NVIDIA driver") > starts:
            break
        assert state in ("active", "activating", "reloading"), \
            f"the second start ended ({state}) before it reached CUDA:\n{journal(host)[-2000:]}"
        assert time.monotonic() < bound, "the second start ran 15 min without reaching CUDA"
        time.sleep(3)
    host.run(f"systemctl stop {UNIT}")
    after = set(host.check_output(f"find {CACHE} -type f").splitlines())
    assert before <= after


@pytest.fixture(scope="module", autouse=True)
def _stop_after(host):
    yield
    host.run(f"systemctl stop {UNIT}")



def test_the_release_records_the_ml_envs_whole_package_set(host):
    recorded = host.check_output(f"cat {BASE}/current/packages.txt").splitlines()
    assert recorded[0].startswith("#")
    lines = recorded[1:]
    assert "sglang==0.5.23" in lines and "torch==2.14.1" in lines
    now = in_host([f"{VENV}/bin/python", "-c", LIST_PACKAGES]).splitlines()
    assert sorted(lines) == sorted(now)


def env_digest(host):
    """The serving env (the ml-env link's target) and a digest of its dist-infos' RECORDs."""
    return host.check_output(
        f"readlink {VENV}; cat {VENV}/lib/python3.11/site-packages/*.dist-info/RECORD | sha256sum")


def test_a_refused_deploy_leaves_the_ml_env_as_it_was(host):
    # A new package set (uv added, from the same wheelhouse) makes a new env beside the serving
    # one, then preflight refuses an argument 0.5.23 does not know: the serving env was never
    # touched, the link never moved.
    digest = env_digest(host)
    before = in_host([f"{VENV}/bin/python", "-m", "pip", "freeze", "--all"]).splitlines()
    out = play("deploy.yml", {"sglang_pip_extra_packages": ["uv==0.13.9"],
                              "sglang_server_args": {"cuda-graph-max-bs": 8}})
    assert out["status"] == "failed"
    assert "cuda-graph-max-bs" in out["msg"], out["msg"]
    after = in_host([f"{VENV}/bin/python", "-m", "pip", "freeze", "--all"]).splitlines()
    print(f"\npip freeze --all before the refused deploy: {len(before)} packages, after: "
          f"{len(after)}, identical: {after == before}")
    assert after == before
    print(f"serving env and its digest before: {digest!r}, after: {env_digest(host)!r}")
    assert env_digest(host) == digest
    refused = sorted(host.check_output(f"ls -1 {BASE}/releases").split())[-1]
    assert "uv==0.13.9" in host.check_output(f"cat {BASE}/releases/{refused}/packages.txt")


def test_preflight_asked_real_sglang_inside_the_units_sandbox(host):
    """Before the start, the release was resolved by the installed SGLang, as the service
    user with the unit's sandbox (systemd-run), for the described GPU."""
    verdict = json.loads(host.check_output(f"cat {BASE}/current/preflight.json"))
    rows = {r["name"]: r for r in verdict["rows"]}
    assert verdict["resolved_by"] == "sglang", rows["resolution"]["evidence"]
    assert verdict["sglang_version"] == "0.5.23" and verdict["startup_error"] is None
    assert "ServerArgs.resolve_once" in rows["resolution"]["evidence"]
    assert "systemd-run as sglang with the unit's properties" in rows["resolution"]["evidence"]
    assert verdict["resolved"]["decode_cuda_graph"] is True
    assert verdict["resolved"]["attention_backend"] == "flashinfer"
    assert rows["attention_backend"]["status"] == "ok"
    # Every change names where SGLang made it.
    assert verdict["changes"] and all(c["file"] and c["line"] for c in verdict["changes"])


STANDIN_DIR = "/usr/local/lib/sglang-standin"
STANDIN_UNIT = "sglang-standin-bench"
STANDIN_PORT = 30123


def bench_units():
    """The loaded sglang-bench-* units on the host."""
    return in_host(["systemctl", "list-units", "--all", "--plain", "--no-legend",
                    "sglang-bench-*"]).split()


@pytest.fixture
def standin():
    """The stand-in (tests/standin, STAND-IN engine, no GPU) served by the ml-env's Python as a
    transient unit, with SGLang's own metrics collectors from the full install; stopped after."""
    source = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]) / "tests" / "standin" / "sglang_standin"
    in_host(["mkdir", "-p", STANDIN_DIR])
    subprocess.run(["podman", "cp", str(source), f"{CONTAINER}:{STANDIN_DIR}/"], check=True,
                   timeout=300)
    in_host(["systemd-run", f"--unit={STANDIN_UNIT}", "--collect",
             "-p", f"Environment=PYTHONPATH={STANDIN_DIR} SGLANG_STANDIN_TOK_S=200 "
                   "SGLANG_STANDIN_TTFT_MS=20",
             f"{VENV}/bin/python", "-m", "sglang_standin", "--model-path", "/srv/models/tiny-qwen2",
             "--served-model-name", "tiny", "--port", str(STANDIN_PORT)])
    # Waits while the unit runs (its imports of the full install are slow on a busy host); 10
    # minutes is a bound nothing healthy reaches.
    bound = time.monotonic() + 600
    while subprocess.run(["podman", "exec", CONTAINER, "curl", "-sf",
                          f"http://127.0.0.1:{STANDIN_PORT}/health"],
                         capture_output=True, check=False, timeout=60).returncode != 0:
        state = subprocess.run(["podman", "exec", CONTAINER, "systemctl", "is-active",
                                STANDIN_UNIT], capture_output=True, text=True, check=False,
                               timeout=60).stdout.strip()
        assert state in ("active", "activating"), in_host(
            ["journalctl", "-u", STANDIN_UNIT, "--no-pager", "-o", "cat"])[-2000:]
        assert time.monotonic() < bound, "the stand-in did not answer /health within 10 min"
        time.sleep(2)
    yield f"http://127.0.0.1:{STANDIN_PORT}"
    in_host(["systemctl", "stop", STANDIN_UNIT])


def measured(extravars):
    out = play("molecule/real/bench_sandbox.yml", extravars)
    [result] = [e["event_data"]["res"] for e in out["events"]
                if e["event"] in ("runner_on_ok", "runner_on_failed")
                and e["event_data"].get("task") == "Measure with SGLang's benchmark"] or [None]
    return out, result


def test_sglangs_benchmark_runs_with_no_more_than_the_server_has(standin, host):
    """Issue 54, part 5: SGLang's real benchmark measures as the service user, in a transient
    unit of its own with the server's sandbox lines; a unit a cut run left is stopped first;
    none is left after, nor after a level that outlives its bound."""
    sglang_uid = int(host.check_output("id -u sglang"))
    # What a run cut before its unit ended leaves behind.
    in_host(["systemd-run", "--unit=sglang-bench-0badc0de", "--collect", "sleep", "600"])
    workload = {"dataset": "random-ids", "input_len": 16, "output_len": 8, "range_ratio": 1.0,
                "requests_per_level": 4, "seed": 3}
    out, result = measured({"bench_sandbox_url": standin, "bench_sandbox_model": "tiny",
                            "bench_sandbox_workload": workload, "bench_sandbox_levels": [1, 2],
                            "bench_sandbox_timeout": 600})
    assert out["status"] == "successful", out["msg"] or out["stdout"][-3000:]
    print("\n".join(result["table"]))
    assert result["measured_by"] == "sglang.bench_serving", result["own_bench_reason"]
    assert [lv["completed"] for lv in result["levels"]] == [4, 4], result["levels"]
    sandbox = result["sandbox"]
    assert sandbox["used"] and sandbox["stopped_leftovers"] == ["sglang-bench-0badc0de.service"]
    seen = sandbox["seen"]
    assert seen["uid"] == sglang_uid and seen["no_new_privs"] and seen["own_cgroup"], seen
    # A podman container's systemd cannot make namespaces (no CAP_SYS_ADMIN): said, never
    # claimed; NoNewPrivileges holds everywhere.
    assert set(seen["unenforced"]) <= {"PrivateTmp", "ProtectSystem"}, seen
    assert bench_units() == []

    # A level past its bound: its unit is stopped, the play fails saying so, none is left.
    slow = dict(workload, output_len=1500, requests_per_level=1)
    out, result = measured({"bench_sandbox_url": standin, "bench_sandbox_model": "tiny",
                            "bench_sandbox_workload": slow, "bench_sandbox_levels": [1],
                            "bench_sandbox_timeout": 5})
    assert out["status"] == "failed" and "not done within 5 s" in out["msg"], out["msg"]
    assert bench_units() == []
