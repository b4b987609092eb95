# F.cross_entropy with label smoothing and clip_grad_norm_ on dtrain's tensors.
#   loss_and_clip.py TENSORS.pt SMOOTHING,... MAX_NORM,...
# TENSORS.pt: logits, targets, and g0, g1, ... (gradients to clip). Prints
# "loss <s> <value>" per smoothing, and "total_norm <m> <value>" and
# "clipped <m> <values...>" per max_norm.
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import load  # noqa: E402

t = load(sys.argv[1])
for s in sys.argv[2].split(","):
    loss = F.cross_entropy(t["logits"], t["targets"], label_smoothing=float(s))
    print("loss", s, repr(loss.item()))
for m in sys.argv[3].split(","):
    params = []
    for i in range(len([k for k in t if k.startswith("g")])):
        p = torch.nn.Parameter(torch.zeros_like(t[f"g{i}"]))
        p.grad = t[f"g{i}"].clone()
        params.append(p)
    print("total_norm", m, repr(float(torch.nn.utils.clip_grad_norm_(params, float(m)))))
    print("clipped", m, " ".join(repr(v) for p in params for v in p.grad.flatten().tolist()))
