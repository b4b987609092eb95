"""torchvision's Resize of the first images of an MNIST-style test split, next
to dtrain's batch (DatasetOptions::image_size on a fixed-size dataset).

usage: resize.py DATA_DIR OURS.pt SIZE MEAN STD
Prints "tensor_diff D": the largest difference from Resize(SIZE,
antialias=True) on float tensors followed by Normalize, and "pil_lsb L": the
largest difference from PIL's Resize(SIZE) + ToTensor + Normalize, in units
of one 8-bit level (PIL rounds its output to 8 bits).
"""
import gzip
import struct
import sys

import numpy as np
import torch
import torchvision.transforms as T
from PIL import Image

from common import load

data_dir, ours_path, size, mean, std = sys.argv[1:6]
size, mean, std = int(size), float(mean), float(std)
with gzip.open(data_dir + "/t10k-images-idx3-ubyte.gz") as f:
    raw = f.read()
n, h, w = struct.unpack(">III", raw[4:16])
images = np.frombuffer(raw[16:], np.uint8).reshape(n, h, w)
ours = load(ours_path)["x"]
count = ours.shape[0]

on_tensors = T.Compose([T.Resize(size, antialias=True), T.Normalize([mean], [std])])
on_pil = T.Compose([T.Resize(size), T.ToTensor(), T.Normalize([mean], [std])])
ref_tensor = torch.stack(
    [on_tensors(torch.from_numpy(im.copy()).float().div(255).unsqueeze(0)) for im in images[:count]])
ref_pil = torch.stack([on_pil(Image.fromarray(im)) for im in images[:count]])
assert ref_tensor.shape == ours.shape, (ref_tensor.shape, ours.shape)
print("tensor_diff", (ours - ref_tensor).abs().max().item())
print("pil_lsb", ((ours - ref_pil).abs().max() * std * 255).item())
