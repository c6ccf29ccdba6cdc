"""Immutable ml-envs (sglang_env): built once per package set, checked, switched, cleaned.

Real venvs, real uv and pip, offline: the packages are tiny wheels made here, installed with
--no-index from a local directory.
"""

import base64
import hashlib
import json
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path

import pytest
from support import load_module

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_envs as envs

envmod = load_module("sglang_env")
UV = shutil.which("uv") or str(Path(sys.executable).parent / "uv")


def _wheel(directory, name, version, payload=b"x = 1\n"):
    """A minimal, valid pure-Python wheel `name==version`."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": payload,
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files.items()) + f"{dist}/RECORD,,\n"
    path = Path(directory) / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
        archive.writestr(f"{dist}/RECORD", record)
    return path


@pytest.fixture(name="wheels")
def _wheels(tmp_path):
    directory = tmp_path / "wheels"
    directory.mkdir()
    _wheel(directory, "sglang", "0.5.23", b"x = 1\n" * 20000)
    _wheel(directory, "sglang", "0.5.15")
    _wheel(directory, "extra", "1.0")
    return directory


def _params(base, wheels, **kw):
    return {"base_dir": str(base), "python": sys.executable, "requirements": ["sglang==0.5.23"],
            "packages": None, "env": None, "no_deps": True, "installer": "uv", "uv": UV,
            "rebuild": False, "timeout": 300, "link_mode": "auto",
            "options": ["--no-index", "--find-links", str(wheels), "--offline"], **kw}


def test_the_id_is_what_defines_the_set():
    spec = envs.spec_of("3.11.2 /usr/bin/python3.11", ["sglang==0.5.23"], [], False)
    same = envs.spec_of("3.11.2 /usr/bin/python3.11", ["sglang==0.5.23"], [], False)
    assert envs.env_id(spec) == envs.env_id(same)
    for other in (envs.spec_of("3.12.1 /usr/bin/python3.12", ["sglang==0.5.23"], [], False),
                  envs.spec_of("3.11.2 /usr/bin/python3.11", ["sglang==0.5.15"], [], False),
                  envs.spec_of("3.11.2 /usr/bin/python3.11", ["sglang==0.5.23", "extra==1.0"],
                                 [], False),
                  envs.spec_of("3.11.2 /usr/bin/python3.11", ["sglang==0.5.23"],
                                 ["--index-url", "https://mirror"], False)):
        assert envs.env_id(other) != envs.env_id(spec)
    # The order the requirements come in does not make another env.
    assert envs.env_id(envs.spec_of("p", ["b==1", "a==1"], [], False)) == \
        envs.env_id(envs.spec_of("p", ["a==1", "b==1"], [], False))


@pytest.mark.slow
def test_built_once_then_reused_and_a_changed_env_is_refused(tmp_path, wheels):
    base = tmp_path / "base"
    first = envmod.present(_params(base, wheels))
    assert first["built"] and first["changed"]
    assert "sglang==0.5.23" in first["packages"]
    path = Path(first["path"])
    assert path.parent == base / "envs" and (path / "bin" / "python").exists()
    marker = envs.read_marker(str(path))
    assert marker["digest"] == first["digest"] and marker["requirements"] == ["sglang==0.5.23"]

    again = envmod.present(_params(base, wheels))
    assert not again["built"] and not again["changed"] and again["id"] == first["id"]
    assert again["digest"] == first["digest"]

    # Someone installs into the env by hand: the digest moves, the env is named and refused.
    envmod._run([UV, "pip", "install", "--python", str(path / "bin" / "python"), "--no-index",
                 "--find-links", str(wheels), "--offline", "extra==1.0"], 120)
    with pytest.raises(envmod.EnvError, match=f"env {first['id']} .* changed since it was built"):
        envmod.present(_params(base, wheels))
    with pytest.raises(envmod.EnvError, match="not the env these inputs define"):
        envmod.present(_params(base, wheels, env="0123456789abcdef"))
    rebuilt = envmod.present(_params(base, wheels, rebuild=True, env=first["id"]))
    assert rebuilt["built"] and not any(p.startswith("extra==") for p in rebuilt["packages"])


def test_check_mode_says_it_would_build_and_builds_nothing(tmp_path, wheels):
    result = envmod.present(_params(tmp_path / "base", wheels), check_mode=True)
    assert result["built"] and result["changed"]
    assert not (tmp_path / "base" / "envs" / result["id"]).exists()


def test_a_failed_build_leaves_no_env(tmp_path, wheels):
    params = _params(tmp_path / "base", wheels, requirements=["sglang==9.9.9"])
    with pytest.raises(envmod.EnvError, match="failed"):
        envmod.present(params)
    assert envs.listing(str(tmp_path / "base")) == []


def test_a_build_cut_short_is_built_again(tmp_path, wheels):
    base = tmp_path / "base"
    env = envmod.present(_params(base, wheels), check_mode=True)["id"]
    (base / "envs" / env / "bin").mkdir(parents=True)  # no marker: a build that died
    result = envmod.present(_params(base, wheels))
    assert result["built"] and result["id"] == env and envs.read_marker(result["path"])


@pytest.mark.parametrize("hostile", [
    ["sglang==0.5.23", "--index-url=https://evil.example/simple"],
    ["sglang==0.5.23", "/tmp/evil-src"],
    ["sglang==0.5.23", "evil @ https://evil.example/evil.whl"],
    [],
    ["# only a comment"],
    ["torch==2.13.0"],
])
def test_a_hostile_recorded_set_is_refused_before_anything_is_made(tmp_path, wheels, hostile):
    base = tmp_path / "base"
    params = _params(base, wheels, requirements=[], packages=hostile, env="0123456789abcdef")
    with pytest.raises(envmod.PackageSetError):
        envmod.present(params)
    with pytest.raises(envmod.PackageSetError):  # a release made before envs names none
        envmod.present(dict(params, env=None))
    assert not (base / "envs").exists()


@pytest.mark.parametrize("extra", ["--index-url=https://evil.example/simple", "/tmp/evil-src",
                                   "evil>=1.0", "x==1.0+evil.tar.gz", "-e ."])
def test_requirements_from_the_inventory_pass_the_same_gate(tmp_path, wheels, extra):
    base = tmp_path / "base"
    with pytest.raises(envmod.PackageSetError):
        envmod.present(_params(base, wheels, requirements=["sglang==0.5.23", extra]))
    assert not (base / "envs").exists()


def test_the_installer_runs_in_an_empty_directory_of_its_own(tmp_path, monkeypatch):
    (tmp_path / "x-1.0+evil.tar.gz").write_text("a build backend run as root")
    monkeypatch.chdir(tmp_path)
    seen = envmod._run([sys.executable, "-c", "import os; print(os.getcwd(), os.listdir())"], 60)
    where, listing = seen.split(" ", 1)
    assert where != str(tmp_path) and listing.strip() == "[]" and not os.path.exists(where)


# --- the environment the run inherits (docs/security.md#the-package-indexes) ---------------


@pytest.fixture(name="planted")
def _planted(tmp_path):
    """A package only another local user's wheelhouse holds: `planted==1.0`."""
    directory = tmp_path / "planted-wheels"
    directory.mkdir()
    _wheel(directory, "planted", "1.0", b"import os  # run as root\n")
    return directory


def _planting(tmp_path, wheels, installer):
    options = ["--no-index", "--find-links", str(wheels)] + (["--offline"] if installer == "uv"
                                                             else [])
    return _params(tmp_path / "base", wheels, installer=installer, options=options,
                   requirements=["sglang==0.5.23", "planted==1.0"])


def test_a_uv_toml_in_a_parent_of_the_working_directory_is_not_read(
        tmp_path, wheels, planted, monkeypatch):
    # The installer runs in a fresh directory under the temporary directory, /tmp on a host,
    # where any local user can leave a uv.toml: uv reads the working directory's parents.
    shared = tmp_path / "tmp"
    shared.mkdir()
    (shared / "uv.toml").write_text(f'[pip]\nfind-links = ["{planted}"]\n')
    monkeypatch.setattr("tempfile.tempdir", str(shared))
    with pytest.raises(envs.EnvError, match="planted"):
        envmod.present(_planting(tmp_path, wheels, "uv"))
    assert not any((tmp_path / "base" / "envs").glob("*/bin")), "no env is left behind"


@pytest.mark.parametrize(("installer", "variable"), [
    ("uv", "UV_FIND_LINKS"), ("uv", "UV_CONFIG_FILE"), ("uv", "XDG_CONFIG_HOME"),
    ("pip", "PIP_FIND_LINKS"), ("pip", "PIP_CONFIG_FILE"), ("pip", "XDG_CONFIG_HOME")])
def test_the_runs_environment_names_no_index_to_the_installer(
        tmp_path, wheels, planted, monkeypatch, installer, variable):
    # A variable of the run, or a config file it points at (the user's config directory
    # included): the env id would not count it, and what root installs would change.
    text = (f'[pip]\nfind-links = ["{planted}"]\n' if installer == "uv"
            else f"[global]\nfind-links = {planted}\n")
    config = tmp_path / "xdg" / installer / f"{installer}.{'toml' if installer == 'uv' else 'conf'}"
    config.parent.mkdir(parents=True)
    config.write_text(text)
    value = {"CONFIG_FILE": config, "FIND_LINKS": planted}.get(variable.split("_", 1)[1],
                                                                tmp_path / "xdg")
    monkeypatch.setenv(variable, str(value))
    with pytest.raises(envs.EnvError, match="planted"):
        envmod.present(_planting(tmp_path, wheels, installer))


def test_pythonpath_of_the_run_does_not_reach_venv_or_the_installer(tmp_path, monkeypatch):
    hijack = tmp_path / "hijack"
    (hijack / "venv").mkdir(parents=True)
    (hijack / "venv" / "__main__.py").write_text("raise SystemExit('hijacked')\n")
    monkeypatch.setenv("PYTHONPATH", str(hijack))
    child = envmod.installer_env(os.environ, str(tmp_path / "base"))
    assert not any(key.startswith(("UV_", "PIP_", "PYTHON")) for key in child
                   if key not in ("UV_CACHE_DIR", "PIP_CONFIG_FILE"))
    envmod._run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "v")], 120, child)
    assert (tmp_path / "v" / "bin" / "python").exists()


def test_the_inventorys_options_still_reach_the_installer(tmp_path, wheels, planted):
    # What the inventory names (and the env id counts) is what the installer reads.
    params = _params(tmp_path / "base", wheels, requirements=["sglang==0.5.23", "planted==1.0"],
                     options=["--no-index", "--find-links", str(wheels), "--find-links",
                              str(planted), "--offline"])
    result = envmod.present(params)
    assert "planted==1.0" in result["packages"]


@pytest.mark.slow
def test_a_release_env_is_built_again_from_its_recorded_set(tmp_path, wheels):
    base = tmp_path / "base"
    result = envmod.present(_params(base, wheels, requirements=[], env="0123456789abcdef",
                                    packages=["# recorded", "sglang==0.5.15", "extra==1.0"]))
    assert result["id"] == "0123456789abcdef" and result["built"]
    assert {"sglang==0.5.15", "extra==1.0"} <= set(result["packages"])
    assert envs.read_marker(result["path"])["from"] == "recorded set"


@pytest.mark.slow
def test_a_recorded_set_needs_no_wheel_for_what_a_fresh_venv_already_holds(tmp_path, wheels):
    base = tmp_path / "base"
    first = envmod.present(_params(base, wheels))
    recorded = first["packages"]  # pip (from ensurepip) among them: not in the wheelhouse
    assert any(line.startswith("pip==") for line in recorded)
    again = envmod.present(_params(base, wheels, requirements=[], packages=recorded,
                                   env="0123456789abcdef"))
    assert sorted(again["packages"]) == sorted(recorded)


@pytest.mark.slow
def test_a_failed_rebuild_puts_the_env_that_was_there_back(tmp_path, wheels):
    base = tmp_path / "base"
    first = envmod.present(_params(base, wheels))
    path = Path(first["path"])
    envmod._run([UV, "pip", "install", "--python", str(path / "bin" / "python"), "--no-index",
                 "--find-links", str(wheels), "--offline", "extra==1.0"], 120)
    changed = envs.digest(str(path))
    with pytest.raises(envmod.EnvError, match="failed"):
        envmod.present(_params(base, wheels, requirements=[], env=first["id"], rebuild=True,
                               packages=["sglang==9.9.9"]))
    # The env that was there (it may be the one that serves) is back as it was.
    assert envs.digest(str(path)) == changed and envs.read_marker(str(path))
    assert [n for n in os.listdir(base / "envs") if not n.startswith(".")] == [first["id"]]
    assert not (base / "envs" / ".trash").exists()


def _module_file(env):
    return next(Path(env["path"]).glob("lib/python*/site-packages/sglang/__init__.py"))


@pytest.mark.slow
def test_an_edit_in_place_reaches_no_other_env_nor_the_cache_and_is_named(tmp_path, wheels):
    base = tmp_path / "base"
    one = envmod.present(_params(base, wheels))
    two = envmod.present(_params(base, wheels, requirements=["sglang==0.5.23", "extra==1.0"]))
    assert envs.read_marker(one["path"])["link_mode"] in ("copy", "clone")
    cached = next((base / "envs" / ".uv-cache").glob("archive-v*/*/sglang/__init__.py"))
    before = {p: p.read_bytes() for p in (_module_file(two), cached)}
    # A hot-fix as root would make it: written in place (the same inode), not replaced.
    with open(_module_file(one), "r+b") as fh:
        fh.seek(0)
        fh.write(b"y")
    assert {p: p.read_bytes() for p in before} == before  # the other env and the cache as built
    assert envs.check(str(base), two["id"])["intact"]
    edited = envs.check(str(base), one["id"])
    assert not edited["intact"] and edited["digest"] == one["digest"]  # RECORDs cannot see it
    assert edited["changed"] == ["lib/python3.11/site-packages/sglang".replace(
        "python3.11", f"python{sys.version_info[0]}.{sys.version_info[1]}")]
    with pytest.raises(envmod.EnvError, match="files changed in place in .*site-packages/sglang"):
        envmod.present(_params(base, wheels))


@pytest.mark.slow
def test_hardlinks_asked_by_name_share_the_files_and_the_check_names_every_env(tmp_path, wheels):
    base = tmp_path / "base"
    one = envmod.present(_params(base, wheels, link_mode="hardlink"))
    two = envmod.present(_params(base, wheels, link_mode="hardlink",
                                 requirements=["sglang==0.5.23", "extra==1.0"]))
    assert _module_file(one).stat().st_ino == _module_file(two).stat().st_ino
    assert envs.disk_usage([one["path"], two["path"]]) < 2 * envs.disk_usage([one["path"]])
    with open(_module_file(one), "r+b") as fh:
        fh.write(b"y")
    os.utime(_module_file(one), ns=(1, 1))
    assert not envs.check(str(base), one["id"])["intact"]
    assert not envs.check(str(base), two["id"])["intact"]  # the same inode: both are named


def test_auto_takes_copies_where_the_filesystem_makes_no_reflink(tmp_path):
    assert envs.link_mode(str(tmp_path), "hardlink") == "hardlink"
    assert envs.link_mode(str(tmp_path)) in ("copy", "clone")
    assert [n for n in os.listdir(tmp_path / "envs")] == []  # the probe leaves nothing


def test_a_rebuild_killed_midway_is_put_back_by_the_next_run(tmp_path, wheels):
    base = tmp_path / "base"
    first = envmod.present(_params(base, wheels))
    path = Path(first["path"])
    # What a kill during a rebuild leaves: the env aside, a half-built one in its place.
    os.rename(path, f"{path}.replaced-4242")
    (path / "bin").mkdir(parents=True)
    again = envmod.present(_params(base, wheels))
    assert not again["built"] and again["digest"] == first["digest"]
    assert again["recovered"] == [f"put {first['id']}.replaced-4242 back as {first['id']} "
                                  "(its rebuild was cut short)"]
    # ...and when the rebuild had finished (its marker written), the one aside goes.
    shutil.copytree(path, f"{path}.replaced-4243", symlinks=True)
    assert envmod.present(_params(base, wheels))["recovered"] == [
        f"removed {first['id']}.replaced-4243 (its rebuild finished)"]
    assert [n for n in os.listdir(base / "envs") if not n.startswith(".")] == [first["id"]]


@pytest.mark.slow
def test_the_cache_share_of_envs_no_longer_kept_is_reclaimed(tmp_path, wheels):
    base = tmp_path / "base"
    one = envmod.present(_params(base, wheels))
    two = envmod.present(_params(base, wheels, requirements=["sglang==0.5.15", "extra==1.0"]))
    cache = base / "envs" / ".uv-cache"
    assert len(list(cache.glob("archive-v*/*/extra-1.0.dist-info"))) == 1
    planned = envs.reclaim_cache(str(base), one["packages"], check_mode=True)
    assert len(planned) == 2 and list(cache.glob("archive-v*/*/extra-1.0.dist-info"))
    assert envs.reclaim_cache(str(base), one["packages"]) == planned
    assert not list(cache.glob("archive-v*/*/extra-1.0.dist-info"))
    assert not list(cache.glob("archive-v*/*/sglang-0.5.15.dist-info"))
    assert list(cache.glob("archive-v*/*/sglang-0.5.23.dist-info"))  # the kept env's share
    # The env removed with them built again (a rollback to its release, an upgrade move back):
    # uv's index must not point at an entry reclaimed (make crash-tasks: "failed to read").
    shutil.rmtree(base / "envs" / two["id"])
    again = envmod.present(_params(base, wheels, requirements=["sglang==0.5.15", "extra==1.0"]))
    assert again["built"] and again["id"] == two["id"]


def test_no_deps_is_for_the_pin_alone():
    commands = envmod.install_commands("/e", "uv", "/uv", ["--no-index"],
                                       ["sglang==0.5.23", "standin==0.1"], ["sglang==0.5.23"])
    assert commands == [
        ["/uv", "pip", "install", "--no-config", "--python", "/e/bin/python", "--link-mode",
         "copy", "--compile-bytecode", "--no-index", "--no-deps", "sglang==0.5.23"],
        ["/uv", "pip", "install", "--no-config", "--python", "/e/bin/python", "--link-mode",
         "copy", "--compile-bytecode", "--no-index", "standin==0.1"]]
    assert envmod.install_commands("/e", "pip", "/uv", [], ["a==1"]) == [
        ["/e/bin/python", "-m", "pip", "--disable-pip-version-check", "install", "a==1"]]


def test_disk_usage_counts_a_hardlinked_file_once(tmp_path):
    tree = tmp_path / "a"
    tree.mkdir()
    (tree / "big").write_bytes(b"\0" * 1_000_000)
    other = tmp_path / "b"
    other.mkdir()
    os.link(tree / "big", other / "big")
    one = envs.disk_usage([str(tree)])
    assert one >= 1_000_000
    assert envs.disk_usage([str(tree), str(other)]) == one


def test_a_package_removed_by_hand_makes_the_planned_env_not_intact(tmp_path, wheels):
    # What host/read.yml reads before the no-change check: a re-run must not call a changed
    # env unchanged (it checked the marker only, and sglang_env_rebuild never ran there).
    prereqs = load_module("sglang_host_prereqs")
    base = tmp_path / "base"
    params = _params(base, wheels, requirements=["sglang==0.5.23", "extra==1.0"])
    built = envmod.present(params)
    read = {"envs_base_dir": str(base), "python": sys.executable,
            "requirements": params["requirements"], "install_options": params["options"],
            "no_deps": params["no_deps"]}
    planned = prereqs.planned_env(read)
    assert planned["id"] == built["id"] and planned["complete"] and planned["intact"]
    shutil.rmtree(Path(built["path"]) / "lib" / "python3.11" / "site-packages" / "extra")
    planned = prereqs.planned_env(read)
    assert not planned["intact"] and any("extra" in group for group in planned["changed"])
    # An env not built yet is not "changed".
    assert prereqs.planned_env(dict(read, requirements=["sglang==0.5.15"]))["intact"]


def _fake_env(root):
    """An env's files as a build leaves them: a module and the bytecode compiled for it."""
    pkg = root / "lib" / "python3.11" / "site-packages" / "pkg"
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "mod.py").write_text("x = 1\n")
    (pkg / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\x00" * 32)
    return pkg


def _same_size_edit(path, data):
    """An edit in place that keeps the size and puts the mtime back (as `touch -r` would)."""
    before = path.stat()
    with open(path, "r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_same_size_edit_with_its_mtime_put_back_is_named(tmp_path):
    pkg = _fake_env(tmp_path)
    marker = {"link_mode": "copy", **envs.record_tree(str(tmp_path), "copy")}
    assert marker["tree_version"] == envs.TREE_VERSION
    time.sleep(0.02)
    _same_size_edit(pkg / "mod.py", b"y")
    changed = envs.tree_changes(marker["tree"], envs.tree_again(str(tmp_path), marker))
    assert changed == ["lib/python3.11/site-packages/pkg"]
    # Form 1 (markers written before ctime was counted) could not see it.
    old = envs.tree(str(tmp_path))
    _same_size_edit(pkg / "mod.py", b"z")
    assert envs.tree(str(tmp_path)) == old


def test_a_replaced_pyc_is_named_and_bytecode_written_later_is_not(tmp_path):
    pkg = _fake_env(tmp_path)
    marker = {"link_mode": "copy", **envs.record_tree(str(tmp_path), "copy")}
    time.sleep(0.02)
    # Python writes bytecode for a module the build did not compile: not an edit.
    (pkg / "late.py").write_text("")
    marker = {"link_mode": "copy", **envs.record_tree(str(tmp_path), "copy")}
    time.sleep(0.02)
    (pkg / "__pycache__" / "late.cpython-311.pyc").write_bytes(b"\x01" * 16)
    assert envs.tree_changes(marker["tree"], envs.tree_again(str(tmp_path), marker)) == []
    # The build's bytecode replaced (a new file under the same name, its mtime put back).
    pyc = pkg / "__pycache__" / "mod.cpython-311.pyc"
    stat = pyc.stat()
    pyc.unlink()
    pyc.write_bytes(b"\xff" * 32)
    os.utime(pyc, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert envs.tree_changes(marker["tree"], envs.tree_again(str(tmp_path), marker)) == \
        ["lib/python3.11/site-packages/pkg"]


def test_a_hardlinked_env_does_not_count_ctime_which_linking_another_env_moves(tmp_path):
    pkg = _fake_env(tmp_path / "one")
    marker = {"link_mode": "hardlink", **envs.record_tree(str(tmp_path / "one"), "hardlink")}
    time.sleep(0.02)
    os.link(pkg / "mod.py", tmp_path / "another-env-mod.py")  # moves mod.py's ctime
    assert envs.tree_changes(marker["tree"],
                             envs.tree_again(str(tmp_path / "one"), marker)) == []


@pytest.mark.parametrize("rel", [
    "pyvenv.cfg", "bin/python", "bin/activate", "include/site/python3.11/x.h",
    "lib/python3.11/site-packages/six.py", "lib/python3.11/site-packages/torch/nn/init.py",
    "lib/python3.11/site-packages/torch/__pycache__/a.pyc", "lib/python3.11/os.py",
    "lib/python3.11/site-packages/a/site-packages/b/c.py", "site-packages/x/y.py",
    "lib/site-packages", "lib/python3.11/site-packages/sglang-0.5.23.dist-info/RECORD"])
def test_a_directorys_group_is_the_group_of_each_file_in_it(rel):
    """The tree takes a file's group from its directory where that decides it (one computation a
    directory, not a file): never another group than the file's own."""
    directory = os.path.dirname(rel)
    assert (envs._dir_group(directory) or envs._group(rel)) == envs._group(rel)
    for name in ("a.py", "site-packages", "__init__.py"):
        path = f"{directory}/{name}" if directory else name
        assert (envs._dir_group(directory) or envs._group(path)) == envs._group(path)


def test_the_tree_groups_and_orders_as_its_recorded_form(tmp_path):
    """The form a marker records (tree_version 2) is read again the same: each group's files
    depth first in name order, hashed one line each as the docstring of tree says."""
    env = tmp_path / "env"
    files = ["pyvenv.cfg", "bin/python3", "lib/python3.11/site-packages/six.py",
             "lib/python3.11/site-packages/pkg/b.py", "lib/python3.11/site-packages/pkg/a/x.py",
             "lib/python3.11/site-packages/pkg/__pycache__/b.cpython-311.pyc"]
    for rel in files:
        (env / rel).parent.mkdir(parents=True, exist_ok=True)
        (env / rel).write_text(rel)
    at_ns = time.time_ns()
    expected = {}
    for rel in ["bin/python3", "lib/python3.11/site-packages/pkg/__pycache__/b.cpython-311.pyc",
                "lib/python3.11/site-packages/pkg/a/x.py", "lib/python3.11/site-packages/pkg/b.py",
                "lib/python3.11/site-packages/six.py", "pyvenv.cfg"]:
        info = os.lstat(env / rel)
        stamp = f" {info.st_ctime_ns}" if "__pycache__" in rel else ""
        line = (f"{rel}\0f {info.st_size} {info.st_mtime_ns} {info.st_ino} "
                f"{info.st_mode:o}{stamp}\n")
        expected.setdefault(envs._group(rel), hashlib.sha256()).update(line.encode())
    assert envs.tree(str(env), at_ns) == {g: h.hexdigest() for g, h in sorted(expected.items())}


def test_the_packages_read_in_parallel_give_the_digests_read_in_one_process(tmp_path, monkeypatch):
    """A large env's packages are read in processes: the same groups, the same digests, an edit
    in one package named as it is when one process reads them all."""
    env = tmp_path / "env"
    site = env / "lib/python3.11/site-packages"
    for n in range(12):
        for rel in (f"pkg{n}/__init__.py", f"pkg{n}/sub/m.py", f"mod{n}.py"):
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).write_text(rel)
    (env / "bin").mkdir()
    (env / "bin/python").symlink_to("/usr/bin/python3")
    monkeypatch.setattr(envs, "TREE_PARALLEL_MIN", 10**6)
    alone = envs.tree(str(env))
    monkeypatch.setattr(envs, "TREE_PARALLEL_MIN", 1)
    monkeypatch.setattr(envs, "TREE_WORKERS", 3)
    assert envs.tree(str(env)) == alone and len(alone) == 25
    (site / "pkg7/sub/m.py").write_text("edited in place")
    assert envs.tree_changes(alone, envs.tree(str(env))) == [
        "lib/python3.11/site-packages/pkg7"]


@pytest.mark.slow
def test_a_marker_an_older_release_wrote_is_recorded_again_once_then_sees_a_same_size_edit(
        tmp_path, wheels):
    """Issue 55, part 4: a marker of form 1 (written by an older release of this project, no
    ctime, no bytecode) did not see a same-size edit with its mtime put back. The build step
    records such an env's tree again once, when it is intact in its own form; after that the
    switch's check names such an edit."""
    base = tmp_path / "base"
    first = envmod.present(_params(base, wheels))
    path = Path(first["path"])
    marker = envs.read_marker(str(path))
    old = {k: v for k, v in marker.items() if k not in ("tree_version", "tree_at_ns")}
    old["tree"] = envs.tree(str(path))  # form 1, as releases before issue 50 wrote it
    (path / envs.MARKER).write_text(json.dumps(old))
    assert envs.old_form(envs.read_marker(str(path)))
    # The re-run's read takes the whole path once for it (host/read_changes.yml).
    prereqs = load_module("sglang_host_prereqs")
    params = _params(base, wheels)
    planned = prereqs.planned_env({"envs_base_dir": str(base), "python": sys.executable,
                                   "requirements": params["requirements"],
                                   "install_options": params["options"], "no_deps": True})
    assert planned["id"] == first["id"] and planned["old_form"] and planned["intact"]
    module_file = next(path.glob("lib/python*/site-packages/sglang/*.py"))
    time.sleep(0.02)
    _same_size_edit(module_file, b"y")
    # Form 1 cannot see it: intact in its own form, recorded again (check mode says it would).
    assert envmod.present(_params(base, wheels), check_mode=True)["rerecorded"] is True
    assert envs.old_form(envs.read_marker(str(path)))  # check mode wrote nothing
    again = envmod.present(_params(base, wheels))
    assert again["rerecorded"] and again["changed"] and not again["built"]
    assert not envs.old_form(envs.read_marker(str(path)))
    then = envmod.present(_params(base, wheels))
    assert not then["rerecorded"] and not then["changed"]
    assert not prereqs.planned_env({"envs_base_dir": str(base), "python": sys.executable,
                                    "requirements": params["requirements"],
                                    "install_options": params["options"],
                                    "no_deps": True})["old_form"]
    time.sleep(0.02)
    _same_size_edit(module_file, b"z")
    with pytest.raises(envmod.EnvError, match="changed since it was built"):
        envmod.present(_params(base, wheels))
