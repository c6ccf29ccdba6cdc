"""Real sglang releases for tests: downloaded from PyPI once, unpacked into a cache.

SGLang's code is never committed here; tests read the published wheels, unpacked as a venv's
site-packages (`<cache>/venvs/<version>/lib/python3.11/site-packages`), which is the layout
`sglang_facts` reads on a host. A test that calls these downloads on its first run: it is
marked `@pytest.mark.network` (`make check` leaves it out; tests/conftest.py gives pip no index
for a test without the mark).
"""

import contextlib
import fcntl
import os
import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(os.environ.get("SGLANG_DEPLOY_CACHE", Path.home() / ".cache" / "sglang-deploy"))


@contextlib.contextmanager
def _locked():
    """One process at a time fills the cache (pytest -n runs tests in several)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".wheels.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def wheel(version):
    wheels = CACHE / "wheels"
    with _locked():
        found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
        if not found:
            wheels.mkdir(parents=True, exist_ok=True)
            download = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q",
                 "--no-deps", "--only-binary=:all:", "--python-version", "3.11",
                 "-d", str(wheels), f"sglang=={version}"],
                check=False,
            )
            if download.returncode:
                raise RuntimeError(f"could not download sglang=={version} into {wheels}; a test "
                                   "that downloads is marked @pytest.mark.network")
            found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    return found[0]


def venv_with(version):
    """A directory laid out like a venv holding only the unpacked sglang `version`."""
    root = CACHE / "venvs" / version
    site = root / "lib" / "python3.11" / "site-packages"
    done = root / ".unpacked"
    if not done.exists():
        archive_path = wheel(version)
        with _locked():
            if not done.exists():
                site.mkdir(parents=True, exist_ok=True)
                with zipfile.ZipFile(archive_path) as archive:
                    archive.extractall(site)
                done.touch()
    return root


def full_venv(version):
    """A venv with the full `sglang==version` and all its dependencies (scripts/build-sglang-venv.sh:
    uv, cached outside the clone, seconds once uv's cache holds the release)."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "build-sglang-venv.sh"
    out = subprocess.run(["bash", str(script), version], check=True, capture_output=True,
                         text=True, env={**os.environ, "SGLANG_DEPLOY_CACHE": str(CACHE)})
    return Path(out.stdout.strip().splitlines()[-1])
