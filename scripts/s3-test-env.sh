#!/usr/bin/env bash
# Makes the Python venv the object-store tests use as the independent side:
# boto3/botocore (reference SigV4 signer and S3 client) and moto's S3/IAM/STS
# server (`moto_server`). Idempotent: a venv whose stamp matches is reused.
#
#   scripts/s3-test-env.sh          make (or check) the venv, print its path
#   scripts/s3-test-env.sh --path   print the path only (no network)
#
# Environment:
#   DTRAIN_S3_TEST_VENV   the venv (default /var/cache/dtrain/s3-test-venv,
#                         or ~/.cache/dtrain/s3-test-venv when /var/cache/dtrain
#                         is not writable)
# The tests (tests/objstore) look for the same path and skip, naming this
# script, when the venv is missing.
set -euo pipefail

readonly PIP_SPECS=("boto3>=1.28,<2" "moto[server]>=5,<6")
readonly STAMP_TEXT="boto3<2 moto[server]5"

default_venv() {
  if mkdir -p /var/cache/dtrain 2>/dev/null && [[ -w /var/cache/dtrain ]]; then
    printf '/var/cache/dtrain/s3-test-venv'
  else
    printf '%s/.cache/dtrain/s3-test-venv' "${HOME:-/tmp}"
  fi
}
readonly VENV="${DTRAIN_S3_TEST_VENV:-$(default_venv)}"

if [[ "${1:-}" == --path ]]; then
  printf '%s\n' "$VENV"
  exit 0
fi

log() { printf '==> s3-test-env: %s\n' "$*" >&2; }
die() { printf '==> s3-test-env: ERROR: %s\n' "$*" >&2; exit 1; }

if [[ -f "$VENV/.dtrain-stamp" && "$(cat "$VENV/.dtrain-stamp")" == "$STAMP_TEXT" ]] &&
  "$VENV/bin/python" -c 'import boto3, moto' 2>/dev/null && [[ -x "$VENV/bin/moto_server" ]]; then
  printf '%s\n' "$VENV"
  exit 0
fi

python3 -c 'import venv, ensurepip' 2>/dev/null ||
  die "python3 cannot make a venv (apt-get install python3-venv)"
mkdir -p "$(dirname "$VENV")"
# One maker at a time; a second waits for the first.
exec 9>"$VENV.lock"
flock 9
log "making $VENV"
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PIP_SPECS[@]}" ||
  die "pip could not install ${PIP_SPECS[*]} into $VENV"
printf '%s' "$STAMP_TEXT" >"$VENV/.dtrain-stamp"
log "ready: $VENV"
printf '%s\n' "$VENV"
