# The PyTorch side of OptimizerStep tests: torchvision's ResNet-18 with the
# weights dtrain started from, the same batch and optimizer settings
# (parameter groups as torchvision's references build them), the same number
# of steps; prints the largest difference from dtrain's parameters and
# buffers afterwards, and the name where it occurs.
#   optimizer_step.py CONFIG_JSON BEFORE.pt AFTER.pt
import json
import sys

import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import load, set_weight_decay  # noqa: E402

cfg = json.loads(sys.argv[1])
before = load(sys.argv[2])
after = load(sys.argv[3])
torch.set_num_threads(1)

model = torchvision.models.resnet18(num_classes=cfg["num_classes"])
model.load_state_dict({k[6:]: v for k, v in before.items() if k.startswith("model.")}, strict=True)
model.train()
custom = [("bias", cfg["bias_weight_decay"])] if cfg.get("bias_weight_decay") is not None else None
groups = set_weight_decay(model, cfg["weight_decay"], cfg.get("norm_weight_decay"), custom)
if cfg["optimizer"] == "sgd":
    opt = torch.optim.SGD(groups, lr=cfg["lr"], momentum=cfg["momentum"], nesterov=cfg["nesterov"],
                          weight_decay=cfg["weight_decay"])
else:
    opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"],
                            weight_decay=cfg["weight_decay"])
print("groups", " ".join(str(len(g["params"])) for g in opt.param_groups))
for _ in range(cfg["steps"]):
    opt.zero_grad()
    F.cross_entropy(model(before["inputs"]), before["targets"]).backward()
    opt.step()

worst, where = 0.0, ""
for name, t in model.state_dict().items():
    d = (t.double() - after[name].double()).abs().max().item()
    if d >= worst:
        worst, where = d, name
moved = max((t.double() - before["model." + n].double()).abs().max().item()
            for n, t in model.state_dict().items() if t.is_floating_point())
print("moved", repr(moved))
print("max_difference", repr(worst))
print("at", where)
