#!/usr/bin/env bash
# Run a command (make's test steps), then fail if it left the working tree dirtier than it found
# it: tests never write into the clone. Ignored files (.venv, .cache, dist) do not count; in a
# fresh clone (CI) the tree must be as clean after as before.
set -uo pipefail
cd "$(dirname "$0")/.."
status() { git status --porcelain --untracked-files=all 2>/dev/null | sort; }
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  exec "$@"
fi
before=$(status)
"$@"
rc=$?
dirtied=$(comm -13 <(printf '%s\n' "$before") <(status) | sed '/^$/d')
if [[ -n "$dirtied" ]]; then
  echo "FAILED: the tests left the working tree dirty (git status --porcelain):" >&2
  printf '%s\n' "$dirtied" >&2
  [[ $rc -ne 0 ]] || rc=1
fi
exit "$rc"
