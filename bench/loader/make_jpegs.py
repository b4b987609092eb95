#!/usr/bin/python3
"""Writes an ImageFolder of ImageNet-sized JPEGs (500x375, quality 90) for the
loader benchmark: OUT/<class>/<class>_<i>.JPEG with smooth, textured content
so that the files are about as large as ImageNet's (~110 KB)."""
import argparse
import os

import numpy as np
from PIL import Image


def picture(rng, width, height):
    # Low-frequency colour field plus fine noise: realistic JPEG sizes.
    coarse = rng.integers(0, 256, size=(height // 25 + 2, width // 25 + 2, 3), dtype=np.uint8)
    img = Image.fromarray(coarse).resize((width, height), Image.BICUBIC)
    arr = np.asarray(img, dtype=np.int16) + rng.integers(-24, 25, size=(height, width, 3))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--per-class", type=int, default=100)
    p.add_argument("--size", default="500x375")
    args = p.parse_args()
    w, h = map(int, args.size.split("x"))
    rng = np.random.default_rng(0)
    for c in range(args.classes):
        d = os.path.join(args.out, f"n{c:08d}")
        os.makedirs(d, exist_ok=True)
        for i in range(args.per_class):
            picture(rng, w, h).save(os.path.join(d, f"n{c:08d}_{i}.JPEG"), quality=90)


if __name__ == "__main__":
    main()
