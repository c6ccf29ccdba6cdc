#!/usr/bin/python
# Copyright: sglang-deploy contributors
# SPDX-License-Identifier: Apache-2.0
"""Facts a preflight needs from a GPU host, read without importing sglang."""

DOCUMENTATION = r"""
module: sglang_facts
short_description: Read SGLang, model, GPU and NCCL facts from a host, without importing sglang
description:
  - C(sglang_version) from the installed distribution's metadata.
  - C(piecewise_blacklist) parsed with C(ast) from the installed sources
    (C(sglang/srt/configs/model_config.py)), with every place outside its own definition that
    reads it (C(consulted_in)), and the other rules beside the reading one.
  - The run-time rules that turn custom all-reduce off after the resolution
    (C(custom_all_reduce_rules)), each with the file and line of the installed source.
  - The model's C(architectures) and C(model_type) from its C(config.json) (a local directory
    or a Hugging Face hub cache snapshot), and the checkpoint's weight bytes.
  - GPUs (C(nvidia-smi --query-gpu)), topology (C(nvidia-smi topo -m)) and peer access
    (C(nvidia-smi topo -p2p r)) as raw text for the controller to parse, or an explicit
    no-GPU fact.
  - The NCCL_*, SGLANG_*, CUDA_* environment the release will run with and C(/etc/nccl.conf).
  - Read-only, standard library only; well under a second on a full install.
extends_documentation_fragment:
  - sglang.deploy.sglang.venv
  - sglang.deploy.sglang.nvidia_smi
options:
  model_path:
    description: Local checkpoint directory or hub id.
    type: str
    default: ''
  model_revision:
    description: Hub revision for a hub id (default C(main)).
    type: str
    default: ''
  env:
    description: Environment the release runs with (its env file).
    type: dict
    default: {}
notes:
  - Not a builtin because of fewer round trips and no equivalent; one call reads what would
    take a dozen tasks (stat, slurp of config.json, three nvidia-smi runs), and no builtin reads the installed SGLang's sources with
    C(ast).
author:
  - sglang-deploy maintainers (@sglang-deploy)
"""

EXAMPLES = r"""
- name: Read what SGLang will see on this host
  sglang.deploy.sglang_facts:
    venv: /opt/ml-env
    model_path: /srv/models/Qwen3.6-27B
  register: host_facts
"""

RETURN = r"""
sglang_version:
  description: Installed sglang version or null.
  type: str
  returned: always
custom_all_reduce_rules:
  description: >-
    Where the installed SGLang decides at run time whether custom all-reduce is used (the
    function C(can_use_custom_all_reduce_with_nvlink)): C(gate) (that function), and the rules
    found in it, each C({where, code}): C(single_gpu), C(world_sizes) (with C(sizes)),
    C(pcie_only) (more than two GPUs without NVLink), C(p2p) (the peer-access test) and
    C(p2p_check_skipped) (the call that trusts peer access without C(--enable-p2p-check)).
    Empty when no such function is found (nothing is known).
  type: dict
  returned: always
piecewise_blacklist:
  description: archs, defined_in, consulted, consulted_in, consulting_code, sibling_rules.
  type: dict
  returned: always
  contains:
    archs:
      description: Architectures SGLang keeps off piecewise CUDA graphs.
      type: list
      returned: always
    defined_in:
      description: File:line where the list is defined.
      type: str
      returned: always
    consulted:
      description: Whether SGLang consults the list.
      type: bool
      returned: always
    consulted_in:
      description: File:line where it is consulted.
      type: str
      returned: always
    consulting_code:
      description: The consulting source line.
      type: str
      returned: always
    sibling_rules:
      description: Other rules next to it.
      type: list
      returned: always
model:
  description: path, config_path, source (local, hub-cache or null), architectures, model_type, weight_bytes.
  type: dict
  returned: always
  contains:
    path:
      description: Directory of the checkpoint, or the hub id.
      type: str
      returned: always
    config_path:
      description: Its config.json, or null.
      type: str
      returned: always
    source:
      description: C(local), C(hub-cache) or null.
      type: str
      returned: always
    architectures:
      description: C(architectures) of config.json.
      type: list
      returned: always
    model_type:
      description: C(model_type) of config.json.
      type: str
      returned: always
    weight_bytes:
      description: Size of the weight files.
      type: int
      returned: always
gpus:
  description: present, count, devices, topology_text, p2p_text, reason.
  type: dict
  returned: always
  contains:
    present:
      description: Whether nvidia-smi answered with devices.
      type: bool
      returned: always
    count:
      description: Number of GPUs.
      type: int
      returned: always
    devices:
      description: One entry per GPU (index, name, memory_mib, pci_bus_id...).
      type: list
      returned: always
    topology_text:
      description: C(nvidia-smi topo -m) output.
      type: str
      returned: always
    p2p_text:
      description: C(nvidia-smi topo -p2p r) output.
      type: str
      returned: always
    reason:
      description: Why no GPU was read, if none.
      type: str
      returned: always
env:
  description: NCCL_*/SGLANG_*/CUDA_* of the release.
  type: dict
  returned: always
nccl_conf:
  description: Settings read from /etc/nccl.conf.
  type: dict
  returned: always
elapsed_s:
  description: Time taken.
  type: float
  returned: always
"""

import json
import os
import pathlib
import shutil
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_gpus import (
    CSV, GPUS_QUERY, memory_mib, run_tool, smi_rows)
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_read import read_text
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_source import (
    blacklist_facts, custom_all_reduce_rules, find_package)

ENV_PREFIXES = ("NCCL_", "SGLANG_", "CUDA_", "TORCH_NCCL_")
# A checkpoint's config.json is kilobytes (a few hundred for the largest); a hub ref is a sha.
CONFIG_CAP = 8 << 20
REF_CAP = 4096


def hub_cache_dirs(env=None):
    env = os.environ if env is None else env
    dirs = []
    if env.get("HF_HUB_CACHE"):
        dirs.append(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        dirs.append(os.path.join(env["HF_HOME"], "hub"))
    dirs.append(os.path.join(str(pathlib.Path.home()), ".cache", "huggingface", "hub"))
    return dirs


def resolve_model_dir(model_path, revision="", env=None):
    """(directory, source) of a checkpoint: a local dir, or a hub id's cached snapshot."""
    if not model_path:
        return None, None
    if os.path.isdir(model_path):
        return model_path, "local"
    if model_path.count("/") != 1:
        return None, None
    repo = "models--" + model_path.replace("/", "--")
    for cache in hub_cache_dirs(env):
        base = os.path.join(cache, repo)
        ref = revision or "main"
        snapshot = ref
        ref_file = os.path.join(base, "refs", ref)
        if os.path.exists(ref_file):
            snapshot = read_text(ref_file, REF_CAP).strip()
            if not snapshot or "/" in snapshot or snapshot.startswith("."):
                continue
        candidate = os.path.join(base, "snapshots", snapshot)
        if os.path.isdir(candidate):
            return candidate, "hub-cache"
    return None, None


def model_facts(model_path, revision="", env=None):
    out = {"path": model_path, "config_path": None, "source": None, "architectures": [],
           "model_type": None, "weight_bytes": None}
    directory, source = resolve_model_dir(model_path, revision, env)
    if not directory:
        return out
    out["source"] = source
    config = os.path.join(directory, "config.json")
    if os.path.exists(config):
        # A regular file of sane size only: a FIFO would block for ever, a link to /dev/zero
        # would be read until memory runs out (sglang_read.read_text refuses both).
        try:
            data = json.loads(read_text(config, CONFIG_CAP))
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"{config} is not JSON: {str(exc)[:200]}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{config} holds a JSON {type(data).__name__}, not the object a "
                             "checkpoint's config.json is")
        # As written: the verdict refuses anything but a list of names (a string would
        # otherwise read as one architecture per character).
        archs = data.get("architectures")
        out.update(config_path=config, architectures=[] if archs is None else archs,
                   model_type=data.get("model_type"))
    weights = [os.path.join(directory, n) for n in os.listdir(directory)
               if n.endswith((".safetensors", ".bin"))]
    if weights:
        # Hub snapshots hold symlinks into blobs/: count what they point at.
        out["weight_bytes"] = sum(os.stat(w).st_size for w in weights)
    return out


def gpu_facts(nvidia_smi="nvidia-smi"):
    path = shutil.which(nvidia_smi)
    if not path:
        return {"present": False, "count": 0, "devices": [], "topology_text": None,
                "p2p_text": None, "reason": f"{nvidia_smi} not found: no NVIDIA GPU driver on this host"}
    rc, out, err = run_tool([path, GPUS_QUERY, CSV])
    if rc != 0:
        return {"present": False, "count": 0, "devices": [], "topology_text": None,
                "p2p_text": None, "reason": f"nvidia-smi failed: {err or out}"}
    # Numbers that make no sense (inf, a 400-digit index) are unknown (None), not a traceback.
    devices = [{"index": int(parts[0]), "name": parts[1][:200], "memory_mib": memory_mib(parts[2]),
                "pci_bus_id": parts[3][:64]} for parts in smi_rows(out, 4)]
    _unused, topo, _unused = run_tool([path, "topo", "-m"])
    _unused, p2p, _unused = run_tool([path, "topo", "-p2p", "r"])
    return {"present": bool(devices), "count": len(devices), "devices": devices,
            "topology_text": topo or None, "p2p_text": p2p or None, "reason": None}


def read_nccl_conf(path="/etc/nccl.conf"):
    conf = {}
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if line and not line.startswith("#") and "=" in line:
                    key, value = line.split("=", 1)
                    conf[key.strip()] = value.strip()
    except OSError:
        pass
    return conf


def collect(params):
    start = time.monotonic()
    site, version = find_package(params["venv"])
    blacklist = blacklist_facts(site) if site else {
        "archs": [], "defined_in": None, "consulted": False, "consulted_in": [],
        "consulting_code": [], "sibling_rules": []}
    env = {k: str(v) for k, v in (params.get("env") or {}).items() if k.startswith(ENV_PREFIXES)}
    return {
        "sglang_version": version,
        "sglang_site_packages": site,
        "piecewise_blacklist": blacklist,
        "custom_all_reduce_rules": custom_all_reduce_rules(site) if site else {},
        # The release's HF_HOME / HF_HUB_CACHE (sglang_env) name the hub cache the unit reads.
        "model": model_facts(params.get("model_path") or "", params.get("model_revision") or "",
                             dict(os.environ, **{str(k): str(v) for k, v in
                                                 (params.get("env") or {}).items()})),
        "gpus": gpu_facts(params.get("nvidia_smi") or "nvidia-smi"),
        "env": env,
        "nccl_conf": read_nccl_conf(),
        "elapsed_s": round(time.monotonic() - start, 3),
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "model_path": {"type": "str", "default": ""},
            "model_revision": {"type": "str", "default": ""},
            "env": {"type": "dict", "default": {}},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
        },
        supports_check_mode=True,
    )
    try:
        facts = collect(module.params)
    except (OSError, SyntaxError, ValueError) as exc:
        module.fail_json(msg=f"could not read facts: {exc}")
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
