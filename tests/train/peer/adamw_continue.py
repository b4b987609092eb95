# Loads a dtrain checkpoint of ResNet-18 + AdamW (torchvision's weight-decay
# groups) into torchvision's model and torch.optim.AdamW with
# load_state_dict, takes one more step on the given batch, and prints the
# largest difference from the parameters and buffers dtrain reached with the
# same step.
#   adamw_continue.py CONFIG_JSON CHECKPOINT.pt BATCH.pt AFTER.pt
import json
import sys

import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import load, set_weight_decay  # noqa: E402

cfg = json.loads(sys.argv[1])
ck = load(sys.argv[2])
batch = load(sys.argv[3])
after = load(sys.argv[4])
torch.set_num_threads(1)

model = torchvision.models.resnet18(num_classes=cfg["num_classes"])
model.load_state_dict(ck["model"], strict=True)
model.train()
groups = set_weight_decay(model, cfg["weight_decay"], cfg["norm_weight_decay"])
opt = torch.optim.AdamW(groups, lr=cfg["lr"], weight_decay=cfg["weight_decay"])
opt.load_state_dict(ck["optimizer"])
assert len(opt.state) == sum(len(g["params"]) for g in opt.param_groups)
print("steps", " ".join(str(int(s["step"])) for s in list(opt.state.values())[:1]))
opt.zero_grad()
F.cross_entropy(model(batch["inputs"]), batch["targets"]).backward()
opt.step()
worst = max((t.double() - after[n].double()).abs().max().item() for n, t in model.state_dict().items())
print("max_difference", repr(worst))
