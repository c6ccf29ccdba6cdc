#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""What a GPU host needs before SGLang can start there, read before anything changes."""

DOCUMENTATION = r"""
module: sglang_host_prereqs
short_description: Read a GPU host's prerequisites for SGLang and judge them
description:
  - Read-only (runs in check mode, changes nothing). Reads the NVIDIA driver version
    (nvidia-smi), the CUDA version the ml-env's torch is built for (the installed
    C(torch/version.py), else the torch wheel in the wheelhouse the install will use),
    whether nvidia-uvm is loaded and nvidia-modprobe present, a C compiler and the Python
    headers (Triton and FlashInfer compile on first use), nvcc, systemd's version and free
    disk space.
  - Reads, in the same call, which pinned requirements (O(requirements)) the ml-env lacks, from
    package metadata (no pip run), as M(sglang.deploy.sglang_pip_check) does; a deploy with
    nothing to change learns both in one round trip.
  - With O(envs_base_dir), the ml-env read is the immutable env these requirements define under
    C(<base_dir>/envs/) (M(sglang.deploy.sglang_env)); its id is computed here, with the
    Python, the install options and C(no_deps), and returned in RV(env); an env not yet built
    (or cut short) lacks every requirement. O(venv) is then the link to the serving env; a
    real directory there is a failure (it is never deleted nor taken over).
  - Judges them. GPU checks apply where a driver is found; a host without one only gets a
    warning (SGLang will stop at CUDA initialisation there). Each failure says what to do.
extends_documentation_fragment:
  - sglang.deploy.sglang.venv
  - sglang.deploy.sglang.nvidia_smi
options:
  python:
    description: The interpreter that makes the ml-env (its headers).
    type: str
    default: python3
  wheelhouse:
    description: Wheelhouse directory on the host, if any.
    type: str
    default: ''
  cuda_min_driver:
    description: CUDA version -> minimum Linux driver.
    type: dict
    default: {}
  hardening:
    description: The unit's sandbox settings (sglang_service_hardening).
    type: dict
    default: {}
  requirements:
    description:
      - Pinned requirements (C(sglang==0.5.23)) to look up in the ml-env; returned in
        RV(packages). Empty reads nothing.
    type: list
    elements: str
    default: []
  envs_base_dir:
    description: Read the immutable env of O(requirements) under C(<envs_base_dir>/envs/)
      instead of O(venv), and the release that serves (C(serving)), the deployment's base
      directory.
    type: path
  install_options:
    description: The install options (index, wheelhouse), part of the env's id.
    type: list
    elements: str
    default: []
  no_deps:
    description: Whether the SGLang pin is installed with C(--no-deps), part of the env's id.
    type: bool
    default: false
  disk:
    description: Free space needed.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: A directory on the filesystem to check.
        type: path
        required: true
      gb:
        description: Gigabytes that must be free there.
        type: float
        default: 0
      what:
        description: What needs the space (for the message).
        type: str
        default: this deploy
      unless_installed:
        description:
          - A requirement of O(requirements). The space is needed only when the ml-env lacks
            it (an install of the pinned SGLang rewrites the ml-env); when it is installed,
            C(gb) counts as 0.
        type: str
        default: ''
notes:
  - Not a builtin because of fewer round trips; the driver, torch's CUDA, nvidia-uvm, the
    toolchain, nvcc, systemd, free disk and the missing requirements are read and judged in
    one call instead of a task each.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Refuse a host that cannot run the pinned SGLang
  sglang.deploy.sglang_host_prereqs:
    venv: /opt/ml-env
    cuda_min_driver: {"13.0": "580.65.06", "12.8": "570.26"}
    requirements: [sglang==0.5.23]
    disk:
      - {path: /opt, gb: 20, what: the ml-env, unless_installed: sglang==0.5.23}
  register: prereqs
"""

RETURN = r"""
facts:
  description: What was read.
  type: dict
  returned: always
  contains:
    driver:
      description: NVIDIA driver version, or null.
      type: str
      returned: always
    driver_needed:
      description: The oldest driver torch's CUDA needs (O(cuda_min_driver)), or null.
      type: str
      returned: always
    torch_cuda:
      description: CUDA version the install's torch is built for, or null.
      type: str
      returned: always
    disk:
      description: 'Free space per path asked: [{path, gb, what, free_gb}].'
      type: list
      returned: always
    systemd:
      description: systemd version.
      type: int
      returned: always
    nvidia_modprobe:
      description: Path of nvidia-modprobe, or null.
      type: str
      returned: always
    nvidia_uvm_loaded:
      description: Whether the nvidia_uvm module is loaded.
      type: bool
      returned: always
    cc:
      description: C compiler found, or null.
      type: str
      returned: always
    python_h:
      description: Whether the interpreter's headers are installed.
      type: bool
      returned: always
    nvcc:
      description: nvcc found, or null.
      type: str
      returned: always
failures:
  description: Refusals, each with what to do.
  type: list
  returned: always
warnings_:
  description: What may fail later, with what to do.
  type: list
  returned: always
exec_start_pre:
  description: Lines the unit needs (nvidia-modprobe for nvidia-uvm).
  type: list
  returned: always
env:
  description: "The env of O(requirements) when O(envs_base_dir) is given: {id, path, complete,
    intact, changed, old_form}; C(intact) false (C(changed) names the packages) when something
    was installed, removed or edited in a built env since it was built (true for one not built);
    C(old_form) true when an older release of this project recorded its tree, in a form that
    misses a same-size edit with its mtime put back (the env step records it again once)."
  type: dict
  returned: when envs_base_dir is given
serving:
  description: "The release the C(current) link of O(envs_base_dir) names: {release, manifest}
    (null when there is none or its manifest is unreadable; C(error) says why a link is
    refused). A re-run renders what it compares (the observability pack) from it before its one
    read of what would change."
  type: dict
  returned: when envs_base_dir is given
packages:
  description: What the ml-env has of O(requirements).
  type: dict
  returned: always
  contains:
    venv_exists:
      description: Whether the ml-env has a Python.
      type: bool
      returned: always
    installed:
      description: Installed version per requirement name (null when absent).
      type: dict
      returned: always
    missing:
      description: Requirements not satisfied, in the order given.
      type: list
      returned: always
"""

import glob
import os
import re
import shutil
import subprocess
import zipfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_envs import (
    EnvError, check, env_id, link_target, old_form, python_identity, spec_of)
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_pip import check as check_packages
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_releases import serving
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_systemd import systemd_version
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_versions import numeric, older

CUDA_LINE = re.compile(r"^cuda\s*(?::\s*[^=]+)?=\s*['\"]([0-9.]+)['\"]", re.M)
# Hardening settings that older systemd mishandles on a GPU host: (setting, first good
# version, why).
MISHANDLED = [
    ("ProtectClock", 252, "adds a device allow-list that hides /dev/nvidia* (systemd#18142)"),
]
DRIVER_VERSION = re.compile(r"[0-9]{1,5}(\.[0-9]{1,5}){1,3}")
MODPROBE_PATHS = ("/usr/bin/nvidia-modprobe", "/usr/sbin/nvidia-modprobe")


def torch_cuda_installed(venv):
    """CUDA version of the torch installed in `venv` (its torch/version.py), or None."""
    for path in glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "torch",
                                       "version.py")):
        with open(path, encoding="utf-8") as handle:
            found = CUDA_LINE.search(handle.read())
        if found:
            return found.group(1)
    return None


def torch_cuda_wheel(wheelhouse):
    """CUDA version of the newest torch wheel in `wheelhouse`: (version, wheel) or (None, None)."""
    wheels = glob.glob(os.path.join(wheelhouse, "torch-*.whl")) if wheelhouse else []
    for wheel in sorted(wheels, key=lambda w: numeric(os.path.basename(w).split("-")[1].split("+")[0]) or (),
                        reverse=True):
        try:
            with zipfile.ZipFile(wheel) as archive:
                found = CUDA_LINE.search(archive.read("torch/version.py").decode())
        except (OSError, KeyError, zipfile.BadZipFile):
            continue
        return (found.group(1) if found else None), os.path.basename(wheel)
    return None, None


def min_driver(cuda, table):
    """The minimum driver for `cuda` (exact major.minor, else the nearest lower entry)."""
    if not cuda:
        return None
    want = (numeric(cuda) or (0,))[:2]
    known = sorted(((numeric(str(k))[:2], v) for k, v in table.items() if numeric(str(k))),
                   reverse=True)
    for version, driver in known:
        if version <= want and version[0] == want[0]:
            return str(driver)
    return None


def driver_version(output):
    """The driver version nvidia-smi printed first (550.54.15), or None when it printed
    nothing a version can be read from (bytes that are not UTF-8, `inf`, [N/A])."""
    first = (output or "").strip().splitlines()[:1]
    found = DRIVER_VERSION.fullmatch(first[0].strip()) if first else None
    return found.group(0) if found else None


def _run(argv):
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _free_gb(path):
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    stat = os.statvfs(path)
    return round(stat.f_bavail * stat.f_frsize / 1e9, 1)


def disk_needs(disk, missing):
    """The disk entries with `gb` set to 0 where the requirement they depend on is installed."""
    return [dict(d, gb=d["gb"] if not d.get("unless_installed") or d["unless_installed"] in missing
                 else 0) for d in disk]


def _torch_cuda(p, missing):
    """(CUDA version torch is built for, where that was read)."""
    if not missing:
        # Nothing to install: the torch installed is the one that runs (the wheelhouse's, a
        # large zip, is not read on every re-run).
        installed = torch_cuda_installed(p["venv"])
        if installed:
            return installed, "installed torch"
    wheel_cuda, wheel = torch_cuda_wheel(p["wheelhouse"])
    if wheel_cuda:
        # The wheel is what the install puts in place: it decides.
        return wheel_cuda, wheel
    return torch_cuda_installed(p["venv"]), "installed torch"


def _kernel_modules():
    try:
        with open("/proc/modules", encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


def _nvcc():
    found = [c for c in (os.path.join(os.environ.get("CUDA_HOME", "/nonexistent"), "bin", "nvcc"),
                         shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc")
             if c and os.path.exists(c)]
    return found[0] if found else None


def read_facts(p, missing=()):
    """What the host has; `missing`: the requirements the ml-env lacks (for `unless_installed`)."""
    driver = _run([p["nvidia_smi"], "--query-gpu=driver_version", "--format=csv,noheader"])
    cuda, source = _torch_cuda(p, missing)
    include = _run([p["python"], "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"])
    return {
        "driver": driver_version(driver),
        "driver_needed": min_driver(cuda, p["cuda_min_driver"]),
        "torch_cuda": cuda, "torch_cuda_source": source if cuda else None,
        "nvidia_uvm_loaded": "nvidia_uvm " in _kernel_modules() or os.path.exists("/dev/nvidia-uvm"),
        "nvidia_modprobe": next((m for m in MODPROBE_PATHS if os.path.exists(m)), None),
        "cc": shutil.which("cc") or shutil.which("gcc"),
        "python_h": bool(include) and os.path.exists(os.path.join(include.strip(), "Python.h")),
        "nvcc": _nvcc(),
        "systemd": systemd_version(),
        "disk": [dict(d, free_gb=_free_gb(d["path"]))
                 for d in disk_needs(p["disk"], missing)],
    }


def _disk_failures(disk):
    return [f"disk: {item['path']} has {item['free_gb']} GB free, {item['what']} needs "
            f"{item['gb']} GB: free space there or point the variable elsewhere"
            for item in disk if item["free_gb"] < float(item["gb"])]


def _systemd_failures(version, hardening):
    """Sandboxing settings this systemd mishandles (MISHANDLED) that the unit would set."""
    failures = []
    for setting, good, why in MISHANDLED:
        value = (hardening or {}).get(setting)
        if version and version < good and value not in (None, False, "no"):
            failures.append(
                f"systemd {version} < {good}: {setting}={value} {why}; set "
                f"sglang_service_hardening.{setting}: null on this host")
    return failures


def _driver_check(facts, cuda_min_driver):
    """(failures, warnings) of the driver against the CUDA torch is built for."""
    driver, cuda = facts["driver"], facts["torch_cuda"]
    need = min_driver(cuda, cuda_min_driver)
    if cuda and not need:
        return [], [f"torch is built for CUDA {cuda}, which sglang_cuda_min_driver does "
                    "not list: the driver version was not checked"]
    if need and older(driver, need):
        return [f"driver: NVIDIA driver {driver} is older than {need}, which CUDA {cuda} needs "
                f"(torch from {facts['torch_cuda_source']}): upgrade the driver to >= {need}, "
                "or pin an SGLang release whose torch is built for an older CUDA"], []
    return [], []


def _toolchain_failures(facts):
    if facts["cc"] and facts["python_h"]:
        return []
    missing = ", ".join(what for what, ok in (("cc", facts["cc"]), ("Python.h", facts["python_h"]))
                        if not ok)
    return ["toolchain: Triton and FlashInfer compile kernels on first use and need a C compiler "
            f"and the Python headers ({missing} missing): install build-essential and python3-dev"]


def judge(facts, cuda_min_driver, hardening):
    """(failures, warnings, exec_start_pre) for the facts read."""
    failures = _disk_failures(facts["disk"]) + _systemd_failures(facts["systemd"], hardening)
    warnings, pre = [], []
    if not facts["driver"]:
        warnings.append("no NVIDIA driver answers (nvidia-smi): SGLang will stop at CUDA "
                        "initialisation here; install the driver on a GPU host")
        return failures, warnings, pre
    driver_failures, warnings = _driver_check(facts, cuda_min_driver)
    failures += driver_failures
    if facts["nvidia_modprobe"]:
        # After a reboot nvidia-uvm may be missing; the sandboxed unit cannot load it.
        pre.append(f"+{facts['nvidia_modprobe']} -u -c=0")
    elif not facts["nvidia_uvm_loaded"]:
        failures.append("nvidia-uvm is not loaded and nvidia-modprobe is absent: the unit cannot "
                        "load it (CUDA unknown error); `modprobe nvidia-uvm` and add it to "
                        "/etc/modules-load.d/, or install nvidia-modprobe")
    failures += _toolchain_failures(facts)
    if not facts["nvcc"]:
        warnings.append("nvcc not found (CUDA_HOME, PATH, /usr/local/cuda): SGLang kernels "
                        "compiled at run time will fail unless the ml-env's nvidia-cuda-nvcc "
                        "provides it; install the CUDA toolkit or set CUDA_HOME in sglang_env")
    return failures, warnings, pre


def planned_env(p):
    """{id, path, complete, intact, changed, old_form} of the env the requirements define
    (O(envs_base_dir)), or None. A package installed into it by hand (or removed, or a file
    edited in place) makes it not intact: a re-run then takes the whole path, where the env step
    names it and refuses (or, with sglang_env_rebuild, builds it again)."""
    if not p["envs_base_dir"]:
        return None
    spec = spec_of(python_identity(p["python"]), p["requirements"], p["install_options"],
                   p["no_deps"])
    state = check(p["envs_base_dir"], env_id(spec))
    return dict({key: state[key] for key in ("id", "path", "complete", "changed")},
                intact=state["intact"] or not state["complete"],
                old_form=bool(state["complete"] and old_form(state["marker"])))


def link_failures(p):
    """With O(envs_base_dir), O(venv) is a link to the env: a real directory there is refused."""
    try:
        link_target(p["venv"])
    except EnvError as exc:
        return [f"ml-env: {exc}"]
    return []


def read_packages(p, env):
    """What the ml-env (or the planned env) has of the requirements."""
    if env and not env["complete"]:
        return {"venv_exists": False, "installed": {}, "missing": list(p["requirements"])}
    return check_packages(env["path"] if env else p["venv"], p["requirements"])


def main():
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "venv": {"type": "path", "required": True},
            "python": {"type": "str", "default": "python3"},
            "wheelhouse": {"type": "str", "default": ""},
            "cuda_min_driver": {"type": "dict", "default": {}},
            "hardening": {"type": "dict", "default": {}},
            "requirements": {"type": "list", "elements": "str", "default": []},
            "envs_base_dir": {"type": "path"},
            "install_options": {"type": "list", "elements": "str", "default": []},
            "no_deps": {"type": "bool", "default": False},
            "disk": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True},
                "gb": {"type": "float", "default": 0},
                "what": {"type": "str", "default": "this deploy"},
                "unless_installed": {"type": "str", "default": ""}}},
        },
        supports_check_mode=True,
    )
    p = module.params
    # A NUL in a path or a command would raise inside glob or exec, not be a clear error.
    nul = [name for name in ("nvidia_smi", "venv", "python", "wheelhouse", "envs_base_dir")
           if "\0" in (p[name] or "")] \
        + [f"disk.path {d['path']!r}" for d in p["disk"] if "\0" in d["path"]]
    if nul:
        module.fail_json(msg=f"{', '.join(nul)}: a path or command may not hold a NUL byte")
    unknown = [d["unless_installed"] for d in p["disk"]
               if d["unless_installed"] and d["unless_installed"] not in p["requirements"]]
    if unknown:
        module.fail_json(msg=f"disk: unless_installed {', '.join(unknown)} is not one of "
                             "requirements: add it there")
    try:
        env = planned_env(p)
        packages = read_packages(p, env)
    except (RuntimeError, EnvError) as exc:
        module.fail_json(msg=str(exc))
    facts = read_facts(dict(p, venv=env["path"]) if env else p, packages["missing"])
    failures, warnings, pre = judge(facts, module.params["cuda_min_driver"],
                                    module.params["hardening"])
    if env:
        failures += link_failures(p)
    module.exit_json(changed=False, facts=facts, failures=failures, warnings_=warnings,
                     exec_start_pre=pre, packages=packages,
                     **({"env": env, "serving": serving(p["envs_base_dir"])} if env else {}))


if __name__ == "__main__":
    main()
