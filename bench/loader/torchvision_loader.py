#!/usr/bin/python3
"""The peer: torchvision ImageFolder + DataLoader with the transforms of
dtrain's training pipeline (RandomResizedCrop(224), RandomHorizontalFlip,
ToTensor, Normalize). Prints one line: images/sec."""
import argparse
import time

import torch
import torchvision.datasets as datasets
import torchvision.transforms as T


def main():
    p = argparse.ArgumentParser()
    p.add_argument("folder")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = datasets.ImageFolder(args.folder, tf)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers, persistent_workers=True)
    for _ in loader:  # warm-up epoch: worker start-up and page cache
        pass
    n, start = 0, time.perf_counter()
    for _ in range(args.epochs):
        for x, _ in loader:
            n += x.shape[0]
    dt = time.perf_counter() - start
    print(f"torchvision workers={args.workers} images={n} seconds={dt:.2f} "
          f"images_per_sec={n / dt:.1f}")


if __name__ == "__main__":
    main()
