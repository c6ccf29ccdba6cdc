"""Envs that share no edit, the check before a switch, and the disk a cleanup gives back.

With the role's own code (`sglang_env`, `sglang_release`), offline from the full wheelhouse
(`make wheelhouse-full`), in a base dir of its own:

1. deploys the full sglang set as a release (its env, uv's cache) and measures the base dir
   (`du`, a hardlinked file counted once): what one set costs;
2. deploys two more sets (the same plus one package each), each as a release on its own env;
3. edits one file of the first env in place (as a hot-fix would: the same inode) and checks
   that its copies in the other envs and in uv's cache did not change, that the other envs'
   check still says intact, and that the switch to the edited one is refused by name;
4. times the check a switch makes of an env (RECORDs and tree), median of 3, on the full env;
5. cleans the two releases that no longer serve, with their envs and their cache share, and
   compares the base dir with step 1.

    python tests/bench/bench_envs.py [--wheelhouse DIR] [--link-mode auto] [--keep]

Prints each figure; exits 1 when an edit reached another env or the cache, when the edited
env was not refused, or when the base dir after the cleanup is more than 5% above step 1.
"""

import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from support import load_module  # noqa: E402

from ansible_collections.sglang.deploy.plugins.module_utils import sglang_envs as envs  # noqa: E402
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_release_cleanup as clean  # noqa: E402
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_release_store as store  # noqa: E402
from ansible_collections.sglang.deploy.plugins.module_utils import sglang_release_switch as switch  # noqa: E402
from ansible_collections.sglang.deploy.plugins.module_utils.sglang_releases import ReleaseError  # noqa: E402

CACHE = Path(os.environ.get("SGLANG_DEPLOY_CACHE", Path.home() / ".cache" / "sglang-deploy"))
EXTRAS = ("uv==0.13.9", "six==1.17.0")


def du(*paths):
    """Bytes on disk of the trees together (du -s --block-size=1: a hardlink counted once)."""
    out = subprocess.run(["du", "-s", "-c", "--block-size=1", *map(str, paths)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def counterparts(base, rel):
    """Every copy of the file `rel` (relative to an env) in the envs and in uv's cache."""
    found = list((base / "envs").glob(f"*/{rel}"))
    found += list((base / "envs" / ".uv-cache").glob(f"archive-v*/*/{rel.split('site-packages/', 1)[1]}"))
    return {str(p): p.read_bytes() for p in found}


def deploy(envmod, base, params, requirements, n):
    env = envmod.present(dict(params, requirements=requirements))
    files = [{"name": "launch", "content": f"exec {env['path']}/bin/python\n", "mode": "0755"}]
    made = store.prepare(str(base), f"20261202T00000{n}Z", files, {"set": requirements})["release"]
    store.packages(str(base), made, env["packages"], env={"env": env["id"],
                                                         "env_digest": env["digest"]})
    switch.activate(str(base), made, env_link=str(base / "ml-env"))
    return made, env


def main():
    found = sorted(p for p in glob.glob(str(CACHE / "wheelhouse-full" / "sglang-*"))
                   if os.path.isdir(p))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheelhouse", default=found[-1] if found else None)
    parser.add_argument("--version", default="0.5.23")
    parser.add_argument("--link-mode", default="auto")
    parser.add_argument("--base", default=None, help="a base dir (default: a temp dir in /var/tmp)")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if not args.wheelhouse:
        sys.exit("no full wheelhouse: run `make wheelhouse-full` first")
    envmod = load_module("sglang_env")
    base = Path(args.base or tempfile.mkdtemp(prefix="bench-envs-", dir="/var/tmp"))
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    params = {"base_dir": str(base), "python": "python3.11" if shutil.which("python3.11")
              else sys.executable, "packages": None, "env": None, "no_deps": False,
              "installer": "uv", "uv": uv, "rebuild": False, "timeout": 3600,
              "link_mode": args.link_mode,
              "options": ["--no-index", "--find-links", args.wheelhouse, "--offline"]}
    failed = []
    try:
        start = time.monotonic()
        first, one = deploy(envmod, base, params, [f"sglang=={args.version}"], 1)
        print(f"set 1: sglang=={args.version}, {len(one['packages'])} packages, link mode "
              f"{envs.read_marker(one['path'])['link_mode']}, built in "
              f"{time.monotonic() - start:.1f} s; base dir {du(base) / 1e9:.2f} GB "
              f"(env {du(one['path']) / 1e9:.2f} GB)")
        one_set = du(base)
        others = []
        for n, extra in enumerate(EXTRAS, start=2):
            start = time.monotonic()
            made, env = deploy(envmod, base, params, [f"sglang=={args.version}", extra], n)
            others.append((made, env))
            print(f"set {n}: + {extra}, built in {time.monotonic() - start:.1f} s; base dir "
                  f"{du(base) / 1e9:.2f} GB")

        target = next(Path(one["path"]).glob("lib/python*/site-packages/sglang/version.py"))
        rel_path = str(target.relative_to(one["path"]))
        before = counterparts(base, rel_path)
        with open(target, "r+b") as fh:  # a hot-fix in place: the same inode
            fh.seek(0, os.SEEK_END)
            fh.write(b"\n# hot-fix\n")
        after = counterparts(base, rel_path)
        reached = [p for p in before if p != str(target) and after.get(p) != before[p]]
        intact = [e["id"] for _, e in others if envs.check(str(base), e["id"])["intact"]]
        print(f"edited {target.relative_to(base)} in place: its {len(before) - 1} copies in the "
              f"other envs and uv's cache {'unchanged' if not reached else 'CHANGED: ' + ', '.join(reached)}; "
              f"the other envs' check: {len(intact)} of {len(others)} intact")
        failed += ["the edit reached " + ", ".join(reached)] if reached else []
        failed += ["another env is no longer intact"] if len(intact) != len(others) else []
        try:
            switch.activate(str(base), first, env_link=str(base / "ml-env"))
            failed.append("the switch to the edited env was not refused")
        except ReleaseError as exc:
            print(f"the switch to it: refused: {exc}")

        times = []
        for _ in range(3):
            start = time.monotonic()
            envs.check(str(base), others[1][1]["id"])
            times.append(time.monotonic() - start)
        files = sum(1 for _ in Path(others[1][1]["path"]).rglob("*"))
        print(f"the check before a switch (RECORDs + tree, {files} entries): median "
              f"{statistics.median(times):.2f} s of {', '.join(f'{t:.2f}' for t in times)}")

        for made in (first, others[0][0]):
            switch.mark(str(base), made, "failed", "bench: cleaned")
        out = clean.cleanup(str(base), 0, 0, env_link=str(base / "ml-env"))
        left = du(base)
        print(f"cleanup removed {len(out['removed'])} releases, envs {out['removed_envs']}, "
              f"{len(out['removed_cache'])} cache entries; reported freed "
              f"{out['freed_bytes'] / 1e9:.2f} GB, envs + cache now "
              f"{out['envs_disk_bytes'] / 1e9:.2f} GB (du of envs/: "
              f"{du(base / 'envs') / 1e9:.2f} GB)")
        print(f"base dir after: {left / 1e9:.2f} GB against {one_set / 1e9:.2f} GB for one set: "
              f"{100 * (left - one_set) / one_set:+.2f} %")
        failed += ["the base dir is more than 5% above one set"] if left > 1.05 * one_set else []
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    for line in failed:
        print(f"FAILED: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
