#!/usr/bin/python3
"""PyTorch DDP peer of `dtrain train --model cnn --dataset fashion-mnist`.

Same CNN, same data, same normalisation, same per-process batch and optimiser
as dtrain's demo, with PyTorch 1.13 DistributedDataParallel over Gloo. Batches
are cut from in-memory tensors by index (no DataLoader worker processes), so
this is the fastest fair peer.

Start one process per rank with the torchrun environment set (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT; LOCAL_RANK optional), e.g.

  MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=0 \
      /usr/bin/python3 bench/peer/pytorch_ddp_train.py --epochs 3 &
  MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=1 \
      /usr/bin/python3 bench/peer/pytorch_ddp_train.py --epochs 3

Rank 0 prints one JSON object per epoch on stdout and, with --metrics-file,
writes the same lines to that file (truncated at start):
  {"epoch", "train_loss", "test_acc", "images_per_sec", "epoch_seconds",
   "world_size"}
"""

import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

FMNIST_MEAN = 0.2860
FMNIST_STD = 0.3530


from cnn import Net  # noqa: E402  (bench/peer/cnn.py, next to this script)


def read_idx_gz(path):
    """Reads a (gzipped) IDX file into a numpy array (uint8 payload)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = data[3]
    dims = np.frombuffer(data, dtype=">u4", count=ndim, offset=4).astype(np.int64)
    payload = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    expected = int(np.prod(dims))
    if payload.size != expected:
        raise ValueError(f"{path}: {payload.size} bytes of data, header says {expected}")
    return payload.reshape(tuple(dims))


def find_file(data_dir, stem):
    for suffix in (".gz", ""):
        p = os.path.join(data_dir, stem + suffix)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(
        f"{os.path.join(data_dir, stem)}[.gz] not found (Debian package: fashion-mnist)")


def load_split(data_dir, prefix):
    images = read_idx_gz(find_file(data_dir, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx_gz(find_file(data_dir, f"{prefix}-labels-idx1-ubyte"))
    x = torch.from_numpy(images.astype(np.float32)).div_(255.0)
    x = x.sub_(FMNIST_MEAN).div_(FMNIST_STD).unsqueeze_(1).contiguous()
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64, help="per process")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    p.add_argument("--metrics-file", default=None)
    p.add_argument("--eval-batch-size", type=int, default=1000)
    a = p.parse_args(argv)
    for name in ("epochs", "batch_size", "threads", "eval_batch_size"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    return a


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    dist.init_process_group("gloo")  # env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
    rank, world = dist.get_rank(), dist.get_world_size()

    metrics = None
    if rank == 0 and args.metrics_file:
        metrics = open(args.metrics_file, "w")

    x_train, y_train = load_split(args.data_dir, "train")
    x_test, y_test = load_split(args.data_dir, "t10k")

    model = DDP(Net())  # parameters broadcast from rank 0
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                          weight_decay=args.weight_decay)
    sampler = DistributedSampler(range(len(x_train)), num_replicas=world, rank=rank,
                                 shuffle=True, seed=args.seed, drop_last=False)
    # Test set split across ranks without padding: rank r takes r, r+W, ...
    test_idx = torch.arange(rank, len(x_test), world)

    for epoch in range(args.epochs):
        dist.barrier()
        t_epoch = time.perf_counter()
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)), dtype=torch.int64)

        model.train()
        loss_sum = 0.0
        seen = 0
        t_train = time.perf_counter()
        for start in range(0, len(idx), args.batch_size):
            b = idx[start:start + args.batch_size]
            xb = x_train.index_select(0, b)
            yb = y_train.index_select(0, b)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(b)
            seen += len(b)
        t_train = time.perf_counter() - t_train

        model.eval()
        correct = 0
        with torch.no_grad():
            net = model.module
            for start in range(0, len(test_idx), args.eval_batch_size):
                b = test_idx[start:start + args.eval_batch_size]
                pred = net(x_test.index_select(0, b)).argmax(1)
                correct += int((pred == y_test.index_select(0, b)).sum())

        # [loss_sum, seen, correct, tested] summed; training time: slowest rank.
        sums = torch.tensor([loss_sum, seen, correct, len(test_idx)], dtype=torch.float64)
        dist.all_reduce(sums)
        tmax = torch.tensor([t_train], dtype=torch.float64)
        dist.all_reduce(tmax, op=dist.ReduceOp.MAX)
        epoch_seconds = time.perf_counter() - t_epoch

        if rank == 0:
            rec = {
                "epoch": epoch + 1,
                "train_loss": round(sums[0].item() / sums[1].item(), 6),
                "test_acc": round(sums[2].item() / sums[3].item(), 6),
                "images_per_sec": round(sums[1].item() / tmax.item(), 2),
                "epoch_seconds": round(epoch_seconds, 4),
                "world_size": world,
            }
            line = json.dumps(rec)
            print(line, flush=True)
            if metrics:
                metrics.write(line + "\n")
                metrics.flush()

    if metrics:
        metrics.close()
    # Release DDP while the process group is alive (torch 1.13 can hang at
    # exit when the reducer outlives destroy_process_group()).
    del opt, model
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
