#!/usr/bin/python3
"""Helpers of bench/recovery.sh (standard library only).

  recovery_report.py stamp                  copy stdin to stdout, each line
                                            prefixed with its arrival time
                                            (CLOCK_REALTIME, ns) and a space
  recovery_report.py case LOG JSON          one case's figures from its stamped
                                            log and its facts (a JSON object:
                                            name, impl, fault, fault_ns,
                                            start_ns, end_ns, steps, world,
                                            batch, fixed_batch, ...); prints a
                                            JSON line
  recovery_report.py table RESULTS.jsonl    the Markdown tables of docs/benchmarks.md
  recovery_report.py pids TAG [VAR=VALUE] [WORD]
                                            pids of the processes whose environment
                                            holds RECOVERY_BENCH_TAG=TAG (and
                                            VAR=VALUE; command line holding WORD)

Committed steps are the progress lines "epoch E/N step S/T ... workers P"
that rank 0 prints after each optimizer step (`dtrain train --progress-steps
1`, bench/peer/recovery_worker.py). Around a fault at time F:

  last     the highest step committed before F
  next     the first line after F of a step above `last`: the next committed
           step; fault to next commit = its time - F
  beyond   fault to next commit - the median step time before F (the time the
           redone step itself takes)
  redone   committed steps computed again: last - (lowest step after F) + 1
  lost     samples of committed steps that no worker computed: sum over the
           steps after F of (W0 - P) x batch where the global batch shrinks
           with the workers (torchft); 0 where it is fixed (dtrain's logical
           ranks, a whole-job restart), checked for dtrain live by comparing
           the final parameter sum with the no-fault run's
"""
import json
import re
import statistics
import sys

STEP = re.compile(r"epoch \d+/\d+ step (\d+)/(\d+)\s.*?(?:workers (\d+))?\s*$")
PSUM = re.compile(r"parameter sum (\S+)")
LIVE = re.compile(r"live recovery: (generation \d+ at step \d+: lost .*)$")
JOIN = re.compile(r"live recovery: (generation \d+ at step \d+: joined .*)$")


def stamp():
    out = sys.stdout.buffer
    import time
    for line in sys.stdin.buffer:
        out.write(b"%d " % time.time_ns() + line)
        out.flush()


def read(log):
    rows = []
    for raw in open(log, encoding="utf-8", errors="replace"):
        ns, _, text = raw.rstrip("\n").partition(" ")
        if ns.isdigit():
            rows.append((int(ns), text))
    return rows


def median_step(steps, upto_ns, skip=5):
    """Median time between consecutive committed steps (after the first
    `skip`), before upto_ns."""
    d = [b[0] - a[0] for a, b in zip(steps, steps[1:])
         if b[1] == a[1] + 1 and a[1] > skip and b[0] <= upto_ns]
    return statistics.median(d) / 1e9 if d else None


def case(log, facts):
    f = json.loads(facts)
    rows = read(log)
    steps = []
    for ns, text in rows:
        m = STEP.search(text)
        if m:
            steps.append((ns, int(m.group(1)), int(m.group(3)) if m.group(3) else None))
    r = dict(f)
    r["committed_lines"] = len(steps)
    r["last_step"] = max((s for _, s, _ in steps), default=None)
    sums = [float(m.group(1)) for _, t in rows for m in [PSUM.search(t)] if m]
    r["param_sum"] = sums[0] if sums else None
    r["wall_s"] = (f["end_ns"] - f["start_ns"]) / 1e9
    fault = f.get("fault_ns")
    if not fault:  # steady state: steps/s over the steps after the warm-up
        warm = [s for s in steps if s[1] > f.get("warmup", 10)]
        if len(warm) >= 2:
            r["steps_per_s"] = (len(warm) - 1) / ((warm[-1][0] - warm[0][0]) / 1e9)
            r["step_s"] = median_step(steps, warm[-1][0], f.get("warmup", 10))
        print(json.dumps(r))
        return
    before = [s for s in steps if s[0] < fault]
    after = [s for s in steps if s[0] >= fault]
    r["step_s"] = median_step(steps, fault)
    r["last"] = before[-1][1] if before else 0
    nxt = next((s for s in after if s[1] > r["last"]), None)
    if nxt:
        r["next"] = nxt[1]
        r["to_next_s"] = (nxt[0] - fault) / 1e9
        if r["step_s"]:
            r["beyond_s"] = r["to_next_s"] - r["step_s"]
    if after:
        r["redone"] = max(0, r["last"] - min(s[1] for s in after) + 1)
        r["samples_redone"] = r["redone"] * f["world"] * f["batch"]
    if f.get("fixed_batch"):
        r["lost"] = 0
    else:  # each committed step after the fault counted once, at its last line
        by_step = {}
        for _, s, p in after:
            by_step[s] = p if p is not None else f["world"]
        r["lost"] = sum((f["world"] - p) * f["batch"] for s, p in by_step.items()
                        if s > r["last"])
    live = [(ns, m.group(1)) for ns, t in rows if ns >= fault for m in [LIVE.search(t)] if m]
    if live:
        r["live_line"] = live[0][1]
        r["new_group_s"] = (live[0][0] - fault) / 1e9
    # a replacement joining: how long the others paused, beyond one step
    join = [(ns, m.group(1)) for ns, t in rows if ns >= fault for m in [JOIN.search(t)] if m]
    if join and r["step_s"]:
        t = join[0][0]
        prev = max((s[0] for s in steps if s[0] < t), default=None)
        nxt_j = min((s[0] for s in steps if s[0] > t), default=None)
        if prev and nxt_j:
            r["join_line"] = join[0][1]
            r["join_pause_s"] = (nxt_j - prev) / 1e9 - r["step_s"]
    print(json.dumps(r))


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def med(rows, key):
    v = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(v) if v else None


def span(rows, key, spec=".2f"):
    v = sorted(r[key] for r in rows if r.get(key) is not None)
    if not v:
        return "-"
    if len(v) == 1:
        return format(v[0], spec)
    return f"{format(statistics.median(v), spec)} ({format(v[0], spec)}–{format(v[-1], spec)})"


LABEL = {
    "live-kill": "dtrain `--recovery live`, SIGKILL",
    "restart-kill": "dtrain `--recovery restart` (last checkpoint), SIGKILL",
    "torchrun-kill": "torchrun 2.11 `--max-restarts`, plain DDP (last checkpoint), SIGKILL",
    "torchft-kill": "torchft 0.2 (Manager + DDP on Gloo), SIGKILL",
    "live-kill-noreplace": "dtrain `--recovery live --max-restarts 0` (no replacement), SIGKILL",
    "live-stop": "dtrain `--recovery live`, SIGSTOP (hang)",
    "live-cut": "dtrain `--recovery live`, node 1's link cut (2 workers lost)",
}


def table(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    by = {}
    for r in rows:
        by.setdefault(r["name"], []).append(r)
    faults = [n for n in LABEL if n in by]
    if faults:
        print("| case | runs | step time before (s) | fault → new group (s) "
              "| fault → next committed step (s) | beyond one step (s) | steps redone "
              "| samples redone | samples lost | final weights = no-fault run |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for n in faults:
            g = by[n]
            ref_name = "live-nofault" if n.startswith("live-") else None
            ref = by.get(ref_name, [])
            same = "n/a"
            if ref and ref[0].get("param_sum") is not None:
                ps = ref[0]["param_sum"]
                rel = [abs(r["param_sum"] - ps) / max(1e-12, abs(ps)) for r in g
                       if r.get("param_sum") is not None]
                same = (f"yes (rel. diff {max(rel):.1e})" if rel and max(rel) < 1e-4
                        else f"no (rel. diff {max(rel):.1e})" if rel else "-")
            ok = sum(1 for r in g if r.get("to_next_s") is not None)
            print(f"| {LABEL[n]} | {ok}/{len(g)} | {span(g, 'step_s')} | {span(g, 'new_group_s')} "
                  f"| {span(g, 'to_next_s')} | {span(g, 'beyond_s')} | {span(g, 'redone', '.0f')} "
                  f"| {span(g, 'samples_redone', '.0f')} | {span(g, 'lost', '.0f')} | {same} |")
        print()
        for n in faults:
            for r in by[n]:
                if r.get("live_line"):
                    print(f"- {n}: `{r['live_line']}` ({r['new_group_s']:.2f} s after the fault)")
                if r.get("join_line"):
                    print(f"- {n}: `{r['join_line']}` (the others paused "
                          f"{r['join_pause_s']:.2f} s beyond one step)")
        print()
    plain, live = by.get("plain-nofault", []), by.get("live-nofault", [])
    if plain and live:
        p, lv = med(plain, "steps_per_s"), med(live, "steps_per_s")
        print("| no fault | runs | steps/s | median step (s) | wall (s) |")
        print("|---|---|---|---|---|")
        print(f"| dtrain, plain DDP (`--recovery restart`, no checkpoints) | {len(plain)} "
              f"| {span(plain, 'steps_per_s', '.3f')} | {span(plain, 'step_s', '.3f')} "
              f"| {span(plain, 'wall_s', '.1f')} |")
        print(f"| dtrain `--recovery live` | {len(live)} | {span(live, 'steps_per_s', '.3f')} "
              f"| {span(live, 'step_s', '.3f')} | {span(live, 'wall_s', '.1f')} |")
        if p and lv:
            print()
            print(f"Steady-state cost of live mode: steps/s live / plain = {lv / p:.3f} "
                  f"(overhead {100 * (p / lv - 1):+.1f}% step time)")
        rounds = sorted({r.get("round") for r in plain + live})
        if len(rounds) > 1:
            per = []
            for k in rounds:
                a = [r["steps_per_s"] for r in plain if r.get("round") == k and "steps_per_s" in r]
                b = [r["steps_per_s"] for r in live if r.get("round") == k and "steps_per_s" in r]
                if a and b:
                    per.append(f"{b[0] / a[0]:.3f}")
            print(f"(per round: {', '.join(per)})")


def pids(tag, var=None, word=None):
    import os
    want = [f"RECOVERY_BENCH_TAG={tag}".encode()] + ([var.encode()] if var else [])
    for p in sorted((d for d in os.listdir("/proc") if d.isdigit()), key=int):
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if all(w in env for w in want) and (not word or word.encode() in cmd):
            print(p)


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "stamp":
        stamp()
    elif cmd == "case" and len(sys.argv) == 4:
        case(sys.argv[2], sys.argv[3])
    elif cmd == "pids" and 3 <= len(sys.argv) <= 5:
        pids(*sys.argv[2:])
    elif cmd == "table" and len(sys.argv) == 3:
        table(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
