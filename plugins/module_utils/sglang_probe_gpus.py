"""Stand-ins for the GPUs and their driver, so the probe (sglang_probe) never touches a GPU,
also beside a serving server on a GPU host.

Part of the program `sglang_resolve` runs in the ml-env's own Python (standard library only):

- torch's device queries (`is_available`, `device_count`, `get_device_capability`,
  `get_device_name`, `get_device_properties`, `mem_get_info`, `current_device`) are answered
  from a description of the GPUs; an `nvidia-smi` placed first on PATH answers `--query-gpu`
  from the same description (the probe empties `CUDA_VISIBLE_DEVICES`);
- where the CUDA driver (`libcuda.so.1`) is absent, a package whose import fails for want of
  it is replaced by an inert module, and the report names each one.
"""

import ctypes
import importlib.util
import json
import os
import re
import sys
import types

# Errors that mean "the NVIDIA driver is not on this host", seen in imports of compiled
# CUDA packages (sgl_kernel, ...).
DRIVER_MISSING = re.compile(r"libcuda\.so|libnvidia-ml\.so|CUDA driver|no CUDA-capable device|"
                            r"found no NVIDIA driver|cudaErrorInsufficientDriver", re.I)
MiB = 1 << 20


# ---- the GPUs, as described --------------------------------------------------------------
class Gpus:
    """The description: {count, name, memory_mib, compute_capability "8.6", sm_count}."""

    def __init__(self, desc):
        self.count = int(desc.get("count") or 0)
        self.name = str(desc.get("name") or "NVIDIA GPU")
        self.memory_mib = int(desc.get("memory_mib") or 0)
        major, _unused, minor = str(desc.get("compute_capability") or "8.0").partition(".")
        self.capability = (int(major), int(minor or 0))
        self.sm_count = int(desc.get("sm_count") or 0)

    def properties(self):
        return types.SimpleNamespace(
            name=self.name, total_memory=self.memory_mib * MiB, major=self.capability[0],
            minor=self.capability[1], multi_processor_count=self.sm_count,
            is_integrated=False, is_multi_gpu_board=False, uuid="described",
            L2_cache_size=0, gcnArchName="", warp_size=32)

    def smi_rows(self):
        """What `nvidia-smi --query-gpu=<field>,...` would print, per GPU and field."""
        return [{"index": str(i), "name": self.name, "memory.total": str(self.memory_mib),
                 "memory.used": "0", "memory.free": str(self.memory_mib),
                 "compute_cap": "%d.%d" % self.capability,
                 "pci.bus_id": "00000000:%02X:00.0" % (i + 1)} for i in range(self.count)]


FAKE_SMI = r'''#!%(python)s
# nvidia-smi answering --query-gpu from a description (sglang_resolve; never a real GPU).
import json, sys
rows = json.loads(%(rows)r)
asked = [a.split("=", 1)[1].split(",") for a in sys.argv[1:] if a.startswith("--query-gpu=")]
if not asked or (rows and set(asked[0]) - set(rows[0])):
    sys.stderr.write("described GPUs answer --query-gpu=%%s only\n" %% ",".join(rows[0] if rows else []))
    sys.exit(1)
for row in rows:
    print(", ".join(row[f] for f in asked[0]))
'''


def install_fake_nvidia_smi(gpus, workdir):
    """An nvidia-smi first on PATH that answers from the description (SGLang runs it)."""
    bindir = os.path.join(workdir, "bin")
    os.makedirs(bindir, exist_ok=True)
    path = os.path.join(bindir, "nvidia-smi")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(FAKE_SMI % {"python": sys.executable, "rows": json.dumps(gpus.smi_rows())})
    os.chmod(path, 0o755)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


def describe_torch(torch, gpus):
    """Answer torch.cuda's device queries from the description; nothing reaches a driver."""

    def checked(device=None):
        index = getattr(device, "index", device)
        if isinstance(index, str):
            index = index.rsplit(":", 1)[-1] if ":" in index else 0
        if not 0 <= int(index or 0) < max(gpus.count, 1):
            raise AssertionError("Invalid device id (described GPUs: %d)" % gpus.count)

    answers = {
        "is_available": lambda: gpus.count > 0,
        "device_count": lambda: gpus.count,
        "current_device": lambda: 0,
        "get_device_capability": lambda device=None: checked(device) or gpus.capability,
        "get_device_name": lambda device=None: checked(device) or gpus.name,
        "get_device_properties": lambda device=None: checked(device) or gpus.properties(),
        "mem_get_info": lambda device=None: (gpus.memory_mib * MiB, gpus.memory_mib * MiB),
        "is_bf16_supported": lambda *a, **k: gpus.capability >= (8, 0),
    }
    for name, answer in answers.items():
        setattr(torch.cuda, name, answer)
    if hasattr(getattr(torch, "_C", None), "_cuda_getDeviceCount"):
        torch._C._cuda_getDeviceCount = answers["device_count"]


# ---- inert stand-ins for packages that need the driver ------------------------------------
class Inert:
    """Callable, indexable, attribute-rich nothing: what an absent CUDA library offers."""

    def __init__(self, name):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Inert(f"{self._name}.{name}")

    def __call__(self, *args, **kwargs):
        return Inert(f"{self._name}()")

    def __getitem__(self, key):
        return Inert(f"{self._name}[]")

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __repr__(self):
        return f"<inert {self._name}>"

    def __mro_entries__(self, bases):
        return (object,)


class DriverlessFinder:
    """Import hook: a top-level package whose import fails for want of the NVIDIA driver is
    replaced by an inert module (only installed where libcuda.so.1 cannot be loaded)."""

    def __init__(self):
        self.stubbed = {}

    def find_spec(self, name, path=None, target=None):
        top = name.split(".", 1)[0]
        if top in self.stubbed:
            return importlib.util.spec_from_loader(name, InertLoader(self), is_package=True)
        if "." in name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = GuardedLoader(spec.loader, self)
                return spec
        return None


class InertLoader:
    def __init__(self, finder):
        self.finder = finder

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        make_inert(module)


class GuardedLoader:
    """The real loader (resource readers and all), whose exec_module stubs on a missing driver."""

    def __init__(self, loader, finder):
        self.loader, self.finder = loader, finder

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        try:
            self.loader.exec_module(module)
        except Exception as exc:  # an import that needs the driver, and only that, is stubbed
            text = f"{type(exc).__name__}: {exc}"
            cause = exc.__cause__ or exc.__context__
            if cause is not None:
                text += f" (from {type(cause).__name__}: {cause})"
            if not DRIVER_MISSING.search(text):
                raise
            name = module.__name__
            for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                if loaded != name:
                    del sys.modules[loaded]
            self.finder.stubbed[name] = " ".join(text.split())[:300]
            make_inert(module)


def make_inert(module):
    name = module.__name__
    module.__file__ = f"<inert {name}: needs the NVIDIA driver>"
    module.__path__ = []
    module.__getattr__ = lambda attr: Inert(f"{name}.{attr}")
    module.__all__ = []


def driver_present():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False
