"""Write the monitoring pack the role renders for the reference profile into docs/monitoring/.

    python scripts/monitoring_docs.py            # write the files
    python scripts/monitoring_docs.py --check    # fail when one is stale (a unit test runs it)

The release is tests/unit/data/monitoring/release-reference.json (an example record of the
reference profile on its hardware); the floors are the profile's, the settings the role's
defaults, the host `gpu1`: the same filters the role calls, so the docs never drift from them.
"""

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "monitoring"
RELEASE = ROOT / "tests" / "unit" / "data" / "monitoring" / "release-reference.json"
PROFILE = ROOT / "roles" / "sglang" / "profiles" / "qwen3.6-27b-tp2-mtp.yml"
# The pack's settings, each the role's sglang_monitoring_<name> (service/monitoring.yml).
SETTINGS = {"for": "for", "window": "window", "tolerance": "tolerance",
            "ttft_factor": "ttft_factor", "itl_factor": "itl_factor",
            "accept_fraction": "accept_fraction", "kv_usage": "kv_usage",
            "drift_interval_s": "drift_interval", "availability": "availability",
            "runbook_url": "runbook_url"}


def rendered():
    """{file name: text} as the role writes them for the reference release on host gpu1."""
    sys.path.insert(0, str(ROOT / "collections"))
    from ansible_collections.sglang.deploy.plugins.filter import sglang_monitoring as mon

    defaults = yaml.safe_load((ROOT / "roles/sglang/defaults/main.yml").read_text(encoding="utf-8"))
    profile = yaml.safe_load(PROFILE.read_text(encoding="utf-8"))
    settings = {key: defaults[f"sglang_monitoring_{name}"] for key, name in SETTINGS.items()}
    floors = {"min_decode_tok_s": profile["smoke"].get("min_decode_tok_s"),
              "max_ttft_ms": profile["smoke"].get("max_ttft_ms")}
    release = json.loads(RELEASE.read_text(encoding="utf-8"))
    pack = mon.sglang_monitoring_pack(release, {"host": "gpu1", "address": "10.0.0.11:30000"},
                                      floors, settings)
    return {
        "targets/gpu1.json": json.dumps(pack["targets"], indent=4, sort_keys=True) + "\n",
        "rules/gpu1.rules.yml": yaml.safe_dump(pack["rules"], indent=2, width=100,
                                               sort_keys=False, default_flow_style=False),
        "dashboards/sglang.json": json.dumps(mon.dashboard(settings["window"]),
                                             indent=4, sort_keys=True) + "\n",
        "thresholds.txt": "\n".join(pack["thresholds"]) + "\n",
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    check = parser.parse_args().check
    stale = []
    for name, text in rendered().items():
        path = OUT / name
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(name)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if check and stale:
        print(f"docs/monitoring is stale ({', '.join(stale)}): run python scripts/monitoring_docs.py")
        return 1
    print(f"docs/monitoring: {len(stale)} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
