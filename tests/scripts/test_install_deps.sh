#!/usr/bin/env bash
# scripts/install-deps.sh's package sets: README command 1's (--demo) is part
# of the full set command 2 installs, so both build from one list of what
# each package is for; and an unknown option is one line and a non-zero exit,
# with nothing installed. (That --demo is enough to build and run the demo is
# shown cold by scripts/fresh-root.sh demo: README.)
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
script="$REPO_ROOT/scripts/install-deps.sh"
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

full="$(bash "$script" --list)" || fail "--list exited $?"
demo="$(bash "$script" --list --demo)" || fail "--list --demo exited $?"
[[ -n "$demo" ]] || fail "--list --demo printed nothing"
while IFS= read -r p; do
  grep -qxF "$p" <<<"$full" || fail "$p is in --demo but not in the full set"
done <<<"$demo"
for p in dataset-fashion-mnist python3-venv cmake; do
  grep -qxF "$p" <<<"$demo" || fail "--demo lacks $p"
done
for p in libtorch-dev chromium slurmd; do
  grep -qxF "$p" <<<"$demo" && fail "--demo installs $p, which only command 2 needs"
done
named="$(bash "$script" --list libtorch-dev)" || fail "--list libtorch-dev exited $?"
[[ "$named" == libtorch-dev ]] || fail "--list libtorch-dev printed '$named'"

out="$(bash "$script" --no-such-option 2>&1)"
rc=$?
[[ $rc -ne 0 ]] || fail "--no-such-option exited 0"
[[ "$(grep -c . <<<"$out")" -eq 1 && "$out" == *"unknown option --no-such-option"* ]] ||
  fail "--no-such-option printed: $out"

[[ $failures -eq 0 ]] && echo "PASS" || exit 1
