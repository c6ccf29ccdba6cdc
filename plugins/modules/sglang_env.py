#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Immutable ml-envs: build one per package set, or check the one that is there."""

DOCUMENTATION = r"""
module: sglang_env
short_description: Build or check the immutable ml-env of a package set under a base directory
description:
  - An env is a virtual environment C(<base_dir>/envs/<id>/) built once for one package set and
    never changed afterwards. Its id is the first 16 hex digits of the sha256 of what defines
    it (the Python, the requirements, the install options), so the same inputs name the same
    env on every run and every host.
  - C(state=present) builds the env when it does not exist (a directory without the marker, a
    build cut short, is removed and built again) and checks it when it does; the marker
    C(.sglang-env.json), written last, records the digest (sha256 over the dist-infos' RECORD
    files) and the package set. An env whose digest changed since it was built is refused,
    named, unless C(rebuild=true). With C(packages) (a release's recorded set, C(name==version)
    lines only, checked by the one package line validator) and C(env), the env of that release
    is built again from its record with C(--no-deps).
  - uv puts the files from its cache (C(<base_dir>/envs/.uv-cache), on the envs' filesystem)
    into each env as C(link_mode) says (by default reflinks where the filesystem makes them,
    copies elsewhere), so that an in-place edit of one env never reaches another env or the
    cache; pip copies. The marker also records the env's tree (each file's size, mtime, inode
    and mode), read again before a switch, so an edit made in place is named.
  - Builds run under the envs lock, after C(recover) finished or undid what a cut run left
    (an env moved aside for a rebuild is put back unless the rebuild finished, a build cut
    short is removed).
  - M(sglang.deploy.sglang_release) switches the ml-env link (C(sglang_venv)) to a release's env
    with C(current), and removes the envs no release names.
options:
  base_dir:
    description: Directory that holds C(envs/) (the releases' base directory).
    type: path
    required: true
  python:
    description: The Python the env is made from.
    type: str
    default: python3
  requirements:
    description:
      - Requirements to install, the SGLang pin first, then the extra packages, each
        C(name==version), checked by the one package line validator as a recorded set is (no
        option, path, URL or range).
    type: list
    elements: str
    default: []
  packages:
    description:
      - A release's recorded package set to build the env from (C(name==version) lines, sglang
        among them; no option, path or URL), with C(env). Installed with C(--no-deps).
    type: list
    elements: str
  env:
    description:
      - With C(packages), the id the release names (computed from the set when omitted, for a
        release made before envs). With C(requirements), the id the deploy planned
        (M(sglang.deploy.sglang_host_prereqs)), checked against the one the inputs define.
    type: str
  no_deps:
    description: Install the SGLang pin (the first requirement) with C(--no-deps); the extra
      packages are installed with their dependencies.
    type: bool
    default: false
  options:
    description: Install options (C(--no-index --find-links DIR), an index); part of the id.
    type: list
    elements: str
    default: []
  installer:
    description: uv (files linked from its cache) or pip.
    type: str
    choices: [uv, pip]
    default: uv
  uv:
    description: Path of the uv binary (installer=uv).
    type: path
    default: uv
  link_mode:
    description:
      - How uv puts files into the env (installer=uv). C(auto) reflinks where the envs'
        filesystem makes them (btrfs, XFS) and copies elsewhere; C(hardlink) shares the files
        with the cache and every env of the same packages (the least disk, but an in-place
        edit of one env is an edit of all of them, and the tree check then refuses each).
    type: str
    choices: [auto, clone, copy, hardlink]
    default: auto
  rebuild:
    description: Build again an env whose digest no longer matches its marker.
    type: bool
    default: false
  timeout:
    description: Seconds each installer command may take.
    type: int
    default: 3600
notes:
  - Not a builtin because there is no equivalent; M(ansible.builtin.pip) installs into a venv in
    place, which is what these envs replace (a rollback switches to an env that was never
    touched instead of repairing one).
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Build (or reuse) the env of the pinned set
  sglang.deploy.sglang_env:
    base_dir: /opt/sglang
    python: python3.11
    requirements: [sglang==0.5.23]
  register: env
"""

RETURN = r"""
id:
  description: The env's id.
  type: str
  returned: always
path:
  description: The env's directory.
  type: str
  returned: always
digest:
  description: sha256 over the env's dist-info RECORD files (null when it would be built).
  type: str
  returned: always
built:
  description: Whether this task built the env (would build, in check mode).
  type: bool
  returned: always
packages:
  description: The env's package set, sorted C(name==version) lines.
  type: list
  returned: always
recovered:
  description: What a cut run had left under C(envs/) and this task put back or removed.
  type: list
  returned: always
rerecorded:
  description: Whether the env's tree was recorded again in today's form (once, for a marker
    an older release of this project wrote, which does not see a same-size edit with its mtime
    put back nor a replaced C(.pyc)); the env was intact in the form it was recorded in.
  type: bool
  returned: always
"""

import datetime
import json
import os
import shutil
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_envs as envs
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_envs import (
    MARKER, UV_CACHE, EnvError, check, digest, env_id, env_path, envs_dir, python_identity,
    spec_of)
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_files import fsync_dir, write_atomic
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_packages import (
    PackageSetError, canonical, package_lines)
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_pip import installed
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_read import text_of


def _run(argv, timeout, env=None):
    """Run an installer command in an empty working directory of its own: a requirement that
    looks like a file (pip reads `x==1.0+a.tar.gz` as one when it exists) finds nothing there."""
    with tempfile.TemporaryDirectory(prefix="sglang-env-") as empty:
        return _run_in(argv, timeout, env, empty)


def _run_in(argv, timeout, env, cwd):
    try:
        proc = subprocess.run(argv, capture_output=True, check=False, timeout=timeout,
                              env=env, stdin=subprocess.DEVNULL, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise EnvError(f"{' '.join(argv[:4])} ... did not finish within {timeout} s") from None
    except OSError as exc:
        raise EnvError(f"{' '.join(argv[:4])} ... could not run: {exc}") from None
    if proc.returncode != 0:
        raise EnvError(f"{' '.join(argv[:4])} ... failed: "
                       f"{(text_of(proc.stderr) or text_of(proc.stdout)).strip()[-1500:]}")
    return text_of(proc.stdout)


def installer_env(environ, base_dir):
    """The installer's environment: the run's, less whatever could choose what root installs
    without being named in the inventory's options (which the env id counts). Every `UV_*` and
    `PIP_*` variable goes (an index, find-links, a constraint file), and so does every `PYTHON*`
    one (PYTHONPATH would put another user's modules in front of pip's, and of `venv`'s). No
    configuration file is read: uv runs with --no-config (without it, uv reads `uv.toml` and
    `pyproject.toml` from the working directory and every parent, which under /tmp any local
    user can write), pip with PIP_CONFIG_FILE=/dev/null. The TLS trust stays (SSL_CERT_FILE,
    the system's store), and so does a proxy. docs/security.md#the-package-indexes."""
    child = {key: value for key, value in environ.items()
             if not key.startswith(("UV_", "PIP_", "PYTHON"))}
    child.update(UV_CACHE_DIR=os.path.join(envs_dir(base_dir), UV_CACHE),
                 PIP_CONFIG_FILE=os.devnull)
    return child


def install_commands(path, installer, uv, options, items, no_deps=(), mode="copy"):
    """The installer's commands: `no_deps` (a subset of `items`) installed with --no-deps, then
    the rest with their dependencies. uv puts files from its cache by `mode`; pip copies.
    Both leave the bytecode compiled (pip does by default, uv is asked): the service user may
    not write into the env, and without .pyc files every start of the server and every
    resolution compiles SGLang's ~5,600 modules again (28 s of a 54 s resolution on 0.5.23)."""
    python = os.path.join(path, "bin", "python")
    if installer == "uv":
        base = [uv, "pip", "install", "--no-config", "--python", python, "--link-mode", mode,
                "--compile-bytecode", *options]
    else:
        base = [python, "-m", "pip", "--disable-pip-version-check", "install", *options]
    alone = [i for i in items if i in no_deps]
    rest = [i for i in items if i not in no_deps]
    return ([[*base, "--no-deps", *alone]] if alone else []) + ([[*base, *rest]] if rest else [])


def missing(items, present):
    """The `name==version` items that the lines `present` do not already hold (pip and
    setuptools that `python -m venv` put in a fresh env: no index needed for them)."""
    have = {(canonical(line.split("==")[0]), line.split("==", 1)[1]) for line in present}
    return [i for i in items if (canonical(i.split("==")[0]), i.split("==", 1)[-1]) not in have]


def build(base_dir, env, python, items, options, no_deps=(), installer="uv", uv="uv",
          timeout=3600, record=None, run=None, only_missing=False, mode="auto"):
    """Make envs/<env> under the envs lock: venv, install, marker last.

    What a cut run left is recovered first. An env already there (changed, rebuilt on request:
    it may be the one that serves) is moved aside as `<id>.replaced-<pid>` and put back if the
    build fails, or by the next run's recovery if this one is killed; a failure leaves no new
    env behind. `only_missing`: install only what the fresh venv lacks (a recorded set)."""
    with envs.lock(base_dir):
        envs.recover(base_dir)
        return _build(base_dir, env, python, items, options, no_deps, installer, uv, timeout,
                      record, run or _run, only_missing, envs.link_mode(base_dir, mode))


def _build(base_dir, env, python, items, options, no_deps, installer, uv, timeout, record, run,
           only_missing, mode):
    path = env_path(base_dir, env)
    aside = f"{path}.replaced-{os.getpid()}"
    if os.path.lexists(path):
        os.rename(path, aside)
        fsync_dir(envs_dir(base_dir))
    child = installer_env(os.environ, base_dir)
    try:
        run([python, "-m", "venv", path], timeout, child)
        if only_missing:
            items = missing(items, installed(path)[1])
            no_deps = items
        for argv in install_commands(path, installer, uv, options, items, no_deps, mode):
            run(argv, timeout, child)
        packages = installed(path)[1]
        linked = mode if installer == "uv" else "copy"
        marker = {"id": env, "digest": digest(path), **envs.record_tree(path, linked),
                  "packages": packages,
                  "built": datetime.datetime.now(datetime.timezone.utc).strftime(
                      "%Y-%m-%dT%H:%M:%SZ"),
                  "installer": installer, "link_mode": linked, **(record or {})}
        write_atomic(os.path.join(path, MARKER), json.dumps(marker, indent=2, sort_keys=True)
                     + "\n", 0o644)
    except BaseException:
        envs.discard(path, envs.trash_dir(base_dir))
        if os.path.lexists(aside):
            os.rename(aside, path)
        raise
    envs.discard(aside, envs.trash_dir(base_dir))
    return marker


def rerecord(base_dir, path):
    """Record the tree of the env at `path` again in today's form, under the envs lock: once,
    for an env an older release of this project recorded, in a form that does not see a
    same-size edit with its mtime put back nor a replaced .pyc."""
    with envs.lock(base_dir):
        marker = envs.rerecorded(path, envs.read_marker(path))
        write_atomic(os.path.join(path, MARKER),
                     json.dumps(marker, indent=2, sort_keys=True) + "\n", 0o644)


def wanted(p, python):
    """(items, no_deps, record, env id) of the env the inputs define: the recorded set
    (`packages`, a rollback's) or the requirements. Checked before anything else: a refused set
    makes nothing and removes nothing."""
    if p["packages"] is not None:
        items = package_lines(p["packages"], "the recorded set to build the env from")
        env = p["env"] or env_id({"python": python_identity(python), "packages": sorted(items)})
        return items, items, {"from": "recorded set"}, env
    if not p["requirements"]:
        raise EnvError("requirements (the SGLang pin, extra packages) or packages is needed")
    # The one gate to the installer, whatever the source (the pin and the inventory's extra
    # packages, a release made before sets were recorded): name==version lines only.
    items = package_lines(p["requirements"], "the requirements (sglang_version, "
                          "sglang_pip_extra_packages)", recorded=False)
    env = env_id(spec_of(python_identity(python), items, list(p["options"]), p["no_deps"]))
    if p["env"] and p["env"] != env:
        raise EnvError(f"the env planned ({p['env']}) is not the env these inputs define "
                       f"({env}): the Python or the install options changed during the run")
    return (items, items[:1] if p["no_deps"] else [],
            {"from": "requirements", "requirements": sorted(items)}, env)


def present(p, check_mode=False, run=None):
    """Build or reuse (and check) the env the inputs define."""
    base_dir, options = p["base_dir"], list(p["options"])
    python = shutil.which(p["python"]) or p["python"]
    items, no_deps, record, env = wanted(p, python)
    if not check_mode:
        with envs.lock(base_dir):
            recovered = envs.recover(base_dir)
    state = check(base_dir, env)
    result = {"id": env, "path": state["path"], "built": False, "changed": False,
              "rerecorded": False, "recovered": [] if check_mode else recovered}
    if state["complete"] and (state["intact"] or not p["rebuild"]):
        if not state["intact"]:
            raise EnvError(f"{envs.refusal(state)}; refused. Deploy with "
                           "sglang_env_rebuild=true to build it again")
        rerecorded = envs.old_form(state["marker"])
        if rerecorded and not check_mode:
            rerecord(base_dir, state["path"])
        return dict(result, digest=state["digest"], packages=state["marker"].get("packages", []),
                    changed=rerecorded, rerecorded=rerecorded)
    result.update(built=True, changed=True, digest=None, packages=[])
    if check_mode:
        return result
    marker = build(base_dir, env, python, items, options, no_deps, p["installer"], p["uv"],
                   p["timeout"], record, run, only_missing=p["packages"] is not None,
                   mode=p["link_mode"])
    return dict(result, digest=marker["digest"], packages=marker["packages"])


def main():
    module = AnsibleModule(
        argument_spec={
            "base_dir": {"type": "path", "required": True},
            "python": {"type": "str", "default": "python3"},
            "requirements": {"type": "list", "elements": "str", "default": []},
            "packages": {"type": "list", "elements": "str"},
            "env": {"type": "str"},
            "no_deps": {"type": "bool", "default": False},
            "options": {"type": "list", "elements": "str", "default": []},
            "installer": {"type": "str", "choices": ["uv", "pip"], "default": "uv"},
            "uv": {"type": "path", "default": "uv"},
            "link_mode": {"type": "str", "choices": list(envs.LINK_MODES), "default": "auto"},
            "rebuild": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 3600},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = present(p, module.check_mode)
    except PackageSetError as exc:
        module.fail_json(msg=f"{exc}; nothing was installed or removed")
    except (EnvError, RuntimeError) as exc:
        module.fail_json(msg=str(exc))
    except (OSError, ValueError) as exc:
        # ValueError: a NUL byte in a path.
        module.fail_json(msg=f"{exc}: sglang_base_dir ({p['base_dir']!r}) must be a writable "
                             "directory with free space")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
