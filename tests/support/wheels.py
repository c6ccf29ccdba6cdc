"""Real sglang releases for tests: downloaded from PyPI once, unpacked into a cache.

SGLang's code is never committed here; tests read the published wheels, unpacked as a venv's
site-packages (`<cache>/venvs/<version>/lib/python3.11/site-packages`), which is the layout
`sglang_facts` reads on a host.
"""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(os.environ.get("SGLANG_DEPLOY_CACHE", Path.home() / ".cache" / "sglang-deploy"))


def wheel(version):
    wheels = CACHE / "wheels"
    found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q",
             "--no-deps", "--only-binary=:all:", "--python-version", "3.11",
             "-d", str(wheels), f"sglang=={version}"],
            check=True,
        )
        found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    return found[0]


def venv_with(version):
    """A directory laid out like a venv holding only the unpacked sglang `version`."""
    root = CACHE / "venvs" / version
    site = root / "lib" / "python3.11" / "site-packages"
    done = root / ".unpacked"
    if not done.exists():
        site.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel(version)) as archive:
            archive.extractall(site)
        done.touch()
    return root


# The light packages `sglang.launch_server --help` imports besides torch and triton.
PARSER_DEPS = ["numpy", "orjson", "psutil", "pybase64", "requests", "packaging", "pillow",
               "starlette", "fastapi", "uvicorn", "msgspec", "pydantic", "pyzmq", "tqdm",
               "IPython", "aiohttp", "huggingface_hub"]
TORCH = os.environ.get("SGLANG_DEPLOY_TORCH", "torch==2.13.0")


def cpu_venv(version):
    """A real venv where `python -m sglang.launch_server --help` runs on the CPU (~2.3 GB).

    torch comes as a CPU build (on this workplace a local wheel; elsewhere set PIP_INDEX_URL
    or PIP_EXTRA_INDEX_URL to PyTorch's CPU index); sglang itself with --no-deps.
    """
    root = CACHE / f"cpu-venv-{version}"
    done = root / ".complete"
    if done.exists():
        return root
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
    pip = [str(root / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q",
           "install"]
    subprocess.run(pip + [TORCH, "triton", *PARSER_DEPS], check=True)
    subprocess.run(pip + ["--no-deps", str(wheel(version))], check=True)
    done.touch()
    return root
