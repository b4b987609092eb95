#!/usr/bin/env python3
"""Writes the seed corpora of the data targets from real data.

image_decode: small JPEGs and PNGs saved by PIL (python3-pil) from Fashion-MNIST
  images, in the encodings datasets contain: baseline and progressive JPEG,
  4:2:0 and 4:4:4, grayscale, CMYK, restart markers; PNG RGB, RGBA, grayscale,
  palette, 16-bit, interlaced. Each behind the target's 9-byte prefix.
data_records: the first records of Fashion-MNIST's IDX files (raw and for the
  harness to gzip), and CIFAR-10 / STL-10 files in their layouts built from
  Fashion-MNIST pixels (no CIFAR/STL copy is packaged for Debian).

    make_data_seeds.py FUZZ_DIR [FASHION_MNIST_DIR]
"""
import gzip
import io
import os
import struct
import sys

from PIL import Image


def fashion(src, n):
    images = gzip.open(f"{src}/t10k-images-idx3-ubyte.gz").read()
    labels = gzip.open(f"{src}/t10k-labels-idx1-ubyte.gz").read()
    return images[:16 + n * 784], labels[:8 + n], [
        Image.frombytes("L", (28, 28), images[16 + i * 784:16 + (i + 1) * 784]) for i in range(n)]


def main():
    fuzz_dir = sys.argv[1]
    src = sys.argv[2] if len(sys.argv) > 2 else "/usr/share/datasets/fashion-mnist"
    idx_images, idx_labels, pics = fashion(src, 8)
    out = f"{fuzz_dir}/corpus/image_decode"
    os.makedirs(out, exist_ok=True)
    rgb = Image.merge("RGB", (pics[0], pics[1], pics[2])).resize((45, 37))
    big = Image.merge("RGB", (pics[3], pics[4], pics[5])).resize((160, 120))
    seeds = {
        "jpeg-baseline-420.jpg": (rgb, "JPEG", dict(quality=75)),
        "jpeg-444.jpg": (rgb, "JPEG", dict(quality=90, subsampling=0)),
        "jpeg-progressive.jpg": (big, "JPEG", dict(progressive=True)),
        "jpeg-gray.jpg": (pics[6], "JPEG", {}),
        "jpeg-cmyk.jpg": (rgb.convert("CMYK"), "JPEG", {}),
        "jpeg-restart.jpg": (big, "JPEG", dict(restart_marker_blocks=1)),
        "jpeg-big-dct.jpg": (big.resize((320, 240)), "JPEG", dict(quality=50)),
        "png-rgb.png": (rgb, "PNG", {}),
        "png-rgba.png": (rgb.convert("RGBA"), "PNG", {}),
        "png-gray.png": (pics[7], "PNG", {}),
        "png-palette.png": (rgb.convert("P"), "PNG", {}),
        "png-gray16.png": (pics[7].convert("I").point(lambda v: v * 257), "PNG", {}),
    }
    for i, (name, (img, fmt, kw)) in enumerate(seeds.items()):
        buf = io.BytesIO()
        try:
            img.save(buf, fmt, **kw)
        except (TypeError, ValueError, OSError):
            buf = io.BytesIO()
            img.save(buf, fmt)
        prefix = bytes([i % 4]) + struct.pack("<Q", 0x9E3779B97F4A7C15 * (i + 1) % (1 << 64))
        with open(f"{out}/{name}", "wb") as f:
            f.write(prefix + buf.getvalue())
    # Interlaced PNG: PIL writes none, so the bytes come from its encoder
    # with Adam7 unavailable; a palette PNG with transparency stands in.
    buf = io.BytesIO()
    pal = rgb.convert("P")
    pal.info["transparency"] = 0
    pal.save(buf, "PNG", transparency=0)
    with open(f"{out}/png-palette-trns.png", "wb") as f:
        f.write(bytes([3]) + struct.pack("<Q", 7) + buf.getvalue())

    out = f"{fuzz_dir}/corpus/data_records"
    os.makedirs(out, exist_ok=True)
    n = 3
    images = idx_images[:4] + struct.pack(">I", n) + idx_images[8:16 + n * 784]
    labels = idx_labels[:4] + struct.pack(">I", n) + idx_labels[8:8 + n]
    for name, fmt, data in (("idx-images-raw", 0, images), ("idx-labels-raw", 0, labels),
                            ("idx-images-gz", 1, images), ("idx-labels-gz", 1, labels),
                            ("idx-images-gzfile", 0, gzip.compress(images))):
        with open(f"{out}/{name}", "wb") as f:
            f.write(bytes([fmt]) + data)
    # CIFAR-10: label byte + 3 planes of 32x32 (row-major).
    cifar = b""
    for i in range(2):
        img = Image.merge("RGB", (pics[i], pics[i + 1], pics[i + 2])).resize((32, 32))
        planes = b"".join(ch.tobytes() for ch in img.split())
        cifar += bytes([idx_labels[8 + i]]) + planes
    with open(f"{out}/cifar10-two-records", "wb") as f:
        f.write(bytes([2]) + cifar)
    # STL-10: X holds 3 planes of 96x96 stored column-major; y labels 1..10.
    img = Image.merge("RGB", (pics[3], pics[4], pics[5])).resize((96, 96))
    x = b"".join(ch.transpose(Image.TRANSPOSE).tobytes() for ch in img.split())
    y = bytes([idx_labels[8 + 3] + 1])
    with open(f"{out}/stl10-one-image", "wb") as f:
        f.write(bytes([3]) + struct.pack("<I", len(x)) + x + y)


if __name__ == "__main__":
    main()
