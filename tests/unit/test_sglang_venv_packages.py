"""The ml-env's whole package set: read from metadata, put back exactly."""

import subprocess
import sys
from types import SimpleNamespace

import pytest
from support import load_module

venvpkgs = load_module("sglang_venv_packages")


def test_plan_installs_what_differs_and_removes_what_the_set_lacks():
    current = ["torch==2.14.1", "sglang==0.5.23", "Foo_Bar==1.0", "pip==24.0"]
    target = ["torch==2.13.0", "sglang==0.5.23", "foo-bar==1.0", "pip==24.0", "numpy==2.0.0"]
    install, remove = venvpkgs.plan(current, target)
    assert install == ["numpy==2.0.0", "torch==2.13.0"]
    assert remove == []
    install, remove = venvpkgs.plan(target, current)
    assert install == ["torch==2.14.1"]
    assert remove == ["numpy"]
    assert venvpkgs.plan(current, current) == ([], [])


@pytest.mark.parametrize("line", ["sglang>=0.5", "sglang", "==1.0"])
def test_unpinned_lines_are_refused(line):
    with pytest.raises(ValueError, match="name==version"):
        venvpkgs.parse([line])


def test_read_lists_every_distribution_of_the_venv(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(sys.executable)
    exists, packages = venvpkgs.read(str(tmp_path))
    assert exists and any(line.startswith("pip==") for line in packages)
    assert packages == sorted(packages, key=lambda line: line.split("==")[0])
    assert venvpkgs.read(str(tmp_path / "none")) == (False, [])


def test_commands_for_pip_and_uv():
    pip = venvpkgs.commands("/v", "pip", "uv", ["--no-index", "--find-links", "/w"],
                            ["a==1"], ["b"], "/tmp/r.txt")
    assert pip == [["/v/bin/python", "-m", "pip", "--disable-pip-version-check", "install",
                    "--no-index", "--find-links", "/w", "--no-deps", "-r", "/tmp/r.txt"],
                   ["/v/bin/python", "-m", "pip", "--disable-pip-version-check", "uninstall",
                    "-y", "b"]]
    uv = venvpkgs.commands("/v", "uv", "/u/bin/uv", [], [], ["b"], "/tmp/r.txt")
    assert uv == [["/u/bin/uv", "pip", "uninstall", "--python", "/v/bin/python", "b"]]


def test_restore_fails_when_the_installer_did_not_reach_the_set(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(sys.executable)
    ran = []

    def run(argv):
        ran.append(argv)
        return SimpleNamespace(returncode=0, stdout="", stderr="")

    _, current = venvpkgs.read(str(tmp_path))
    with pytest.raises(RuntimeError, match="still differs"):
        venvpkgs.restore(str(tmp_path), current + ["no-such-pkg-xyz==1.0"], run=run,
                         recorded=False)
    assert ran and ran[0][-2:][0] == "-r"
    # Nothing to do: no command at all.
    ran.clear()
    assert venvpkgs.restore(str(tmp_path), current, run=run, recorded=False)["changed"] is False
    assert ran == []


def test_restore_removes_what_the_recorded_set_lacks_in_a_real_venv(tmp_path):
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    _, before = venvpkgs.read(str(venv))
    pip_only = [line for line in before if line.startswith("pip==")]
    if pip_only == before:
        pytest.skip("this Python's venv holds pip only: nothing to remove")
    # A set read from the venv before a first install (no sglang in it): not a release's record.
    out = venvpkgs.restore(str(venv), pip_only, recorded=False)
    assert out["changed"] and out["installed"] == []
    assert venvpkgs.read(str(venv))[1] == pip_only
