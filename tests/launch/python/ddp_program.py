"""A PyTorch DDP program as users write it (Gloo, env://, elastic's @record),
for tests/launch/test_python_programs.cpp: runs under `dtrain run` on
Debian's torch 1.13 and on PyPI's torch 2.x.

Each rank trains one step of a DDP model and allreduces its rank; the
gradients must agree across ranks. FAIL_RANK=r makes rank r raise while
TORCHELASTIC_RESTART_COUNT < FAIL_UNTIL_RESTART (default 1), to exercise
--max-restarts and the root cause taken from @record's error file.
"""
import os

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
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if os.environ.get("FAIL_RANK") == str(rank) and restart < int(
        os.environ.get("FAIL_UNTIL_RESTART", "1")
    ):
        raise RuntimeError(f"rank {rank} fails on purpose in attempt {restart}")
    print(f"rank {rank}/{world} allreduce {t.item():g} restart {restart} torch {torch.__version__}",
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
