#!/usr/bin/python3
"""rendezvous_peer: the PyTorch peer (1.13 or 2.x) of bench/rendezvous/rendezvous_bench.

How long N agents take to form one round (min = max = N) with torchrun's own
dynamic rendezvous: one torch.distributed.TCPStore server (is_master=True) in
the main process; N participants, each with its own TCPStore client, its own
C10dRendezvousBackend and its own DynamicRendezvousHandler, built exactly as
torchrun builds them (c10d_rendezvous_backend.create_backend with is_host=false
and dynamic_rendezvous.create_handler from one RendezvousParameters).

    /usr/bin/python3 bench/peer/rendezvous_peer.py [--mode processes|threads]
        [--repeat R] [--cap SECS] [--join-timeout SECS] [N ...]   (default 16 64 256, R = 3)

  processes (default): each participant is a process forked (multiprocessing
      "fork") from the main one after `import torch` and before the store server
      starts, so start-up cost stays out of the figure and no GIL is shared.
  threads: each participant is a thread of the main process (like dtrain's
      rendezvous_bench); the rendezvous state is pickled and merged in Python
      under one GIL.

Measured like rendezvous_bench: every participant first connects and builds its
handler ("connect"), then all are released at once; "form" is the earliest
next_rendezvous() call to the latest return (CLOCK_MONOTONIC, which is system
wide, so processes compare). The median of R runs, each on a fresh server and
run id. A run that has not formed within --cap seconds of the release is
stopped (its participants killed) and reported as "> cap". One JSON line per N
follows the table. Needs no GPU.
"""

import argparse
import json
import multiprocessing as mp
import os
import queue
import resource
import signal
import sys
import threading
import time
import traceback
import pickle
from datetime import datetime, timedelta

import torch.distributed as dist
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
    C10dRendezvousBackend,
    create_backend,
)
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler


def make_handler(port, run_id, n, join_timeout):
    """One agent's rendezvous, as torchrun makes it for --rdzv-backend c10d."""
    params = RendezvousParameters(
        backend="c10d",
        endpoint=f"127.0.0.1:{port}",
        run_id=run_id,
        min_nodes=n,
        max_nodes=n,
        is_host="false",      # connect to the main process's server
        read_timeout="60",    # = rendezvous_bench's backend_timeout
        join_timeout=str(int(join_timeout)),  # torch wants whole seconds
    )
    backend, store = create_backend(params)
    return create_handler(store, backend, params)


def participant(i, port, run_id, n, join_timeout, ready, go, results, done):
    """Connect, wait for the release, join; report (i, joined, returned, rank, world, error)."""
    handler = None
    error = ""
    try:
        handler = make_handler(port, run_id, n, join_timeout)
    except Exception:
        error = "connect: " + traceback.format_exc(limit=2)
    ready()
    go()
    joined = time.monotonic()
    rank = world = -1
    if handler is not None:
        try:
            info = handler.next_rendezvous()
            if isinstance(info, tuple):  # torch 1.13: (store, rank, world_size)
                _, rank, world = info
            else:  # torch 2.x: a RendezvousInfo
                rank, world = info.rank, info.world_size
        except Exception:
            error = traceback.format_exc(limit=2)
    returned = time.monotonic()
    results.put((i, joined, returned, rank, world, error))
    done()
    if handler is not None:
        handler._stop_heartbeats()  # no shutdown(): that closes the rendezvous for all


def child_main(i, conn, run_id, n, join_timeout, ready_barrier, go_event, results, done_event):
    # The main process sends the port once its server is up.
    port = conn.recv()
    conn.close()
    participant(i, port, run_id, n, join_timeout,
                ready=ready_barrier.wait, go=go_event.wait, results=results,
                done=done_event.wait)
    os._exit(0)


def free_port_server():
    # Port 0: the OS picks a free port; TCPStore reports it.
    return dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=60),
                         wait_for_workers=False)


def shared_state(server, run_id):
    """What the stuck round looks like in the store: how many participants the shared
    state holds and how many of those have a heartbeat younger than torch's 15 s ttl."""
    try:
        state = C10dRendezvousBackend(server, run_id).get_state()
        if state is None:
            return "no state written"
        st = pickle.loads(state[0])
        def age(t):  # heartbeats: naive UTC in torch 1.13, timezone-aware in 2.x
            return (datetime.now(t.tzinfo) if t.tzinfo else datetime.utcnow()) - t
        fresh = sum(1 for t in st.last_heartbeats.values() if age(t) < timedelta(seconds=15))
        return (f"round {st.round}, complete={st.complete}, {len(st.participants)} participants, "
                f"{fresh} heartbeats < 15 s old, state {len(state[0])} bytes")
    except Exception as e:  # diagnostics only
        return f"unreadable: {e}"


def run_once(n, attempt, mode, cap, join_timeout):
    run_id = f"peer-{n}-{attempt}-{os.getpid()}"
    out = {"connect_s": None, "form_s": None, "ok": False, "error": ""}
    if mode == "processes":
        ctx = mp.get_context("fork")
        ready = ctx.Barrier(n + 1)
        go = ctx.Event()
        done = ctx.Event()
        results = ctx.Queue()
        pipes, procs = [], []
        # Fork before the server (and its thread) exists.
        for i in range(n):
            parent_end, child_end = ctx.Pipe()
            p = ctx.Process(target=child_main,
                            args=(i, child_end, run_id, n, join_timeout, ready, go, results, done),
                            daemon=True)
            p.start()
            child_end.close()
            pipes.append(parent_end)
            procs.append(p)
        t0 = time.monotonic()
        server = free_port_server()
        for c in pipes:
            c.send(server.port)
            c.close()
    else:
        ready = threading.Barrier(n + 1)
        go = threading.Event()
        done = threading.Event()
        results = queue.Queue()
        t0 = time.monotonic()
        server = free_port_server()
        procs = [threading.Thread(target=participant,
                                  args=(i, server.port, run_id, n, join_timeout, ready.wait,
                                        go.wait, results, done.wait),
                                  daemon=True)
                 for i in range(n)]
        for t in procs:
            t.start()

    got = []
    try:
        ready.wait(timeout=cap)
        out["connect_s"] = time.monotonic() - t0
        go.set()
        deadline = time.monotonic() + cap
        while len(got) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                got.append(results.get(timeout=min(left, 1.0)))
            except queue.Empty:
                pass
        if len(got) < n:
            out["state_at_cap"] = shared_state(server, run_id)
    except threading.BrokenBarrierError:
        out["error"] = f"not all {n} participants connected within {cap:g} s"
    finally:
        done.set()
        if mode == "processes":
            end = time.monotonic() + 10
            for p in procs:
                p.join(timeout=max(0.0, end - time.monotonic()))
            for p in procs:
                if p.is_alive():
                    os.kill(p.pid, signal.SIGKILL)
            for p in procs:
                p.join(timeout=5)
        else:
            for t in procs:
                t.join(timeout=5)
        del server

    if len(got) < n and not out["error"]:
        out["error"] = f"> cap: {len(got)} of {n} formed within {cap:g} s"
        out["timed_out"] = True
    errors = [e for (_, _, _, _, _, e) in got if e]
    if errors:
        out["error"] = errors[0]
    if len(got) == n and not errors:
        ranks = sorted(r for (_, _, _, r, _, _) in got)
        worlds = {w for (_, _, _, _, w, _) in got}
        if ranks != list(range(n)) or worlds != {n}:
            out["error"] = f"bad round: ranks {ranks[:4]}..., world sizes {sorted(worlds)}"
        else:
            out["ok"] = True
            out["form_s"] = max(g[2] for g in got) - min(g[1] for g in got)
    return out


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[16, 64, 256])
    ap.add_argument("--mode", choices=["processes", "threads"], default="processes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cap", type=float, default=120.0,
                    help="seconds a run may take to form (and to connect) before it is stopped")
    ap.add_argument("--join-timeout", type=float, default=None,
                    help="torch's join_timeout (default: cap + 10 s, so the cap decides)")
    args = ap.parse_args()
    join_timeout = args.join_timeout if args.join_timeout else int(args.cap) + 10
    lim = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lim[1], lim[1]))

    print(f"# rendezvous_peer: torch {__import__('torch').__version__} DynamicRendezvousHandler + "
          f"C10dRendezvousBackend over TCPStore, N participants ({args.mode}, one TCP client each), "
          f"min = max = N, {os.cpu_count()} cpus, median of {args.repeat}, cap {args.cap:g} s",
          flush=True)
    print(f"{'N':>8} {'form_s':>12} {'connect_s':>12} {'status':>8}", flush=True)
    lines, status = [], 0
    for n in args.sizes:
        runs = []
        for r in range(args.repeat):
            res = run_once(n, r, args.mode, args.cap, join_timeout)
            runs.append(res)
            if not res["ok"]:
                print(f"# N={n} run {r}: {res['error'].strip()}", file=sys.stderr, flush=True)
                if "state_at_cap" in res:
                    print(f"# N={n} run {r}: shared state at the cap: {res['state_at_cap']}",
                          file=sys.stderr, flush=True)
                if res.get("timed_out"):
                    break  # more repeats would only hit the cap again
        ok = all(x["ok"] for x in runs) and len(runs) == args.repeat
        timed_out = any(x.get("timed_out") for x in runs)
        forms = [x["form_s"] for x in runs if x["ok"]]
        conns = [x["connect_s"] for x in runs if x["connect_s"] is not None]
        form = median(forms) if ok else None
        form_txt = f"{form:12.3f}" if ok else (f"{'>' + format(args.cap, 'g'):>12}" if timed_out
                                               else f"{'-':>12}")
        conn_txt = f"{median(conns):12.3f}" if conns else f"{'-':>12}"
        print(f"{n:>8} {form_txt} {conn_txt} {'ok' if ok else ('CAP' if timed_out else 'FAILED'):>8}",
              flush=True)
        if not ok:
            status = 1
        lines.append(json.dumps({
            "bench": "rendezvous_peer", "mode": args.mode, "n": n,
            "form_s": round(form, 4) if ok else None,
            "connect_s": round(median(conns), 4) if conns else None,
            "form_runs_s": [round(f, 4) for f in forms],
            "ok": ok, "timed_out": timed_out, "cap_s": args.cap,
            "state_at_cap": next((x["state_at_cap"] for x in runs if "state_at_cap" in x), None),
        }))
    for line in lines:
        print(line, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
