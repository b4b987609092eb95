"""init_gloo_group: the Gloo process group of a worker started by torchrun, one
that can be formed again after torchrun restarts the workers.

Note [torchrun 2.x agent store]: torchrun 2.x's c10d rendezvous hands the workers
the agent's store (TORCHELASTIC_USE_AGENT_STORE=True), the same one across
restarts, and init_process_group adds no per-attempt prefix (its comment assumes
a new store per retry), so a re-formed Gloo group reads the dead attempt's
addresses and fails with "Connection refused" on every restart
(pytorch/pytorch#135712, #167288). The group is therefore formed under the
attempt's own prefix, as a user's program must. torch 1.13's torchrun gives each
attempt a store of its own; there the plain env:// path is kept.
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
