#!/usr/bin/env python3
"""The peer of bench/s3/s3_vs_s3torchconnector.sh: AWS's s3torchconnector
(S3MapDataset or S3IterableDataset over its CRT client) with torchvision's
transforms of dtrain's training pipeline (RandomResizedCrop(224),
RandomHorizontalFlip, ToTensor, Normalize) in a DataLoader, reading an
ImageFolder layout (PREFIX<class>/<file>.JPEG) from an S3 endpoint.

Prints one line: images, seconds, images/sec, the CPU seconds of this process
and its DataLoader workers over the timed epochs, and the bytes read.
--raw reads each object's bytes and decodes nothing (the client's own cost)."""
import argparse
import io
import os
import time

import torch
import torchvision.transforms as T
from PIL import Image
from s3torchconnector import S3ClientConfig, S3IterableDataset, S3MapDataset

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds():
    """utime + stime of this process and of its live and reaped children."""
    pids = [os.getpid()]
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            pass
    total = 0.0
    for pid in set(pids):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
        except OSError:
            pass
    r = os.times()
    return total + r.children_user + r.children_system


def main():
    p = argparse.ArgumentParser()
    p.add_argument("prefix", help="s3://bucket/prefix/ of the ImageFolder's classes")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--dataset", choices=["map", "iterable"], default="map")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--raw", action="store_true", help="read bytes only, decode nothing")
    args = p.parse_args()
    torch.set_num_threads(1)
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])

    def label(key):  # class folders n00000000, n00000001, ... (bench/loader/make_jpegs.py)
        return int(key.rsplit("/", 2)[-2].lstrip("n"))

    def sample(obj):
        data = obj.read()
        if args.raw:
            return len(data)
        img = Image.open(io.BytesIO(data)).convert("RGB")
        return tf(img), label(obj.key)

    config = S3ClientConfig(force_path_style=True)
    kwargs = dict(region=args.region, endpoint=args.endpoint, transform=sample,
                  s3client_config=config)
    if args.dataset == "map":
        ds = S3MapDataset.from_prefix(args.prefix, **kwargs)
        shuffle = True
    else:
        ds = S3IterableDataset.from_prefix(args.prefix, enable_sharding=True, **kwargs)
        shuffle = False
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=shuffle,
                                         num_workers=args.workers,
                                         persistent_workers=args.workers > 0)

    def epoch():
        n = nbytes = 0
        for batch in loader:
            if args.raw:
                n += len(batch)
                nbytes += int(batch.sum())
            else:
                n += batch[0].shape[0]
        return n, nbytes

    epoch()  # warm-up: listing, worker start-up, connections
    n = nbytes = 0
    cpu0, start = cpu_seconds(), time.perf_counter()
    for _ in range(args.epochs):
        k, b = epoch()
        n += k
        nbytes += b
    dt = time.perf_counter() - start
    cpu = cpu_seconds() - cpu0
    print(f"s3torchconnector {args.dataset} workers={args.workers} raw={int(args.raw)} "
          f"images={n} seconds={dt:.2f} images_per_sec={n / dt:.1f} cpu_seconds={cpu:.2f} "
          f"bytes={nbytes}")


if __name__ == "__main__":
    main()
