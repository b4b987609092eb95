"""PyTorch's own powerSGD_hook on given gradients, for test_powersgd_vs_pytorch.cpp.

    python3 powersgd_reference.py OUT_DIR

Runs 2 ranks (processes, gloo over a file store). For each configuration in
CONFIGS it builds a fresh PowerSGDState and, for STEPS steps, hands every
bucket of BUCKETS (in index order; the last one is_last()) to the real
powerSGD_hook with gradients drawn from torch.Generator seeded by
(config, step, rank, bucket), and waits for it. OUT_DIR/<config>.rank<r>.bin
gets, per step and bucket, the float32 input (this rank's gradient sum, as
PyTorch's DDP hands it to a hook: not divided by the world size) then the
float32 output the hook left. Prints "OK <torch version>" at the end.
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

WORLD = 2
STEPS = 6
# Buckets in launch order: lists of parameter shapes (the C++ test has the same).
BUCKETS = [
    [(10, 32), (10,)],
    [(12,), (5,)],  # nothing to compress: PyTorch still draws a seed for it
    [(16, 8, 3, 3), (16, 8, 3, 3), (32, 144), (32,), (3, 2), (24, 20)],
    [(24, 20), (40, 30), (7,)],
]
# name -> PowerSGDState keyword arguments (the C++ test mirrors them).
CONFIGS = {
    "defaults_rank1": dict(matrix_approximation_rank=1, start_powerSGD_iter=2),
    "rank2_batched": dict(matrix_approximation_rank=2, start_powerSGD_iter=3,
                          batch_tensors_with_same_shape=True, random_seed=7),
    "rank4_qr_no_warm_start": dict(matrix_approximation_rank=4, start_powerSGD_iter=2,
                                   warm_start=False, min_compression_rate=1.5, random_seed=123),
    "rank2_epsilon_no_error_feedback": dict(matrix_approximation_rank=2, start_powerSGD_iter=1,
                                            use_error_feedback=False, warm_start=False,
                                            orthogonalization_epsilon=1e-3),
}


class Bucket:
    """The part of dist.GradBucket that powerSGD_hook uses."""

    def __init__(self, index, count, buffer, shapes):
        self._index, self._count, self._buffer = index, count, buffer
        self._grads, at = [], 0
        for s in shapes:
            n = 1
            for d in s:
                n *= d
            self._grads.append(buffer[at:at + n].view(s))
            at += n

    def buffer(self):
        return self._buffer

    def index(self):
        return self._index

    def is_last(self):
        return self._index == self._count - 1

    def gradients(self):
        return self._grads


def numel(shapes):
    total = 0
    for s in shapes:
        n = 1
        for d in s:
            n *= d
        total += n
    return total


def worker(rank, store_file, out_dir):
    dist.init_process_group("gloo", init_method="file://" + store_file, rank=rank,
                            world_size=WORLD)
    for c, (name, kwargs) in enumerate(CONFIGS.items()):
        state = ps.PowerSGDState(process_group=None, **kwargs)
        chunks = []
        for step in range(STEPS):
            for b, shapes in enumerate(BUCKETS):
                gen = torch.Generator().manual_seed(100000 * c + 1000 * step + 10 * rank + b)
                grad = torch.randn(numel(shapes), generator=gen)
                buf = grad.clone()
                out = ps.powerSGD_hook(state, Bucket(b, len(BUCKETS), buf, shapes)).wait()
                if isinstance(out, (list, tuple)):
                    out = out[0]
                chunks += [grad, out.clone()]
        with open(os.path.join(out_dir, "%s.rank%d.bin" % (name, rank)), "wb") as f:
            f.write(torch.cat(chunks).float().numpy().tobytes())
    dist.barrier()
    # Skip the process group's teardown: torch 2.11's Gloo group sometimes
    # aborts there ("Resource deadlock avoided") after the work is done.
    sys.stdout.flush()
    os._exit(0)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    fd, store_file = tempfile.mkstemp(dir=out_dir)
    os.close(fd)
    os.unlink(store_file)
    mp.spawn(worker, args=(store_file, out_dir), nprocs=WORLD, join=True)
    print("OK", torch.__version__)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
