#!/usr/bin/env bash
# Issue 4 (b), rendezvous scale: time for N agents to form one round (MIN = MAX = N)
# through the embedded store, dtrain (BUILD_DIR/bench/rendezvous_bench) side by side
# with torch's dynamic rendezvous (bench/peer/rendezvous_peer.py: DynamicRendezvous-
# Handler + C10dRendezvousBackend over a TCPStore, as torchrun builds them). The torch
# is that of BUILD_DIR/dtrain's LibTorch version (bench/peer_python.sh: scripts/peer-
# torch.sh's venv for 2.x, /usr/bin/python3 for Debian's 1.13; DTRAIN_PEER_PYTHON
# overrides); both versions are printed.
#
#   bench/rendezvous/rendezvous_vs_torch.sh BUILD_DIR [--repeat R] [--cap SECS]
#       [--modes "processes threads"] [--out DIR] [N ...]        (default N: 16 64 256, R = 3)
#
# For each mode, N and repeat, dtrain and torch run one after the other (one run each,
# interleaved, so that load from elsewhere hits both alike); the table shows the median
# of the R runs and the ratio torch / dtrain (> 1: dtrain is faster). Modes:
#   processes: every participant is its own forked process (the fair mode for Python;
#              real agents are processes on separate hosts);
#   threads:   every participant is a thread of one process (dtrain's default mode;
#              torch's handlers then share one GIL, which serialises their work).
# A torch run that has not formed after --cap seconds (default 120) is stopped and shown
# as "> cap"; its further repeats for that N are skipped. Every process runs under
# `timeout` in its own process group, which an EXIT trap kills. Needs no GPU.
set -euo pipefail

usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; }
[[ $# -ge 1 ]] || { usage >&2; exit 2; }
[[ $1 == -h || $1 == --help ]] && { usage; exit 0; }
build=$1
shift
repeat=3
cap=120
modes="processes threads"
out=""
sizes=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --repeat) repeat=$2; shift 2 ;;
    --cap) cap=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    [0-9]*) sizes+=("$1"); shift ;;
    *) echo "rendezvous_vs_torch.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ ${#sizes[@]} -eq 0 ]] && sizes=(16 64 256)

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin="$build/bench/rendezvous_bench"
peer="$repo/bench/peer/rendezvous_peer.py"
# shellcheck source=bench/peer_python.sh
source "$repo/bench/peer_python.sh"
peer_select "$build/dtrain" || exit 2
py=("${PEER_ENV[@]}" "$PEER_PY")
if [[ ! -x "$bin" ]]; then
  echo "rendezvous_vs_torch.sh: $bin not found; build it first: cmake --build $build --target rendezvous_bench" >&2
  exit 2
fi
"${py[@]}" -c 'import torch.distributed.elastic.rendezvous.dynamic_rendezvous' 2>/dev/null ||
  { echo "rendezvous_vs_torch.sh: $PEER_PY cannot import torch's dynamic rendezvous" >&2; exit 2; }
bin_help=$("$bin" --help 2>&1 || true)
if [[ $bin_help != *--mode* ]]; then
  echo "rendezvous_vs_torch.sh: $bin has no --mode; only threads mode is measured for dtrain" >&2
  dtrain_has_mode=0
else
  dtrain_has_mode=1
fi

[[ -n $out ]] || out=$(mktemp -d /tmp/rendezvous_vs_torch.XXXXXX)
mkdir -p "$out"
results="$out/results.jsonl"
: > "$results"

pgids=()
cleanup() {
  local g
  for g in "${pgids[@]}"; do kill -KILL -- "-$g" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run_bounded SECS LOG CMD...: runs CMD in its own process group under timeout.
run_bounded() {
  local secs=$1 log=$2
  shift 2
  setsid timeout --kill-after=10 "$secs" "$@" > "$log" 2>&1 &
  local pid=$!
  pgids+=("$pid")
  local rc=0
  wait "$pid" || rc=$?
  kill -KILL -- "-$pid" 2>/dev/null || true   # anything the run left behind
  return $rc
}

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "# machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(uname -sr), $(peer_versions)"
echo "# command: $0 $build --repeat $repeat --cap $cap --modes \"$modes\" ${sizes[*]}"
echo "# load before (1/5/15 min): $(load)"
echo "# logs and results.jsonl in $out"

skip_torch=""   # "mode:n" pairs whose torch run hit the cap
for mode in $modes; do
  for n in "${sizes[@]}"; do
    for ((r = 0; r < repeat; r++)); do
      if [[ $mode == processes && $dtrain_has_mode == 0 ]]; then
        :
      else
        log="$out/dtrain.$mode.$n.$r.log"
        margs=()
        [[ $dtrain_has_mode == 1 ]] && margs=(--mode "$mode")
        rc=0
        before=$(load)
        run_bounded $((cap + 120)) "$log" "$bin" --repeat 1 "${margs[@]}" "$n" || rc=$?
        line=$(grep '^{' "$log" | tail -n1 || true)
        if [[ -z $line ]]; then line='{"ok":false}'; fi
        echo "{\"impl\":\"dtrain\",\"mode\":\"$mode\",\"n\":$n,\"rep\":$r,\"rc\":$rc,\"load\":\"$before\",\"res\":$line}" >> "$results"
        [[ $rc -eq 0 ]] || echo "# dtrain $mode N=$n run $r failed (rc $rc): $(tail -n2 "$log" | tr '\n' ' ')" >&2
      fi
      if [[ " $skip_torch " == *" $mode:$n "* ]]; then continue; fi
      log="$out/torch.$mode.$n.$r.log"
      rc=0
      before=$(load)
      run_bounded $((cap * 2 + 120)) "$log" "${py[@]}" "$peer" --mode "$mode" --repeat 1 --cap "$cap" "$n" || rc=$?
      line=$(grep '^{' "$log" | tail -n1 || true)
      if [[ -z $line ]]; then line='{"ok":false}'; fi
      echo "{\"impl\":\"torch\",\"mode\":\"$mode\",\"n\":$n,\"rep\":$r,\"rc\":$rc,\"load\":\"$before\",\"res\":$line}" >> "$results"
      if [[ $line == *'"timed_out": true'* ]]; then
        skip_torch+=" $mode:$n"
      elif [[ $rc -ne 0 ]]; then
        echo "# torch $mode N=$n run $r failed (rc $rc): $(grep -v '^{' "$log" | tail -n2 | tr '\n' ' ')" >&2
      fi
    done
  done
done
echo "# load after (1/5/15 min): $(load)"
echo

"${py[@]}" - "$results" "$cap" "$repeat" <<'EOF'
import json, sys
results, cap, repeat = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(l) for l in open(results) if l.strip()]
def med(v):
    v = sorted(v)
    return v[len(v) // 2] if v else None
order = []
for r in rows:
    k = (r["mode"], r["n"])
    if k not in order:
        order.append(k)
print("| mode | N | dtrain s | torch s | torch / dtrain | dtrain runs | torch runs |")
print("|---|---|---|---|---|---|---|")
for mode, n in order:
    def runs(impl):
        sel = [r for r in rows if r["impl"] == impl and r["mode"] == mode and r["n"] == n]
        ok = [r["res"]["form_s"] for r in sel if r["res"].get("ok") and r["res"].get("form_s") is not None]
        capped = any(r["res"].get("timed_out") for r in sel)
        failed = [r for r in sel if not r["res"].get("ok") and not r["res"].get("timed_out")]
        return sel, ok, capped, failed
    dsel, dok, _, dfail = runs("dtrain")
    tsel, tok, tcap, tfail = runs("torch")
    d = med(dok) if dok and not dfail else None
    t = med(tok) if tok and not tfail and not tcap else None
    dtxt = f"{d:.3f}" if d is not None else ("-" if not dsel else "failed")
    ttxt = f"{t:.3f}" if t is not None else (f"> {cap:g}" if tcap else ("-" if not tsel else "failed"))
    if d and t:
        ratio = f"**{t / d:.1f}×**"
    elif d and tcap:
        ratio = f"**> {cap / d:.0f}×**"
    else:
        ratio = "-"
    fmt = lambda v: ", ".join(f"{x:.3f}" for x in v) or "-"
    print(f"| {mode} | {n} | {dtxt} | {ttxt} | {ratio} | {fmt(dok)} | "
          f"{fmt(tok) + (' (+ capped)' if tcap else '')} |")
EOF
