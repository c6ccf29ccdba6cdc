import os
import subprocess
import sys

from support import load_module

pipcheck = load_module("sglang_pip_check")


def fake_venv(tmp_path):
    """A directory whose bin/python is this test run's interpreter."""
    (tmp_path / "bin").mkdir()
    os.symlink(sys.executable, tmp_path / "bin" / "python")
    return str(tmp_path)


def test_installed_pins_are_satisfied_and_others_missing(tmp_path):
    venv = fake_venv(tmp_path)
    # What that interpreter itself says pip's version is (pip is in every venv).
    pip_version = subprocess.check_output(
        [os.path.join(venv, "bin", "python"), "-c",
         "import importlib.metadata as m; print(m.version('pip'))"], text=True).strip()
    out = pipcheck.check(venv, [f"pip=={pip_version}", "pip==0.0.1",
                                "no-such-package-xyz==1.0", "pip>=1"])
    assert out["venv_exists"] is True
    assert out["installed"] == {"pip": pip_version, "no-such-package-xyz": None}
    assert out["missing"] == ["pip==0.0.1", "no-such-package-xyz==1.0"]


def test_missing_venv_means_everything_is_missing(tmp_path):
    out = pipcheck.check(str(tmp_path / "nope"), ["sglang==0.5.23"])
    assert out == {"venv_exists": False, "installed": {}, "missing": ["sglang==0.5.23"]}
