#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""The whole package set of the ml-env: read it, or put a recorded one back exactly."""

DOCUMENTATION = r"""
module: sglang_venv_packages
short_description: Read or restore the full package set of a virtual environment
description:
  - C(state=read) lists every distribution the venv holds as C(name==version) lines, read
    from package metadata by the venv's own Python (no pip run); read-only, runs in check mode.
  - >-
    C(state=restore) makes the venv hold exactly C(packages): installs what is missing or at
    another version (C(--no-deps), since the set is complete), then uninstalls what the set does
    not hold. With pip or with uv (C(uv pip install/uninstall)), with the role's install
    options (index, wheelhouse, no-index). Nothing runs when the set already matches.
options:
  venv:
    description: Path of the virtual environment.
    type: path
    required: true
  state:
    description: read or restore.
    type: str
    choices:
    - read
    - restore
    default: read
  packages:
    description:
      - The set to restore (C(name==version) lines; C(#) comment lines skipped).
      - Every line must be a distribution name, C(==) and an exact version, nothing else (no
        pip option, path, URL, marker or extra); anything else is refused before pip runs.
    type: list
    elements: str
    default: []
  recorded:
    description:
      - The set is a release's record, so it must hold package lines, sglang among them (an
        empty or cut-short record would uninstall everything).
      - C(false) for a set read from this venv moments before (put back when preflight
        refuses a first install).
    type: bool
    default: true
  timeout:
    description: Seconds each installer command may take.
    type: int
    default: 3600
  installer:
    description: pip or uv.
    type: str
    choices:
    - pip
    - uv
    default: pip
  uv:
    description: Path of the uv binary (installer=uv).
    type: path
    default: uv
  options:
    description: Install options (C(--no-index --find-links DIR), an index).
    type: list
    elements: str
    default: []
notes:
  - Not a builtin because there is no equivalent; M(ansible.builtin.pip) installs a list but
    neither reads a venv's full package set nor removes what a set does not hold (a rollback
    restores the exact set), and does not drive uv.
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Read the ml-env's package set
  sglang.deploy.sglang_venv_packages:
    venv: /opt/ml-env
  register: before

- name: Put that set back
  sglang.deploy.sglang_venv_packages:
    venv: /opt/ml-env
    state: restore
    packages: "{{ before.packages }}"
"""

RETURN = r"""
venv_exists:
  description: Whether the venv has a Python.
  type: bool
  returned: always
packages:
  description: The set after this task, sorted C(name==version) lines.
  type: list
  returned: always
installed:
  description: Lines installed to match the set.
  type: list
  returned: restore
removed:
  description: Names uninstalled because the set does not hold them.
  type: list
  returned: restore
"""

import json
import os
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_packages import (
    PackageSetError, canonical, package_set)

PROBE = r"""
import json
import importlib.metadata as md
print(json.dumps(sorted({d.metadata["Name"]: d.version for d in md.distributions()
                         if d.metadata["Name"]}.items())))
"""


READ_TIMEOUT = 120


def parse(lines):
    """{canonical name: (line, version)} of what the venv says it holds; comments skipped.
    (A set to restore goes through sglang_packages.package_set instead.)"""
    out = {}
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise ValueError(f"not a pinned package line: {raw!r} (expected name==version)")
        out[canonical(name.strip())] = (f"{name.strip()}=={version.strip()}", version.strip())
    return out


def plan(current, target, recorded=False):
    """What to install and what to remove so that `current` becomes `target`."""
    have, want = parse(current), package_set(target, "the set to restore", recorded)
    install = [line for key, (line, version) in sorted(want.items())
               if key not in have or have[key][1] != version]
    remove = [have[key][0].split("==")[0] for key in sorted(have) if key not in want]
    return install, remove


def read(venv):
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        return False, []
    try:
        proc = subprocess.run([python, "-c", PROBE], capture_output=True, text=True,
                              errors="replace", check=False, timeout=READ_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{python} could not read its packages: {exc}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{python} could not read its packages: {proc.stderr.strip()[-500:]}")
    return True, [f"{name}=={version}" for name, version in json.loads(proc.stdout)]


def commands(venv, installer, uv, options, install, remove, requirements_file):
    """The installer's commands for a plan (the requirements file holds `install`)."""
    python = os.path.join(venv, "bin", "python")
    if installer == "uv":
        base = [uv, "pip"]
        target = ["--python", python]
        uninstall = [*base, "uninstall", *target]
    else:
        base = [python, "-m", "pip", "--disable-pip-version-check"]
        target = []
        uninstall = [*base, "uninstall", "-y"]
    out = []
    if install:
        out.append([*base, "install", *target, *options, "--no-deps", "-r", requirements_file])
    if remove:
        out.append([*uninstall, *remove])
    return out


def _run(argv, timeout):
    try:
        return subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{' '.join(argv[:4])} ... did not finish within {timeout} s") from None
    except OSError as exc:
        raise RuntimeError(f"{' '.join(argv[:4])} ... could not run: {exc}") from None


def restore(venv, packages, installer="pip", uv="uv", options=(), check_mode=False, run=None,
            recorded=True, timeout=3600):
    # The set is checked before anything else runs: a refused set changes nothing.
    package_set(packages, "the set to restore", recorded)
    run = run or (lambda argv: _run(argv, timeout))
    exists, current = read(venv)
    if not exists:
        raise RuntimeError(f"{venv} has no bin/python: create the ml-env before restoring into it")
    install, remove = plan(current, packages, recorded)
    result = {"venv_exists": True, "installed": install, "removed": remove,
              "changed": bool(install or remove), "packages": current}
    if check_mode or not result["changed"]:
        return result
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
        req.write("".join(line + "\n" for line in install))
    try:
        for argv in commands(venv, installer, uv, list(options), install, remove, req.name):
            proc = run(argv)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(argv[:4])} ... failed: "
                                   f"{(proc.stderr or proc.stdout).strip()[-1500:]}")
    finally:
        os.unlink(req.name)
    result["packages"] = read(venv)[1]
    left, extra = plan(result["packages"], packages, recorded)
    if left or extra:
        raise RuntimeError(f"the ml-env still differs from the recorded set: missing or other "
                           f"versions {left}, not in the set {extra}")
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["read", "restore"], "default": "read"},
            "packages": {"type": "list", "elements": "str", "default": []},
            "installer": {"type": "str", "choices": ["pip", "uv"], "default": "pip"},
            "uv": {"type": "path", "default": "uv"},
            "options": {"type": "list", "elements": "str", "default": []},
            "recorded": {"type": "bool", "default": True},
            "timeout": {"type": "int", "default": 3600},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p["state"] == "read":
            exists, packages = read(p["venv"])
            module.exit_json(changed=False, venv_exists=exists, packages=packages)
        result = restore(p["venv"], p["packages"], p["installer"], p["uv"], p["options"],
                         module.check_mode, recorded=p["recorded"], timeout=p["timeout"])
    except PackageSetError as exc:
        module.fail_json(msg=f"{exc}; nothing was installed or removed")
    except (RuntimeError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
