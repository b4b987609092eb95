#!/usr/bin/python3
"""PyTorch twin of bench/elastic/elastic_worker.cpp (recovery-time benchmark,
issue 4 (a)), run under torchrun with --max_restarts:

  torchrun --nproc_per_node 2 --max_restarts 3 ... elastic_worker.py DIR
      [--steps N] [--checkpoint-every K] [--batch-size B] [--batches M]
      [--seed S] [--threads T]

 * writes its pid to DIR/pid.<restart>.<rank> (temp file + rename) first;
 * the Gloo group from the torchrun environment (torchrun_group.py), the demo CNN
   (bench/peer/cnn.py) in DistributedDataParallel, SGD (lr 0.01, momentum 0.9);
 * resumes from DIR/ckpt.pt (model, optimizer, step) when it exists; rank 0
   writes it every K steps with torch.save to a temp file + os.replace;
 * trains on M synthetic in-memory batches of B (seeded per rank), cycling,
   for N steps in all (0: until killed).

stdout, one line each, flushed (CLOCK_REALTIME ns, comparable with
`date +%s%N`):
  START <restart> <rank> <ns> <spawn ns>
                                       first thing, before `import torch`;
                                       <spawn ns>: when the process was forked
                                       (/proc/self/stat, 10 ms ticks)
  READY <restart> <rank> <ns>          group formed, checkpoint loaded, DDP built
  STEP <restart> <rank> <step> <ns>    after every completed optimizer step
"""

import os
import sys
import time



def spawn_realtime_ns():
    """When this process was forked, as CLOCK_REALTIME ns (the start time in
    /proc/self/stat counts clock ticks since boot)."""
    with open("/proc/self/stat") as f:
        stat = f.read()
    ticks = int(stat[stat.rindex(")") + 2:].split()[22 - 3])
    start_ns = ticks * (1_000_000_000 // os.sysconf("SC_CLK_TCK"))
    return time.time_ns() - (time.clock_gettime_ns(time.CLOCK_BOOTTIME) - start_ns)


RESTART = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
ENV_RANK = int(os.environ.get("RANK", "0") or 0)
print(f"START {RESTART} {ENV_RANK} {time.time_ns()} {spawn_realtime_ns()}", flush=True)

import argparse  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cnn import Net  # noqa: E402
from torchrun_group import init_gloo_group  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir")
    p.add_argument("--steps", type=int, default=0, help="0: until killed")
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--batches", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    if a.steps < 0 or min(a.checkpoint_every, a.batch_size, a.batches, a.threads) <= 0:
        p.error("--steps must be >= 0; the other numbers positive")
    return a


def write_atomically(path, text):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text + "\n")
    os.replace(tmp, path)


def main(argv=None):
    a = parse_args(argv)
    write_atomically(os.path.join(a.dir, f"pid.{RESTART}.{ENV_RANK}"), str(os.getpid()))

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    init_gloo_group()  # Note [torchrun 2.x agent store] in torchrun_group.py
    rank = dist.get_rank()

    net = Net(10)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    ckpt = os.path.join(a.dir, "ckpt.pt")
    step = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        step = int(state["step"])
    model = DDP(net)

    g = torch.Generator().manual_seed(a.seed + 1000 + rank)
    xs = [torch.randn((a.batch_size, 1, 28, 28), generator=g) for _ in range(a.batches)]
    ys = [torch.randint(0, 10, (a.batch_size,), generator=g) for _ in range(a.batches)]
    print(f"READY {RESTART} {rank} {time.time_ns()}", flush=True)

    while a.steps == 0 or step < a.steps:
        x, y = xs[step % a.batches], ys[step % a.batches]
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        step += 1
        print(f"STEP {RESTART} {rank} {step} {time.time_ns()}", flush=True)
        if rank == 0 and step % a.checkpoint_every == 0:
            tmp = ckpt + ".tmp"
            torch.save({"model": net.state_dict(), "optim": opt.state_dict(), "step": step}, tmp)
            os.replace(tmp, ckpt)

    del model, opt  # release DDP's reducer while the group is alive (1.13 can hang otherwise)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
