#!/usr/bin/env bash
# Two network namespaces joined by a veth pair shaped to a fixed rate, for
# benchmarking distributed training where communication is real work.
#
#   bench/netns/netns.sh up        create (idempotent: tears down first)
#   bench/netns/netns.sh down      remove everything created here (always safe)
#   bench/netns/netns.sh status    show namespaces, addresses and qdiscs
#   bench/netns/netns.sh verify    measure the bandwidth ns0 -> ns1 (bounded time)
#   bench/netns/netns.sh exec K CMD ARGS...     run CMD inside namespace K
#   bench/netns/netns.sh check     exit 0 if namespaces can be created here, else 3
#
# Environment (optional):
#   DTRAINBENCH_RATE    tc rate (default 1gbit)
#   DTRAINBENCH_DELAY   extra one-way delay via netem, e.g. 100us (default none)
#   DTRAINBENCH_NODES   namespaces, 2..8 (default 2)
#
# Layout (only these addresses are used, only inside these namespaces):
#   namespace dtrainbench0: veth dtb0  10.213.0.1/24  (rank 0)
#   namespace dtrainbench1: veth dtb1  10.213.0.2/24  (rank 1)
# Both ends egress-shaped with `tc qdisc ... tbf rate $RATE`, loopback up in each.
# With DTRAINBENCH_NODES=N > 2, node k (0..N-1) is namespace dtrainbench<k>,
# veth dtb<k>, 10.213.0.<k+1>/24, and the nodes are joined by a switch: a
# bridge in namespace dtrainbenchsw, node k's peer end dtbp<k> its port. Each
# link is shaped both ways (the node's dtb<k>: its uplink; the port dtbp<k>:
# its downlink), like hosts on a switched network.
# Host names: /etc/netns/<namespace>/hosts (which `ip netns exec` mounts over
# /etc/hosts) adds dtbnode<k> -> node k's address to this machine's
# /etc/hosts, for programs that advertise their host name (torchft; run them
# with `unshare --uts` and `hostname dtbnode<k>`).
set -euo pipefail

NS0=dtrainbench0
NS1=dtrainbench1
DEV0=dtb0
DEV1=dtb1
ADDR0=10.213.0.1
ADDR1=10.213.0.2
PREFIX=24
NODES=${DTRAINBENCH_NODES:-2}
MAX_NODES=8
SW=dtrainbenchsw
RATE=${DTRAINBENCH_RATE:-1gbit}
DELAY=${DTRAINBENCH_DELAY:-}
PY=/usr/bin/python3

die() { echo "netns.sh: $*" >&2; exit 1; }
[[ $NODES =~ ^[0-9]+$ ]] && ((NODES >= 2 && NODES <= MAX_NODES)) ||
    die "DTRAINBENCH_NODES must be 2..$MAX_NODES, got '$NODES'"
node_ns() { echo "dtrainbench$1"; }
node_addr() { echo "10.213.0.$(($1 + 1))"; }

can_netns() {
    # Probe with a throw-away namespace; no side effects left behind.
    local probe="dtrainbench-probe-$$"
    if ip netns add "$probe" 2>/dev/null; then
        ip netns del "$probe" 2>/dev/null || true
        return 0
    fi
    return 1
}

ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }

down() {
    # Deleting a namespace destroys the veth end inside it (and its peer).
    local ns k
    for k in $(seq 0 $((MAX_NODES - 1))) sw; do
        ns=dtrainbench$k
        if ns_exists "$ns"; then
            # kill anything still running inside (only processes in our namespaces)
            local pids
            pids=$(ip netns pids "$ns" 2>/dev/null || true)
            if [[ -n "$pids" ]]; then
                # shellcheck disable=SC2086
                kill $pids 2>/dev/null || true
                sleep 0.5
                pids=$(ip netns pids "$ns" 2>/dev/null || true)
                # shellcheck disable=SC2086
                [[ -n "$pids" ]] && kill -9 $pids 2>/dev/null || true
            fi
            ip netns del "$ns" 2>/dev/null || true
        fi
    done
    # In case a half-built setup left the veth in the root namespace.
    ip link del "$DEV0" 2>/dev/null || true
    ip link del "$DEV1" 2>/dev/null || true
    for k in $(seq 0 $((MAX_NODES - 1))); do rm -rf "/etc/netns/$(node_ns "$k")"; done
    rmdir /etc/netns 2>/dev/null || true
}

# hosts_file NS: the namespace's /etc/hosts (see the header)
hosts_file() {
    mkdir -p "/etc/netns/$1"
    local k
    {
        cat /etc/hosts
        for k in $(seq 0 $((NODES - 1))); do printf '%s dtbnode%s\n' "$(node_addr "$k")" "$k"; done
    } >"/etc/netns/$1/hosts"
}

# burst_for RATE: tbf's bucket, 256 KiB per Gbit/s and at least 256 KiB.
# The bucket must cover at least rate/HZ; 256 KiB is plenty at 1 Gbit/s,
# and at 10 Gbit/s it would hold the link below its rate.
burst_for() {
    local r=${1,,} mbit=1000 kb
    if [[ $r =~ ^([0-9]+)gbit$ ]]; then
        mbit=$((BASH_REMATCH[1] * 1000))
    elif [[ $r =~ ^([0-9]+)mbit$ ]]; then
        mbit=${BASH_REMATCH[1]}
    fi
    kb=$((mbit * 256 / 1000))
    ((kb >= 256)) || kb=256
    echo "${kb}kb"
}

shape() {
    local ns=$1 dev=$2
    # tbf keeps the long-run average at the configured rate.
    if [[ -n "$DELAY" ]]; then
        ip netns exec "$ns" tc qdisc replace dev "$dev" root netem delay "$DELAY" rate "$RATE" limit 10000
    else
        ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$RATE" burst "$(burst_for "$RATE")" latency 20ms
    fi
}

up() {
    if ! can_netns; then
        echo "netns.sh: SKIP: 'ip netns add' is not permitted here (need root / CAP_SYS_ADMIN); shaped-link benchmarks skipped" >&2
        exit 3
    fi
    down
    trap 'echo "netns.sh: setup failed, cleaning up" >&2; down' ERR
    if ((NODES > 2)); then
        up_switched
        trap - ERR
        return
    fi
    ip netns add "$NS0"
    ip netns add "$NS1"
    hosts_file "$NS0"
    hosts_file "$NS1"
    ip link add "$DEV0" type veth peer name "$DEV1"
    ip link set "$DEV0" netns "$NS0"
    ip link set "$DEV1" netns "$NS1"
    ip netns exec "$NS0" ip addr add "$ADDR0/$PREFIX" dev "$DEV0"
    ip netns exec "$NS1" ip addr add "$ADDR1/$PREFIX" dev "$DEV1"
    ip netns exec "$NS0" ip link set lo up
    ip netns exec "$NS1" ip link set lo up
    ip netns exec "$NS0" ip link set "$DEV0" up
    ip netns exec "$NS1" ip link set "$DEV1" up
    shape "$NS0" "$DEV0"
    shape "$NS1" "$DEV1"
    # wait until the link answers (bounded)
    local _
    for _ in $(seq 1 20); do
        if ip netns exec "$NS0" ping -c1 -W1 "$ADDR1" >/dev/null 2>&1; then break; fi
        sleep 0.2
    done
    trap - ERR
    echo "netns.sh: up: $NS0($DEV0 $ADDR0) <-> $NS1($DEV1 $ADDR1), rate $RATE${DELAY:+, delay $DELAY}"
}

# up_switched: NODES namespaces on one bridge (see the header)
up_switched() {
    local k ns _
    ip netns add "$SW"
    ip -n "$SW" link add dtbr type bridge
    ip -n "$SW" link set dtbr up
    for k in $(seq 0 $((NODES - 1))); do
        ns=$(node_ns "$k")
        ip netns add "$ns"
        hosts_file "$ns"
        ip -n "$ns" link add "dtb$k" type veth peer name "dtbp$k" netns "$SW"
        ip -n "$SW" link set "dtbp$k" master dtbr
        ip -n "$SW" link set "dtbp$k" up
        ip -n "$ns" addr add "$(node_addr "$k")/$PREFIX" dev "dtb$k"
        ip -n "$ns" link set lo up
        ip -n "$ns" link set "dtb$k" up
        shape "$ns" "dtb$k"
        shape "$SW" "dtbp$k"
    done
    for k in $(seq 1 $((NODES - 1))); do
        for _ in $(seq 1 20); do
            if ip netns exec "$NS0" ping -c1 -W1 "$(node_addr "$k")" >/dev/null 2>&1; then break; fi
            sleep 0.2
        done
    done
    echo "netns.sh: up: $NODES namespaces dtrainbench0..$((NODES - 1)) (dtb<k> 10.213.0.<k+1>) on a switch, every link $RATE each way${DELAY:+, delay $DELAY}"
}

status() {
    local ns k
    for k in $(seq 0 $((NODES - 1))); do
        ns=$(node_ns "$k")
        if ns_exists "$ns"; then
            echo "== $ns"
            ip netns exec "$ns" ip -br addr
            ip netns exec "$ns" tc qdisc show dev "dtb$k"
        else
            echo "== $ns: absent"
        fi
    done
}

verify() {
    ns_exists "$NS0" && ns_exists "$NS1" || die "namespaces absent; run '$0 up' first"
    local secs=${1:-3} port=29431
    local out
    out=$(mktemp)
    # receiver in ns1, sender in ns0; each bounded by timeout
    timeout $((secs + 10)) ip netns exec "$NS1" "$PY" - "$ADDR1" "$port" >"$out" <<'EOF' &
import socket, sys, time
addr, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, port)); s.listen(1)
c, _ = s.accept()
buf = bytearray(1 << 20); n = 0; t0 = None
while True:
    k = c.recv_into(buf)
    if not k: break
    if t0 is None: t0 = time.perf_counter()
    n += k
t = time.perf_counter() - t0
print(f"{n} {t:.6f}")
EOF
    local rpid=$!
    sleep 0.5
    timeout $((secs + 10)) ip netns exec "$NS0" "$PY" - "$ADDR1" "$port" "$secs" <<'EOF'
import socket, sys, time
addr, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.create_connection((addr, port), timeout=5)
data = b"\0" * (1 << 20); end = time.perf_counter() + secs
while time.perf_counter() < end:
    s.sendall(data)
s.close()
EOF
    wait "$rpid" || die "receiver failed"
    local bytes t shaped
    read -r bytes t <"$out"
    shaped=$(ip netns exec "$NS0" tc qdisc show dev "$DEV0" | grep -o 'rate [^ ]*' | head -n1 || true)
    rm -f "$out"
    "$PY" -c "import sys; b,t=int(sys.argv[1]),float(sys.argv[2]); print(f'netns.sh: verify: {b/1e6:.1f} MB in {t:.2f} s = {b*8/t/1e9:.3f} Gbit/s (ns0 -> ns1, qdisc ${shaped:-?})')" "$bytes" "$t"
}

cmd=${1:-}
shift || true
case "$cmd" in
    up) up ;;
    down) down; echo "netns.sh: down" ;;
    status) status ;;
    verify) verify "$@" ;;
    check) can_netns || { echo "netns.sh: SKIP: 'ip netns add' is not permitted here" >&2; exit 3; } ;;
    exec)
        [[ $# -ge 2 ]] || die "usage: $0 exec K CMD ARGS..."
        [[ $1 =~ ^[0-9]+$ ]] || die "namespace index must be a number (0 for dtrainbench0), got '$1'"
        ns=$(node_ns "$1")
        ns_exists "$ns" || die "namespace $ns absent; run '$0 up' (DTRAINBENCH_NODES > $1) first"
        shift
        exec ip netns exec "$ns" "$@"
        ;;
    *) echo "usage: $0 up|down|status|verify [SECONDS]|check|exec K CMD..." >&2; exit 2 ;;
esac
