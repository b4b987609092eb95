#!/usr/bin/python3
"""PyTorch DDP step benchmark (the peer of `dtrain bench ddp`).

Synthetic data, one fixed batch per rank, SGD with momentum, Gloo. Measures
without a profiler (see bench/README.md, "Hidden communication"):

  step_ms             mean wall time of a DDP training step (zero_grad, forward,
                      loss, backward, optimizer step)
  images_per_sec      world_size * batch_size / (step_ms / 1000)
  forward_ms, backward_ms, optimizer_ms
                      the same step's phases, timed with perf_counter (CPU:
                      synchronous); backward_ms includes whatever allreduce
                      wait DDP does at the end of backward
  step_nosync_ms      mean step time under DDP.no_sync() (no gradient
                      communication at all; a barrier ends backward so ranks
                      stay in lock-step as under DDP), steps interleaved with
                      the DDP steps in blocks so that machine noise hits both
  backward_compute_ms backward time under no_sync (compute + the barrier)
  allreduce_ms        standalone allreduce of all gradients, bucketed exactly as
                      DDP buckets them (sizes from DDP's logging data), all
                      buckets launched asynchronously back to back, then waited
  broadcast_ms        standalone broadcast of the module buffers (0 if none or
                      --no-broadcast-buffers)
  comm_ms             allreduce_ms + broadcast_ms: the step's communication
  exposed_comm_ms     max(0, step_p50_ms - step_nosync_p50_ms) (medians of
                      the per-step times, robust to outliers on a shared machine)
  hidden_fraction     clamp(1 - exposed_comm_ms / comm_ms, 0, 1)
  wire_tx_bytes_per_step, wire_rx_bytes_per_step
                      bytes this network namespace sent / received per DDP
                      step (/proc/net/dev, every interface but lo, read around
                      the blocks of DDP steps only; 0 on loopback, -1 without
                      /proc/net/dev), as `dtrain bench ddp` reads them

--comm-hook registers one of torch.distributed.algorithms.ddp_comm_hooks on
DDP (allreduce: none registered, DDP's built-in allreduce; noop:
debugging_hooks.noop_hook, no communication at all; fp16 / bf16:
default_hooks.fp16_compress_hook / bf16_compress_hook; powersgd:
powerSGD_hook.powerSGD_hook with PowerSGDState(matrix_approximation_rank=
--powersgd-rank, start_powerSGD_iter=--powersgd-start-iter), its other
arguments at their defaults; each bucket's hook waits for the previous
bucket's reduction unless --powersgd-unordered: see in_bucket_order). The
hook runs in the DDP steps only (no_sync steps call no hook, so PowerSGD's
iteration count sees DDP steps alone, the warm-up ones first); allreduce_ms
stays the standalone uncompressed allreduce.

Each time is the mean over --steps measured steps per rank, then averaged over
ranks. Start one process per rank with RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT set (or under torchrun). Rank 0 prints one JSON line on stdout and
a human summary on stderr.
"""

import argparse
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


from cnn import Net  # noqa: E402  (bench/peer/cnn.py, next to this script)

MODELS = ["cnn", "resnet18", "vgg16"]
HOOKS = ["allreduce", "noop", "fp16", "bf16", "powersgd"]


def build_model(name):
    if name == "cnn":
        return Net(10), (1, 28, 28)
    if name in ("resnet18", "vgg16"):
        import torchvision
        return getattr(torchvision.models, name)(num_classes=10), None
    raise ValueError(f"unknown model {name!r}; valid: {', '.join(MODELS)}")


def interface_bytes():
    """(tx, rx) bytes of every interface but lo in this network namespace, from
    /proc/net/dev (what `dtrain bench ddp` reads); None where it cannot be read."""
    try:
        with open("/proc/net/dev") as f:
            lines = f.read().splitlines()[2:]
    except OSError:
        return None
    tx = rx = 0
    for line in lines:
        name, _, fields = line.partition(":")
        v = fields.split()
        if name.strip() == "lo" or len(v) < 9:
            continue
        rx += int(v[0])
        tx += int(v[8])
    return tx, rx


def register_hook(model, args):
    """Registers --comm-hook on the DDP model; returns the PowerSGD state (or None)."""
    from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks, default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
    if args.comm_hook == "noop":
        model.register_comm_hook(None, debugging_hooks.noop_hook)
    elif args.comm_hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.comm_hook == "bf16":
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif args.comm_hook == "powersgd":
        state = powerSGD.PowerSGDState(process_group=None,
                                       matrix_approximation_rank=args.powersgd_rank,
                                       start_powerSGD_iter=args.powersgd_start_iter)
        hook = powerSGD.powerSGD_hook
        if not args.powersgd_unordered:
            hook = in_bucket_order(hook)
        model.register_comm_hook(state, hook)
        return state
    return None


def in_bucket_order(hook):
    """The hook, run for bucket b only once bucket b-1's reduction finished.

    powerSGD_hook issues a bucket's P and Q allreduces from future callbacks
    (on the thread that completed the previous stage), while DDP issues the
    next bucket's first allreduce from the autograd thread: the two ranks can
    issue them in different orders, which Gloo (collectives matched by issue
    order) answers with "Received data size doesn't match expected size" or a
    hang (seen here with VGG-16's 5 buckets). Waiting on the autograd thread
    for the previous bucket keeps every rank's order the same; bucket b-1's
    communication still overlaps bucket b's backward compute."""
    last = [None]

    def ordered(state, bucket):
        if bucket.index() > 0 and last[0] is not None:
            last[0].wait()
        fut = hook(state, bucket)
        last[0] = None if bucket.is_last() else fut
        return fut

    return ordered


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="cnn", choices=MODELS)
    p.add_argument("--batch-size", type=int, default=64, help="per process")
    p.add_argument("--image-size", type=int, default=32,
                   help="resnet18/vgg16 input side (3xSxS); cnn is always 1x28x28")
    p.add_argument("--steps", type=int, default=20, help="measured steps per mode")
    p.add_argument("--warmup", type=int, default=3, help="unmeasured steps per mode")
    p.add_argument("--block", type=int, default=5,
                   help="DDP and no_sync steps alternate in blocks of this many")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--no-broadcast-buffers", action="store_true")
    p.add_argument("--find-unused-parameters", action="store_true")
    p.add_argument("--comm-hook", default="allreduce", choices=HOOKS,
                   help="DDP comm hook (allreduce: DDP's built-in, no hook registered)")
    p.add_argument("--powersgd-rank", type=int, default=1,
                   help="PowerSGDState(matrix_approximation_rank=...)")
    p.add_argument("--powersgd-start-iter", type=int, default=1000,
                   help="PowerSGDState(start_powerSGD_iter=...): DDP steps of plain allreduce "
                        "first; >= 2 (error feedback and warm start are on)")
    p.add_argument("--powersgd-unordered", action="store_true",
                   help="register powerSGD_hook as is, without waiting for the previous "
                        "bucket (can abort or hang on Gloo with several buckets: in_bucket_order)")
    p.add_argument("--no-nosync-barrier", action="store_true",
                   help="do not end no_sync backward with a barrier")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    for name in ("batch_size", "image_size", "steps", "block", "threads"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    if a.comm_hook == "powersgd":
        if a.powersgd_rank < 1:
            p.error("--powersgd-rank must be at least 1")
        if a.powersgd_start_iter < 2:
            p.error("--powersgd-start-iter must be at least 2 (PowerSGDState refuses less "
                    "with error feedback or warm start)")
    return a


class StepTimer:
    """Runs training steps and records per-phase wall times (ms). With
    sync_after_backward, a barrier ends backward so that steps without DDP
    communication stay in lock-step across ranks like DDP steps do (otherwise
    waiting for a slower rank would be counted as exposed communication)."""

    def __init__(self, model, opt, x, y, sync_after_backward=False):
        self.model, self.opt, self.x, self.y = model, opt, x, y
        self.sync = sync_after_backward
        self.rec = {"step": [], "forward": [], "backward": [], "optimizer": []}

    def step(self, record):
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=False)
        out = self.model(self.x)
        loss = F.cross_entropy(out, self.y)
        t1 = time.perf_counter()
        loss.backward()
        if self.sync:
            dist.barrier()
        t2 = time.perf_counter()
        self.opt.step()
        t3 = time.perf_counter()
        if record:
            self.rec["step"].append((t3 - t0) * 1e3)
            self.rec["forward"].append((t1 - t0) * 1e3)
            self.rec["backward"].append((t2 - t1) * 1e3)
            self.rec["optimizer"].append((t3 - t2) * 1e3)


def ddp_bucket_bytes(model, params, cap_bytes):
    """Bucket sizes (bytes) DDP actually uses, from its logging data; falls
    back to DDP's rule (reverse order, 1 MiB first bucket, then the cap)."""
    total = sum(p.numel() * p.element_size() for p in params)
    try:
        data = model._get_ddp_logging_data()
        # 1.13 starts with one bucket and rebuilds them in gradient-ready order
        # after the first iteration; the rebuilt sizes are the ones in use.
        for key in ("rebuilt_bucket_sizes", "bucket_sizes"):
            sizes = [int(v) for v in str(data.get(key, "")).split(",") if v.strip()]
            if sizes and sum(sizes) == total:
                return sizes, "ddp_logging_data:" + key
    except Exception:  # private API; fall back below
        pass
    sizes, cur, limit = [], 0, 1 << 20
    for p in reversed(params):
        cur += p.numel() * p.element_size()
        if cur >= limit:
            sizes.append(cur)
            cur, limit = 0, cap_bytes
    if cur:
        sizes.append(cur)
    return sizes, "computed"


def time_comm(bucket_bytes, buffers, reps, warmup):
    """Mean ms of (async allreduce of every bucket, then wait all) and of the
    buffer broadcast, each after a barrier."""
    flats = [torch.zeros(b // 4, dtype=torch.float32) for b in bucket_bytes]
    ar, bc = [], []
    for i in range(warmup + reps):
        dist.barrier()
        t0 = time.perf_counter()
        works = [dist.all_reduce(f, async_op=True) for f in flats]
        for w in works:
            w.wait()
        t1 = time.perf_counter()
        if i >= warmup:
            ar.append((t1 - t0) * 1e3)
        if buffers:
            dist.barrier()
            t0 = time.perf_counter()
            # DDP coalesces buffers into one flat broadcast per bucket; all
            # ResNet-18 buffers fit in one.
            flat = torch.cat([b.detach().reshape(-1).double() for b in buffers])
            dist.broadcast(flat, 0)
            t1 = time.perf_counter()
            if i >= warmup:
                bc.append((t1 - t0) * 1e3)
    return statistics.mean(ar), (statistics.mean(bc) if bc else 0.0)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    net, shape = build_model(args.model)
    if shape is None:
        shape = (3, args.image_size, args.image_size)
    model = DDP(net, bucket_cap_mb=args.bucket_cap_mb,
                broadcast_buffers=not args.no_broadcast_buffers,
                find_unused_parameters=args.find_unused_parameters)
    psgd_state = register_hook(model, args)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    g = torch.Generator().manual_seed(args.seed + rank)
    x = torch.randn((args.batch_size,) + tuple(shape), generator=g)
    y = torch.randint(0, 10, (args.batch_size,), generator=g)

    ddp_t = StepTimer(model, opt, x, y)
    nos_t = StepTimer(model, opt, x, y, sync_after_backward=not args.no_nosync_barrier)

    def nosync_step(record):
        with model.no_sync():
            nos_t.step(record)

    # Warm-up: DDP first (buckets are rebuilt after the first DDP iteration).
    for _ in range(args.warmup):
        ddp_t.step(False)
    for _ in range(args.warmup):
        nosync_step(False)
    done = 0
    wire = [0, 0]  # tx, rx bytes of the DDP steps alone; None: no /proc/net/dev
    while done < args.steps:
        n = min(args.block, args.steps - done)
        dist.barrier()
        before = interface_bytes()
        for _ in range(n):
            ddp_t.step(True)
        after = interface_bytes()
        if before is None or after is None:
            wire = None
        elif wire is not None:
            wire = [wire[0] + after[0] - before[0], wire[1] + after[1] - before[1]]
        dist.barrier()
        for _ in range(n):
            nosync_step(True)
        done += n
    dist.barrier()

    params = [p for p in model.parameters() if p.requires_grad]
    grad_bytes = sum(p.numel() * p.element_size() for p in params)
    buckets, bucket_src = ddp_bucket_bytes(model, params, int(args.bucket_cap_mb * (1 << 20)))
    buffers = [] if args.no_broadcast_buffers else [b for b in model.module.buffers()]
    allreduce_ms, broadcast_ms = time_comm(buckets, buffers, reps=max(5, args.steps // 2),
                                           warmup=2)

    # DDP's own runtime statistics (sampled iterations, ns) as a cross-check.
    try:
        data = model._get_ddp_logging_data()
        ddp_comm = data.get("avg_backward_comm_time", 0) / 1e6
        ddp_overlap = data.get("avg_backward_compute_comm_overlap_time", 0) / 1e6
    except Exception:
        ddp_comm = ddp_overlap = 0.0

    med = statistics.median
    local = [
        statistics.mean(ddp_t.rec["step"]),
        med(ddp_t.rec["step"]),
        statistics.mean(ddp_t.rec["forward"]),
        statistics.mean(ddp_t.rec["backward"]),
        statistics.mean(ddp_t.rec["optimizer"]),
        statistics.mean(nos_t.rec["step"]),
        med(nos_t.rec["step"]),
        statistics.mean(nos_t.rec["forward"]),
        statistics.mean(nos_t.rec["backward"]),
        statistics.mean(nos_t.rec["optimizer"]),
        allreduce_ms,
        broadcast_ms,
        ddp_comm,
        ddp_overlap,
        wire[0] / args.steps if wire is not None else -1e30,
        wire[1] / args.steps if wire is not None else -1e30,
    ]
    t = torch.tensor(local, dtype=torch.float64)
    dist.all_reduce(t)
    (step_ms, step_p50_ms, fwd_ms, bwd_ms, opt_ms, ns_step_ms, ns_step_p50_ms, ns_fwd_ms,
     ns_bwd_ms, ns_opt_ms, allreduce_ms, broadcast_ms, ddp_comm, ddp_overlap,
     wire_tx, wire_rx) = (t / world).tolist()
    # A rank without counters makes the mean negative: then none is reported.
    wire_tx, wire_rx = (-1, -1) if wire_tx < 0 else (wire_tx, wire_rx)

    comm_ms = allreduce_ms + broadcast_ms
    # Medians: robust to spikes from other load on a shared machine.
    exposed = max(0.0, step_p50_ms - ns_step_p50_ms)
    hidden = min(1.0, max(0.0, 1.0 - exposed / comm_ms)) if comm_ms > 0 else 1.0

    if rank == 0:
        r = lambda v: round(v, 3)  # noqa: E731
        rec = {
            "impl": "pytorch",
            "torch": torch.__version__,
            "backend": dist.get_backend(),
            "model": args.model,
            "world_size": world,
            "batch_size": args.batch_size,
            "image_size": shape[-1],
            "threads": args.threads,
            "bucket_cap_mb": args.bucket_cap_mb,
            "find_unused_parameters": args.find_unused_parameters,
            "comm_hook": args.comm_hook,
            "steps": args.steps,
            "warmup": args.warmup,
            "step_ms": r(step_ms),
            "step_p50_ms": r(step_p50_ms),
            "images_per_sec": r(world * args.batch_size / (step_ms / 1e3)),
            "forward_ms": r(fwd_ms),
            "backward_ms": r(bwd_ms),
            "optimizer_ms": r(opt_ms),
            "step_nosync_ms": r(ns_step_ms),
            "step_nosync_p50_ms": r(ns_step_p50_ms),
            "forward_nosync_ms": r(ns_fwd_ms),
            "backward_compute_ms": r(ns_bwd_ms),
            "optimizer_nosync_ms": r(ns_opt_ms),
            "allreduce_ms": r(allreduce_ms),
            "broadcast_ms": r(broadcast_ms),
            "comm_ms": r(comm_ms),
            "exposed_comm_ms": r(exposed),
            "hidden_fraction": round(hidden, 4),
            "wire_tx_bytes_per_step": r(wire_tx),
            "wire_rx_bytes_per_step": r(wire_rx),
            "ddp_stats_backward_comm_ms": r(ddp_comm),
            "ddp_stats_overlap_ms": r(ddp_overlap),
            "grad_bytes": grad_bytes,
            "num_buckets": len(buckets),
            "bucket_bytes": buckets,
            "bucket_source": bucket_src,
        }
        if psgd_state is not None:
            rec["powersgd_rank"] = args.powersgd_rank
            rec["powersgd_start_iter"] = args.powersgd_start_iter
            rec["powersgd_in_bucket_order"] = not args.powersgd_unordered
            rec["powersgd_iterations"] = psgd_state.iter
            rec["powersgd_compression_rate"] = round(float(psgd_state.compression_stats()[0]), 3)
        print(json.dumps(rec), flush=True)
        print(f"[pytorch {args.model} {args.comm_hook} bs={args.batch_size} ws={world}] "
              f"step {step_ms:.1f} ms "
              f"({rec['images_per_sec']:.0f} img/s), no_sync step {ns_step_ms:.1f} ms, "
              f"fwd {fwd_ms:.1f} / bwd {bwd_ms:.1f} (compute {ns_bwd_ms:.1f}) / opt {opt_ms:.1f} ms, "
              f"comm {comm_ms:.1f} ms ({len(buckets)} buckets, {grad_bytes / 1e6:.1f} MB), "
              f"exposed {exposed:.1f} ms, hidden {hidden:.0%}", file=sys.stderr, flush=True)

    # Release DDP (its reducer) while the process group is alive: destroying
    # it after destroy_process_group() can hang at exit in torch 1.13.
    del ddp_t, nos_t, nosync_step, opt, model, psgd_state
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
