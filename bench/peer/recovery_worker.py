#!/usr/bin/python3
"""PyTorch peers of `dtrain train --model resnet18 --dataset synthetic` for
bench/recovery.sh: the same torchvision model, synthetic 3 x S x S inputs,
cross-entropy, SGD with momentum, one progress line per committed step.

  --mode ddp      plain DistributedDataParallel over Gloo, started by torchrun
                  (its variables); rank 0 writes a checkpoint (model,
                  optimizer, step) every --checkpoint-every steps and every
                  rank resumes from it at start, so torchrun --max-restarts
                  restarts the job from the last checkpoint.
  --mode torchft  torchft 0.2: one replica group of one process per worker
                  (REPLICA_GROUP_ID, TORCHFT_LIGHTHOUSE, MASTER_PORT of its own
                  store), torchft.Manager + torchft.DistributedDataParallel +
                  torchft.Optimizer on ProcessGroupGloo (5 s timeout, as in
                  torchft's train_ddp.py), the DDP comm hook mended so that a
                  failed allreduce does not raise (_torchft_comm_hook); a
                  replacement heals from a live replica (torchft's HTTP
                  checkpoint transport).

Rank/replica r's batch at step s is batch (s * W + r) of a fixed pool made
from --seed, so a resumed run reads the same batches. Rank 0 prints
"  epoch 1/1 step S/N  loss L  workers P" after each committed step (P: the
replicas that took part; the format of `dtrain train --progress-steps 1`, which
bench/recovery_report.py parses) and at the end "parameter sum X".
"""
import argparse
import os
import socket
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchrun_group import init_gloo_group  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ddp", "torchft"], default="ddp")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--pool", type=int, default=16, help="distinct batches per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--checkpoint-dir", default="")
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--world", type=int, default=0, help="torchft: replicas at start (W0)")
    return p.parse_args()


def make_pool(a, world):
    g = torch.Generator().manual_seed(a.seed)
    n = a.pool * world
    x = torch.randn(n, a.batch_size, 3, a.image_size, a.image_size, generator=g)
    y = torch.randint(0, a.num_classes, (n, a.batch_size), generator=g)
    return x, y


def param_sum(model):
    return sum(p.detach().double().sum().item() for p in model.parameters())


def progress(step, steps, loss, workers):
    print(f"  epoch 1/1 step {step}/{steps}  loss {loss:.6g}  workers {workers}", flush=True)


def run_ddp(a, model):
    init_gloo_group(timedelta(seconds=60))  # Note [torchrun 2.x agent store]
    rank, world = dist.get_rank(), dist.get_world_size()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    start = 0
    path = os.path.join(a.checkpoint_dir, "last.pt") if a.checkpoint_dir else ""
    if path:
        os.makedirs(a.checkpoint_dir, exist_ok=True)
    if path and os.path.exists(path):
        state = torch.load(path, map_location="cpu")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
        if rank == 0:
            print(f"resumed from the checkpoint of step {start}", flush=True)
    x, y = make_pool(a, world)
    for step in range(start, a.steps):
        i = (step * world + rank) % len(x)
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x[i]), y[i])
        loss.backward()
        opt.step()
        done = step + 1
        if rank == 0:
            progress(done, a.steps, loss.item(), world)
            if path and a.checkpoint_every and done % a.checkpoint_every == 0:
                tmp = path + ".tmp"
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "step": done}, tmp)
                os.replace(tmp, path)
    if rank == 0:
        print(f"parameter sum {param_sum(model):.17g}", flush=True)
    dist.destroy_process_group()


def _torchft_comm_hook(state, bucket):
    """torchft.DistributedDataParallel's hook, save that a failed allreduce
    gives the bucket back unreduced. torchft 0.2.0's own hook asserts that the
    work's future wraps another, which holds only while no allreduce of the
    step has failed: a failed one leaves the wrapped future empty (its
    _ManagedWork.wait has reported the error to the Manager), and once the
    Manager has an error allreduce returns a _DummyWork, whose future is a
    plain one. So every survivor of a peer's death raised in backward; with
    this hook should_commit() refuses that step and they go on, as torchft
    intends."""
    work = state.allreduce(bucket.buffer())
    work.wait()
    fut = work.get_future()
    if not hasattr(fut, "_fut"):
        return fut  # a _DummyWork's: the bucket, completed
    if fut._fut:
        return fut._fut
    done = torch.futures.Future()
    done.set_result(bucket.buffer())
    return done


def run_torchft(a, model):
    import torchft.ddp
    from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo

    torchft.ddp.DistributedDataParallel._comm_hook = staticmethod(_torchft_comm_hook)
    replica = int(os.environ["REPLICA_GROUP_ID"])
    world = a.world
    opt_inner = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)

    def state_dict():
        return {"model": model.state_dict(), "optimizer": opt_inner.state_dict()}

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        opt_inner.load_state_dict(sd["optimizer"])

    # The replica group's own store (one process per group: its rank 0). The
    # other replicas reach it at the address torchft advertises: the host
    # name (recovery.sh --netns gives each node its own; else it resolves to
    # the loopback).
    host = socket.gethostname()
    store = dist.TCPStore(host, int(os.environ["MASTER_PORT"]), is_master=True,
                          wait_for_workers=False)
    # the Gloo timeout of torchft's train_ddp.py on the CPU
    manager = Manager(pg=ProcessGroupGloo(timeout=timedelta(seconds=5)),
                      load_state_dict=load_state_dict, state_dict=state_dict,
                      min_replica_size=1, replica_id=f"replica{replica}",
                      store_addr=host, store_port=store.port, rank=0, world_size=1,
                      timeout=timedelta(seconds=10), quorum_timeout=timedelta(seconds=20))
    ddp = DistributedDataParallel(manager, model)
    opt = Optimizer(manager, opt_inner)
    x, y = make_pool(a, world)
    while manager.current_step() < a.steps:
        step = manager.current_step()
        i = (step * world + replica) % len(x)
        opt.zero_grad()  # starts the quorum
        loss = F.cross_entropy(ddp(x[i]), y[i])
        loss.backward()
        participants = manager.num_participants()
        opt.step()  # steps the optimizer when should_commit() agrees
        if manager.current_step() > step and replica == 0:
            progress(manager.current_step(), a.steps, loss.item(), participants)
    if replica == 0:
        print(f"parameter sum {param_sum(model):.17g}", flush=True)
    manager.shutdown(wait=False)


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    import torchvision

    torch.manual_seed(a.seed)
    model = torchvision.models.resnet18(num_classes=a.num_classes)
    (run_torchft if a.mode == "torchft" else run_ddp)(a, model)


if __name__ == "__main__":
    sys.exit(main())
