# torch.optim.lr_scheduler's learning rates for each config, stepped once per
# optimizer step, the schedulers built as torchvision's references build
# them (main scheduler, then LinearLR warm-up, chained by SequentialLR).
#   lr_schedules.py CONFIGS_JSON  ->  one line per config: "lrs <json list>"
import json
import sys
import warnings

import torch
from torch.optim import lr_scheduler as S

warnings.filterwarnings("ignore")
for cfg in json.loads(sys.argv[1]):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=cfg["base_lr"])
    w = cfg["warmup_steps"]
    kind = cfg["kind"]
    if kind == "step":
        main = S.StepLR(opt, step_size=cfg["step_size"], gamma=cfg["gamma"])
    elif kind == "multistep":
        main = S.MultiStepLR(opt, milestones=cfg["milestones"], gamma=cfg["gamma"])
    elif kind == "cosine":
        main = S.CosineAnnealingLR(opt, T_max=cfg["total_steps"] - w, eta_min=cfg["min_lr"])
    else:
        main = None
    sched = main
    if w > 0:
        warm = S.LinearLR(opt, start_factor=cfg["warmup_start_factor"], total_iters=w)
        sched = S.SequentialLR(opt, schedulers=[warm, main], milestones=[w]) if main else warm
    lrs = []
    for _ in range(cfg["n"]):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        if sched is not None:
            sched.step()
    print("lrs", json.dumps(lrs))
