"""A GPU host's prerequisites, read before anything changes, each refusal saying what to do."""

import shutil
import zipfile
from pathlib import Path

import pytest
from support import ROOT, load_module

prereqs = load_module("sglang_host_prereqs")
TABLE = {"12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06"}
HARDENING = {"ProtectClock": True, "ProtectSystem": "strict"}


def facts(**over):
    base = {"driver": "580.82.07", "torch_cuda": "13.0", "torch_cuda_source": "torch-2.14.1.whl",
            "nvidia_uvm_loaded": True, "nvidia_modprobe": None, "cc": "/usr/bin/cc",
            "python_h": True, "nvcc": "/usr/local/cuda/bin/nvcc", "systemd": 252,
            "disk": [{"path": "/opt/ml-env", "gb": 15, "what": "the ml-env", "free_gb": 40.0}]}
    return {**base, **over}


def test_a_good_host_passes():
    assert prereqs.judge(facts(), TABLE, HARDENING) == ([], [], [])


@pytest.mark.parametrize("over, message", [
    ({"driver": "570.124.06"}, "older than 580.65.06, which CUDA 13.0 needs"),
    ({"systemd": 249}, "systemd 249 < 252: ProtectClock=True adds a device allow-list"),
    ({"nvidia_uvm_loaded": False}, "modprobe nvidia-uvm"),
    ({"cc": None}, "cc missing): install build-essential and python3-dev"),
    ({"python_h": False}, "Python.h missing"),
    ({"disk": [{"path": "/opt/ml-env", "gb": 15, "what": "the ml-env", "free_gb": 3.2}]},
     "/opt/ml-env has 3.2 GB free, the ml-env needs 15 GB"),
])
def test_each_missing_prerequisite_is_refused_with_what_to_do(over, message):
    failures, _, _ = prereqs.judge(facts(**over), TABLE, HARDENING)
    assert len(failures) == 1 and message in failures[0], failures


def test_older_systemd_passes_once_protect_clock_is_dropped():
    assert prereqs.judge(facts(systemd=249), TABLE, {"ProtectClock": None})[0] == []


def test_cuda_minor_versions_take_the_nearest_lower_entry_of_their_major():
    assert prereqs.min_driver("12.9", TABLE) == "575.51.03"
    assert prereqs.min_driver("12.10", TABLE) == "575.51.03"
    assert prereqs.min_driver("11.8", TABLE) is None
    _, warnings, _ = prereqs.judge(facts(torch_cuda="11.8"), TABLE, {})
    assert "does not list" in warnings[0]


def test_nvidia_modprobe_goes_before_the_start_and_a_missing_nvcc_warns():
    failures, warnings, pre = prereqs.judge(
        facts(nvidia_uvm_loaded=False, nvidia_modprobe="/usr/bin/nvidia-modprobe", nvcc=None),
        TABLE, {})
    assert failures == []
    assert pre == ["+/usr/bin/nvidia-modprobe -u -c=0"]
    assert "nvcc not found" in warnings[0]


def test_a_host_without_driver_is_warned_not_refused_but_disk_and_systemd_still_count():
    failures, warnings, pre = prereqs.judge(facts(driver=None, cc=None, systemd=249), TABLE,
                                            HARDENING)
    assert "no NVIDIA driver" in warnings[0] and pre == []
    assert len(failures) == 1 and "ProtectClock" in failures[0]


def test_cuda_version_is_read_from_the_torch_wheel_and_the_installed_torch(tmp_path):
    house = tmp_path / "wheels"
    house.mkdir()
    for version, cuda in (("2.13.0", "12.8"), ("2.14.1", "13.0")):
        with zipfile.ZipFile(house / f"torch-{version}-cp311-cp311-linux_x86_64.whl", "w") as whl:
            whl.writestr("torch/version.py",
                         f"__version__ = '{version}'\ncuda: Optional[str] = '{cuda}'\n")
    assert prereqs.torch_cuda_wheel(str(house)) == (
        "13.0", "torch-2.14.1-cp311-cp311-linux_x86_64.whl")
    assert prereqs.torch_cuda_wheel("") == (None, None)
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "torch"
    site.mkdir(parents=True)
    (site / "version.py").write_text("cuda = '12.8'\n")
    assert prereqs.torch_cuda_installed(str(tmp_path / "venv")) == "12.8"
    (site / "version.py").write_text("cuda = None\n")  # a CPU build
    assert prereqs.torch_cuda_installed(str(tmp_path / "venv")) is None
    # The wheel decides what an install puts in place; with nothing to install, the torch that
    # runs does (and a CPU build installed leaves it to the wheel).
    p = {"wheelhouse": str(house), "venv": str(tmp_path / "venv")}
    assert prereqs._torch_cuda(p, ["sglang==0.5.23"]) == (
        "13.0", "torch-2.14.1-cp311-cp311-linux_x86_64.whl")
    assert prereqs._torch_cuda(p, [])[0] == "13.0"
    (site / "version.py").write_text("cuda = '12.8'\n")
    assert prereqs._torch_cuda(p, []) == ("12.8", "installed torch")
    assert prereqs._torch_cuda(p, ["sglang==0.5.23"])[0] == "13.0"


def test_facts_read_through_the_fake_nvidia_smi(tmp_path):
    fake = tmp_path / "nvidia-smi"
    shutil.copy(ROOT / "tests" / "fakes" / "nvidia-smi", fake)
    (tmp_path / "driver.txt").write_text("575.57.08\n575.57.08\n")
    read = prereqs.read_facts({"nvidia_smi": str(fake), "venv": str(tmp_path / "none"),
                               "python": "python3", "wheelhouse": "", "cuda_min_driver": {},
                               "disk": [{"path": str(tmp_path / "a" / "b"), "gb": 1,
                                         "what": "x"}]})
    assert read["driver"] == "575.57.08"
    assert read["disk"][0]["free_gb"] > 0
    assert isinstance(read["systemd"], (int, type(None)))
    missing = prereqs.read_facts({"nvidia_smi": str(tmp_path / "absent"), "venv": "/none",
                                  "python": "python3", "wheelhouse": "", "disk": [],
                                  "cuda_min_driver": {}})
    assert missing["driver"] is None


def test_the_role_defaults_know_the_driver_the_pinned_torch_needs():
    import yaml
    defaults = yaml.safe_load((ROOT / "roles" / "sglang" / "defaults" / "main.yml").read_text())
    assert defaults["sglang_cuda_min_driver"]["13.0"] == "580.65.06"
    assert Path(ROOT / "tests" / "fakes" / "nvidia-smi").stat().st_mode & 0o111
