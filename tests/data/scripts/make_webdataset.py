"""Writes WebDataset tar shards as the webdataset library's TarWriter does
(Python's tarfile, PAX format, members "<key>.<ext>" grouped by key), from an
ImageFolder, so a test can compare dtrain's webdataset reader with its
ImageFolder reader over the same images.

usage: make_webdataset.py FOLDER OUT_DIR PER_SHARD [--pil CLASSES PER_CLASS]

FOLDER/<class>/<file>.{jpg,png} in torchvision's order (classes sorted, files
sorted) becomes OUT_DIR/shards-000000.tar, ... with PER_SHARD samples each;
sample i has key "<class>/<stem>", members <key>.<ext>, <key>.cls (the class
index) and <key>.json (ignored by readers). With --pil the folder is first
made with PIL: PER_CLASS pictures per class, PNG and JPEG alternating, some
with names longer than ustar's 100 bytes. Prints one line per sample:
"<shard> <key> <label>" -- the reference order.
"""
import io
import json
import os
import sys
import tarfile


def make_folder(folder, classes, per_class):
    from PIL import Image

    for c in range(classes):
        os.makedirs(os.path.join(folder, "c%d" % c), exist_ok=True)
        for i in range(per_class):
            w, h = 40 + 7 * i, 30 + 5 * c
            img = Image.new("RGB", (w, h))
            img.putdata([((x * 9 + c * 50) % 256, (y * 7 + i * 30) % 256, (x + y) % 256)
                         for y in range(h) for x in range(w)])
            stem = "img%03d" % i + ("_" + "x" * 120 if i == 1 else "")
            if i % 2:
                img.save(os.path.join(folder, "c%d" % c, stem + ".png"))
            else:
                img.save(os.path.join(folder, "c%d" % c, stem + ".jpg"), quality=90)


def main():
    folder, out, per_shard = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if len(sys.argv) > 4 and sys.argv[4] == "--pil":
        make_folder(folder, int(sys.argv[5]), int(sys.argv[6]))
    classes = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
    samples = []
    for label, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(folder, c))):
            samples.append((c, f, label))
    os.makedirs(out, exist_ok=True)
    for start in range(0, len(samples), per_shard):
        shard = "shards-%06d.tar" % (start // per_shard)
        with tarfile.open(os.path.join(out, shard), "w", format=tarfile.PAX_FORMAT) as tar:
            for c, f, label in samples[start:start + per_shard]:
                stem, ext = f.split(".", 1)
                key = c + "/" + stem
                with open(os.path.join(folder, c, f), "rb") as fh:
                    image = fh.read()
                members = [(ext, image), ("cls", b"%d" % label),
                           ("json", json.dumps({"file": f}).encode())]
                for e, data in members:
                    info = tarfile.TarInfo(key + "." + e)
                    info.size = len(data)
                    info.mode = 0o444
                    info.uname = info.gname = "bigdata"
                    tar.addfile(info, io.BytesIO(data))
                print(shard, key, label)


if __name__ == "__main__":
    main()
