#!/usr/bin/env python3
"""Writes fuzz/corpus/torch_save: files saved by torch.save (python3-torch).

The forms dtrain meets: plain dict state_dicts (dtrain's advice), OrderedDict
state_dicts, checkpoint dicts, every storage dtype, views with offsets and
strides, empty and 0-d tensors, a pickled nn.Module, a shared storage. Run with
the system Python: /usr/bin/python3 make_torch_save_seeds.py FUZZ_DIR
"""
import collections
import os
import sys

import torch


def main():
    out = os.path.join(sys.argv[1], "corpus", "torch_save")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(1, 2, 3)
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    forms = {
        "plain-dict": dict(conv.state_dict()),
        "ordered-dict": conv.state_dict(),
        "checkpoint": {"format": "dtrain-checkpoint-1", "model": dict(conv.state_dict()),
                       "epoch": 3, "step": 1200, "lr": 0.1, "name": "cnn",
                       "optimizer": {"momentum": [torch.zeros(2)], "steps": [7]}},
        "dtypes": {str(dt): torch.ones(3, dtype=dt) for dt in (
            torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64,
            torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64)},
        "views": {"row": base[1], "col": base[:, 2], "t": base.t(), "slice": base[1:3, 2:5]},
        "empty-and-scalar": {"empty": torch.empty(0, 5), "scalar": torch.tensor(2.5),
                             "big-int": torch.tensor([2**40])},
        "shared-storage": {"a": base, "b": base.view(-1)[5:]},
        "module": conv,
        "nested-lists": {"list": [1, 2.0, "three", None, True], "tuple": (1, (2, 3)),
                         "bytes": b"\x00\x01"},
    }
    for name, obj in forms.items():
        torch.save(obj, os.path.join(out, name + ".pt"))


if __name__ == "__main__":
    main()
