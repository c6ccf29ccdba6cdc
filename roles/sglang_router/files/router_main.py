"""The SGLang router's entry point when it has an API key: the key comes on stdin.

Run by launch.py (`--via stdin`), which writes {"api-key": ...} to stdin and copies the
router's output to the journal with the key redacted. The router (sglang-router 0.3) has no
config file, so the key is added to the argument list in this process, never to an argv.
"""

import json
import sys

from sglang_router.launch_router import launch_router, parse_router_args


def main():
    keys = json.loads(sys.stdin.read() or "{}")
    argv = sys.argv[1:]
    if keys.get("api-key"):
        argv += ["--api-key", keys["api-key"]]
    launch_router(parse_router_args(argv))


if __name__ == "__main__":
    main()
