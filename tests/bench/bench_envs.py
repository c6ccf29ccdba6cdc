"""What a second env costs: the full sglang set, then the same set and one more package.

Builds both envs with the role's own code (`sglang_env`: uv, files linked from its cache on the
envs' filesystem), offline from the full wheelhouse (`make wheelhouse-full`), then prints the
disk each takes and what the second adds, measured by `du` (GNU du counts a file hardlinked
into both trees once when given both), and each build's time.

    python tests/bench/bench_envs.py [--wheelhouse DIR] [--extra uv==0.13.9] [--keep]
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from support import load_module  # noqa: E402

CACHE = Path(os.environ.get("SGLANG_DEPLOY_CACHE", Path.home() / ".cache" / "sglang-deploy"))


def du(*paths):
    """Bytes on disk of the trees together (du -s --block-size=1: a hardlink counted once)."""
    out = subprocess.run(["du", "-s", "-c", "--block-size=1", *map(str, paths)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def main():
    found = sorted(p for p in glob.glob(str(CACHE / "wheelhouse-full" / "sglang-*")) if os.path.isdir(p))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheelhouse", default=found[-1] if found else None)
    parser.add_argument("--version", default="0.5.23")
    parser.add_argument("--extra", default="uv==0.13.9")
    parser.add_argument("--base", default=None, help="a base dir (default: a temp dir in /var/tmp)")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if not args.wheelhouse:
        sys.exit("no full wheelhouse: run `make wheelhouse-full` first")
    envmod = load_module("sglang_env")
    base = Path(args.base or tempfile.mkdtemp(prefix="bench-envs-", dir="/var/tmp"))
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    params = {"base_dir": str(base), "python": "python3.11" if shutil.which("python3.11") else sys.executable,
              "packages": None, "env": None, "no_deps": False, "installer": "uv", "uv": uv,
              "rebuild": False, "timeout": 3600,
              "options": ["--no-index", "--find-links", args.wheelhouse, "--offline"]}
    try:
        start = time.monotonic()
        one = envmod.present(dict(params, requirements=[f"sglang=={args.version}"]))
        first_s = time.monotonic() - start
        start = time.monotonic()
        two = envmod.present(dict(params, requirements=[f"sglang=={args.version}", args.extra]))
        second_s = time.monotonic() - start
        cache = base / "envs" / ".uv-cache"
        alone, both = du(one["path"]), du(one["path"], two["path"])
        print(f"env 1: sglang=={args.version}, {len(one['packages'])} packages, built in "
              f"{first_s:.1f} s, {alone / 1e9:.2f} GB on disk")
        print(f"env 2: the same set + {args.extra}, {len(two['packages'])} packages, built in "
              f"{second_s:.1f} s")
        print(f"both envs, a hardlinked file counted once: {both / 1e9:.2f} GB; env 2 adds "
              f"{(both - alone) / 1e6:.1f} MB = {100 * (both - alone) / alone:.2f} % of env 1")
        print(f"(uv's cache, the files both link to, also on this filesystem: "
              f"{du(cache) / 1e9:.2f} GB; envs + cache together: "
              f"{du(one['path'], two['path'], cache) / 1e9:.2f} GB)")
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
