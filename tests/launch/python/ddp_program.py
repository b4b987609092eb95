"""A PyTorch DDP program as users write it (Gloo, env://, elastic's @record),
for tests/launch/test_python_programs.cpp: runs under `dtrain run` on
Debian's torch 1.13 and on PyPI's torch 2.x.

Each rank trains one step of a DDP model and allreduces its rank; the
gradients must agree across ranks. FAIL_RANK=r makes rank r raise while
TORCHELASTIC_RESTART_COUNT < FAIL_UNTIL_RESTART (default 1), to exercise
--max-restarts and the root cause taken from @record's error file.

ABORT_RANK=a makes certain an order that a loaded machine produces by chance
(torch 2.x's rank 0 aborting, "terminate called", once the failing rank has
torn its process group down but not yet exited): rank a waits after the
allreduce until the failing rank has recorded its error, then dies by SIGABRT
without a record, while the failing rank lingers (LINGER_SECONDS, default 60)
before it exits. The launcher sees rank a die first, though it failed second.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    dist.init_process_group("gloo")  # env://: MASTER_ADDR/PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ddp(torch.full((2, 4), float(rank + 1))).sum().backward()
    grads = [torch.zeros_like(model.weight.grad) for _ in range(world)]
    dist.all_gather(grads, model.weight.grad)
    assert all(torch.equal(g, grads[0]) for g in grads), "DDP gradients differ across ranks"
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    assert t.item() == world * (world + 1) / 2, t
    if os.environ.get("ABORT_RANK") == str(rank):
        store().wait(["recorded"], datetime.timedelta(seconds=60))
        os.abort()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if os.environ.get("FAIL_RANK") == str(rank) and restart < int(
        os.environ.get("FAIL_UNTIL_RESTART", "1")
    ):
        raise RuntimeError(f"rank {rank} fails on purpose in attempt {restart}")
    print(f"rank {rank}/{world} allreduce {t.item():g} restart {restart} torch {torch.__version__}",
          flush=True)
    # As PyTorch's own tests do: a rank that tears its group down while a
    # peer's Gloo thread still reads from it can end that peer with
    # "terminate called" (seen once in CI under torch 2.x on a loaded machine).
    dist.barrier()
    dist.destroy_process_group()


def store():
    return dist.distributed_c10d._get_default_store()


if __name__ == "__main__":
    try:
        main()
    finally:
        # @record has written the error file by now (ABORT_RANK, above).
        if (
            os.environ.get("ABORT_RANK") is not None
            and dist.is_initialized()
            and os.environ.get("FAIL_RANK") == str(dist.get_rank())
        ):
            store().set("recorded", "1")
            time.sleep(float(os.environ.get("LINGER_SECONDS", "60")))
    # The rank has succeeded; skip the interpreter's teardown. Under torch 2.x
    # a C++ thread that needs the GIL while the interpreter finalizes aborts
    # the process ("terminate called without an active exception", no Python
    # frame left: pytorch#190489, #179291); stop 34's CI saw it once, after
    # the group was destroyed. What these tests check is the launcher, not that.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
