"""init_gloo_group: the Gloo process group of a worker started by torchrun, one
that can be formed again after torchrun restarts the workers.

Note [torchrun 2.x agent store]: torchrun 2.x's c10d rendezvous hands the workers
the agent's store (TORCHELASTIC_USE_AGENT_STORE=True), the same one across
restarts, and init_process_group adds no per-attempt prefix (its comment assumes
a new store per retry), so a re-formed Gloo group reads the dead attempt's
addresses and fails with "Connection refused" on every restart
(pytorch/pytorch#135712, #167288). The group is therefore formed under the
attempt's own prefix, as a user's program must. That prefix holds on one node
only: each node's agent counts its own restarts, and a node whose workers were
stopped for a membership change (not a failure) does not count one, so on
several nodes the counts differ and the groups never meet. There torchrun runs
with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (torch's opt-out): rank 0's worker
hosts a fresh store per round, and the plain env:// path below is taken.
torch 1.13's torchrun gives each attempt a store of its own; there the plain
env:// path is kept too.
"""
import os
from datetime import timedelta

import torch.distributed as dist


def init_gloo_group(timeout=timedelta(seconds=60)):
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        store = dist.PrefixStore(
            "attempt_" + os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"),
            dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=False, timeout=timeout))
        dist.init_process_group("gloo", store=store, rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout)
    else:
        dist.init_process_group("gloo", timeout=timeout)
