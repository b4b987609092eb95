#!/usr/bin/env python3
"""Tables for bench/ps_vs_allreduce.sh from its results.jsonl.

Usage: ps_vs_allreduce_report.py OUT/results.jsonl [MORE/results.jsonl ...]

PS rows come from `dtrain bench kvstore --json` (worker 0; times and wire bytes
per iteration averaged over the workers). Allreduce rows come from `dtrain bench
collective allreduce`'s table (the in-place columns: DDP reduces its buckets in
place); their wire bytes are the workers' eth0 counters (averaged over the workers)
over the whole job divided by the number of allreduces it ran (2 modes x (warm-up + timed + check)),
so they include the rendezvous and barriers (a few kB).
"""
import json
import re
import statistics
import sys

ROW = re.compile(r"^\s*(?:\[[^\]]*\]:\s*)?(\d+)\s+(\d+)\s+\w+\s+\w+\s+-?\d+\s+"
                 r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(-?\d+|N/A)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(-?\d+|N/A)\s*$")
PUSH = re.compile(r"Push average time cost: ([\d.]+)ms")
PULL = re.compile(r"Pull average time cost: ([\d.]+)ms")


def collective_rows(rec):
    """{bytes: (in-place time us, algbw GB/s, wrong)} from rank 0's table."""
    rows = {}
    for key in sorted(k for k in rec if k.startswith("log")):
        try:
            text = open(rec[key], errors="replace").read()
        except OSError:
            continue
        for line in text.splitlines():
            m = ROW.match(line)
            if m:
                # algbw from size / time: the table rounds it to 0.01 GB/s
                size, t = int(m.group(1)), float(m.group(7))
                wrong = "-" if "N/A" in (m.group(6), m.group(10)) else int(m.group(6)) + int(m.group(10))
                rows[size] = (t, size / t / 1e3, wrong)
    return rows


def impl_name(r):
    """'PS S=2' or 'allreduce', with ' W=4' where the run had other than 2 workers."""
    name = f"PS S={r['servers']}" if r["impl"] == "ps" else "allreduce"
    w = r.get("workers", 2)
    return name if w == 2 else f"{name} W={w}"


def mb(x):
    return "-" if x is None else f"{x / 1e6:.1f}"


def ms(us):
    return "-" if us is None else f"{us / 1e3:.1f}"


def main():
    # Several files: a later record of the same job replaces an earlier one
    # (e.g. the training rows of a later `--train` run).
    merged = {}
    for path in sys.argv[1:]:
        for line in open(path):
            if line.strip():
                r = json.loads(line)
                merged[tuple(str(r.get(k)) for k in ("phase", "model", "impl", "servers", "run", "workers"))] = r
    recs = list(merged.values())
    link = next((r for r in recs if r.get("phase") == "link"), None)
    # Records before --workers existed ran 2 workers.
    workers = sorted({r.get("workers", 2) for r in recs if r.get("phase") != "link"}) or [2]
    nworkers = " / ".join(map(str, workers))
    if link:
        print(f"link: {link['rate']} tbf each way per node; measured {link['gbps']} Gbit/s worker 0 -> server 0")

    models = [r for r in recs if r.get("phase") == "model"]
    if models:
        print("\nPush-pull of every parameter tensor (one key each, PS) vs one allreduce of the same bytes,"
              f" {nworkers} workers")
        hdr = (f"{'model':9s} {'impl':14s} {'MB':>7s} {'time ms':>9s} {'algbw GB/s':>10s}"
               f" {'wire tx MB':>10s} {'wire rx MB':>10s} {'#wrong':>6s} {'AR/PS time':>10s}")
        print(hdr + "\n" + "-" * len(hdr))
        ar_time = {}
        for r in models:
            if r["impl"] == "allreduce":
                rows = collective_rows(r)
                if rows:
                    ar_time[(r["model"], r.get("workers", 2))] = next(iter(rows.values()))[0]
        for r in models:
            name = r["model"]
            if r["impl"] == "ps":
                res = (r.get("result") or {}).get("rows", [{}])[0] if r.get("result") else {}
                t = res.get("time_us")
                key = (name, r.get("workers", 2))
                ratio = f"{ar_time[key] / t:.2f}" if t and key in ar_time else "-"
                print(f"{name:9s} {impl_name(r):14s} {mb(res.get('bytes')):>7s} {ms(t):>9s}"
                      f" {res.get('algbw_gbps', 0):10.3f} {mb(res.get('tx_bytes')):>10s}"
                      f" {mb(res.get('rx_bytes')):>10s} {res.get('wrong', '-'):>6} {ratio:>10s}"
                      + ("" if r["rc"] == 0 else f"  FAILED rc {r['rc']}"))
            else:
                rows = collective_rows(r)
                t, bw, wrong = next(iter(rows.values())) if rows else (None, 0, "-")
                w = r.get("wire") or []
                ops = r.get("ops") or 1
                n = r.get("workers", 2)
                tx = sum(x[0] for x in w[:n]) / n / ops if len(w) >= n else None
                rx = sum(x[1] for x in w[:n]) / n / ops if len(w) >= n else None
                print(f"{name:9s} {impl_name(r):14s} {mb(r.get('bytes')):>7s} {ms(t):>9s} {bw:10.3f}"
                      f" {mb(tx):>10s} {mb(rx):>10s} {wrong:>6} {'1.00':>10s}"
                      + ("" if r["rc"] == 0 else f"  FAILED rc {r['rc']}"))
        print("wire: bytes one worker's eth0 sent/received per iteration (PS: measured around the timed"
              " iterations; allreduce: job total / allreduces run); AR/PS time > 1: PS faster")

    sweep = [r for r in recs if r.get("phase") == "sweep"]
    if sweep:
        cols, data = [], {}
        for r in sweep:
            if r["impl"] == "ps":
                name = impl_name(r)
                for row in (r.get("result") or {}).get("rows", []):
                    data.setdefault(row["bytes"], {})[name] = (row["time_us"], row["algbw_gbps"],
                                                                (row["tx_bytes"] + row["rx_bytes"]) / row["bytes"])
            else:
                name = impl_name(r)
                for b, (t, bw, _) in collective_rows(r).items():
                    data.setdefault(b, {})[name] = (t, bw, None)
            cols.append(name)
        print(f"\nSize sweep, {nworkers} workers: time per push-pull / in-place allreduce (us), algbw (GB/s),"
              " PS wire (tx+rx)/size per worker")
        hdr = f"{'bytes':>10s}" + "".join(f" | {c:>9s} {'us':>10s} {'GB/s':>6s} {'wire':>5s}" for c in cols)
        ar_cols = [c for c in cols if c.startswith("allreduce")]
        if ar_cols:
            hdr += "".join(f" | AR/{c.replace(' ', '')}" for c in cols if c not in ar_cols)
        print(hdr + "\n" + "-" * len(hdr))
        for b in sorted(data):
            line = f"{b:10d}"
            for c in cols:
                t, bw, wr = data[b].get(c, (None, None, None))
                line += (f" | {'':9s} {t:10.1f} {bw:6.3f} {'-' if wr is None else format(wr, '.2f'):>5s}"
                         if t is not None else f" | {'':9s} {'-':>10s} {'-':>6s} {'-':>5s}")
            if ar_cols:
                ar = data[b].get(ar_cols[0])
                for c in cols:
                    if c in ar_cols:
                        continue
                    ps = data[b].get(c)
                    line += f" | {ar[0] / ps[0]:8.2f}" if ar and ps else f" | {'-':>8s}"
            print(line)

    train = [r for r in recs if r.get("phase") == "train"]
    if train:
        print(f"\nTraining images/sec (dtrain bench train, synthetic data, {nworkers} workers)")
        base = {(r["model"], r.get("workers", 2)): (r.get("result") or {}).get("images_per_sec")
                for r in train if r["impl"] == "allreduce"}
        for r in train:
            ips = (r.get("result") or {}).get("images_per_sec")
            impl = impl_name(r)
            b = base.get((r["model"], r.get("workers", 2)))
            ratio = f"{ips / b:.2f}" if ips and b else "-"
            print(f"{r['model']:9s} {impl:14s} {('-' if ips is None else format(ips, '.1f')):>10s}"
                  f"  ratio to allreduce {ratio}" + ("" if r["rc"] == 0 else f"  FAILED rc {r['rc']}"))

    pl = [r for r in recs if r.get("phase") == "pslite"]
    if pl:
        print("\nps-lite's test_kv_app_benchmark (10,000,000 keys x 1 float: push 120 MB, pull 80 MB of keys"
              " + 40 MB of values) as worker 0, 1 server")
        by = {}
        for r in pl:
            if r["impl"] == "dtrain-kvstore":
                continue
            text = open(r["log"], errors="replace").read() if r.get("log") else ""
            push, pull = PUSH.search(text), PULL.search(text)
            w = r.get("wire") or [[0, 0]]
            by.setdefault(r["impl"], []).append((float(push.group(1)) if push else None,
                                                 float(pull.group(1)) if pull else None, w[0][0], w[0][1], r["rc"]))
        hdr = f"{'scheduler+server':16s} {'runs':>4s} {'push ms':>9s} {'pull ms':>9s} {'wire tx MB':>10s} {'wire rx MB':>10s}"
        print(hdr + "\n" + "-" * len(hdr))
        for impl, runs in by.items():
            ok = [x for x in runs if x[0] is not None and x[1] is not None and x[4] == 0]
            med = (lambda i: statistics.median(x[i] for x in ok)) if ok else (lambda i: None)
            print(f"{impl:16s} {len(ok):>2d}/{len(runs):<1d} {('-' if not ok else format(med(0), '.1f')):>9s}"
                  f" {('-' if not ok else format(med(1), '.1f')):>9s} {mb(med(2)):>10s} {mb(med(3)):>10s}")
        for r in pl:
            if r["impl"] == "dtrain-kvstore" and r.get("result"):
                row = r["result"]["rows"][0]
                print(f"dtrain bench kvstore, 1 key of {row['bytes']} bytes: pushpull {row['time_us'] / 1e3:.1f} ms,"
                      f" wire tx {mb(row['tx_bytes'])} MB rx {mb(row['rx_bytes'])} MB, #wrong {row['wrong']}")
        print("median over runs; wire: worker 0's eth0 over the whole program (start, push, pull, finalize)")


if __name__ == "__main__":
    main()
