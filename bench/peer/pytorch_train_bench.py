#!/usr/bin/python3
"""PyTorch eager peer of `dtrain bench train` (tf_cnn_benchmarks' method).

The same torchvision model (bench/peer/cnn.py for "cnn"), one random batch on
the device made once with fixed labels, cross-entropy, SGD (lr 0.01, momentum
0.9), DistributedDataParallel over Gloo (NCCL on CUDA), optional autocast
(bf16; fp16 with a GradScaler) and channels_last. Warm-up steps, then timed
steps; rank 0 prints "total images/sec" per --display-every steps and at the
end, the achieved TFLOP/s and the peak GPU memory (as `dtrain bench train`
counts them: 6 x the forward's multiply-adds of Conv2d and Linear layers,
counted with forward hooks, per image; torch.cuda.max_memory_allocated over
the timed steps), and with --json one object with the keys
`dtrain bench train --json` has.

Start one process per rank with torchrun's variables (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT); without them it runs one process.
--backend picks the group (auto: NCCL on CUDA, Gloo on the CPU; gloo for
several processes on one GPU, which NCCL refuses); --comm-hook registers the
same DDP comm hooks as bench/peer/pytorch_ddp_step.py (its register_hook:
allreduce, noop, fp16, bf16, powersgd with --powersgd-rank and
--powersgd-start-iter, each bucket after the previous one).
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


def make_model(name, num_classes, in_channels):
    if name == "cnn":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from cnn import Net  # noqa: E402
        return Net(num_classes=num_classes)
    import torchvision
    if not hasattr(torchvision.models, name):
        sys.exit(f"pytorch_train_bench: torchvision has no model '{name}'")
    return getattr(torchvision.models, name)(num_classes=num_classes)


def forward_macs(model, in_ch, size, device):
    """Multiply-adds of one image's forward pass in Conv2d and Linear layers
    (forward hooks on those modules; dtrain's forward_macs() counts the same
    operators), eval mode, no gradients; the training mode is restored."""
    total = [0]

    def hook(m, inp, out):
        if isinstance(m, torch.nn.Conv2d):
            total[0] += out.numel() // out.shape[1] * m.weight.numel()
        else:
            total[0] += inp[0].numel() // m.in_features * m.weight.numel()

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    training = model.training
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, in_ch, size, size, device=device))
    model.train(training)
    for h in handles:
        h.remove()
    return total[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=0)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--amp", default="none", choices=["none", "bf16", "fp16"])
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--display-every", type=int, default=10)
    p.add_argument("--device", default="auto")
    p.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])
    p.add_argument("--comm-hook", default="allreduce",
                   choices=["allreduce", "noop", "fp16", "bf16", "powersgd"])
    p.add_argument("--powersgd-rank", type=int, default=1)
    p.add_argument("--powersgd-start-iter", type=int, default=1000)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if a.device == "auto":
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(f"cuda:{local_rank % torch.cuda.device_count()}" if a.device == "cuda" else a.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if a.amp == "fp16" and device.type != "cuda":
        sys.exit("pytorch_train_bench: fp16 autocast needs a CUDA device; use --amp bf16 on CPU")
    backend = a.backend if a.backend != "auto" else ("nccl" if device.type == "cuda" else "gloo")
    dist.init_process_group(backend, rank=rank, world_size=world,
                            init_method=f"tcp://{os.environ.get('MASTER_ADDR', '127.0.0.1')}:"
                                        f"{os.environ.get('MASTER_PORT', '29500')}")

    cnn = a.model == "cnn"
    in_ch = 1 if cnn else 3
    size = a.image_size or (28 if cnn else 224)
    torch.manual_seed(0)
    model = make_model(a.model, a.num_classes, in_ch).to(device)
    mf = torch.channels_last if a.channels_last else torch.contiguous_format
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    macs = forward_macs(model, in_ch, size, device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if a.comm_hook != "allreduce":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from pytorch_ddp_step import register_hook  # noqa: E402  (one copy of the hooks)
        a.powersgd_unordered = False
        register_hook(ddp, a)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.amp)
    scaler = torch.cuda.amp.GradScaler(enabled=a.amp == "fp16")

    torch.manual_seed(1 + rank)
    x = torch.randn(a.batch_size, in_ch, size, size, device=device).contiguous(memory_format=mf)
    y = torch.randint(0, a.num_classes, (a.batch_size,), device=device)

    def step():
        opt.zero_grad()
        with torch.autocast(device.type, dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
            loss = F.cross_entropy(ddp(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    def say(line):
        if rank == 0:
            print(line, flush=True)

    say(f"Model:       {a.model} ({size}x{size}, {a.num_classes} classes), PyTorch {torch.__version__} eager")
    say(f"Batch size:  {a.batch_size * world} global, {a.batch_size} per process")
    say(f"Processes:   {world} ({dist.get_backend()}), device {device}, threads {torch.get_num_threads()}")
    say(f"AMP:         {a.amp}, memory format {'channels_last' if a.channels_last else 'contiguous'}")
    say(f"Comm hook:   {a.comm_hook}" + (f" (rank {a.powersgd_rank}, from iteration {a.powersgd_start_iter})"
                                           if a.comm_hook == "powersgd" else ""))
    loss = None
    for _ in range(a.warmup_steps):
        loss = step()
    if loss is not None:
        loss.item()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    dist.barrier()
    say("Step\tImg/sec\ttotal_loss")
    per_step = a.batch_size * world
    start = shown = time.perf_counter()
    shown_from = 0
    for i in range(1, a.steps + 1):
        loss = step()
        if i % a.display_every == 0 or i == a.steps:
            value = loss.item()
            now = time.perf_counter()
            say(f"{i}\ttotal images/sec: {per_step * (i - shown_from) / (now - shown):.1f}\t{value:.3f}")
            shown, shown_from = now, i
    final_loss = loss.item()
    # On the group's device: NCCL reduces CUDA tensors only.
    t = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    total_s = t.item() / world
    ips = per_step * a.steps / total_s
    tflops = 6 * macs * ips / 1e12
    peak_gib = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    total_gib = (torch.cuda.get_device_properties(device).total_memory / 2**30
                 if device.type == "cuda" else None)
    say("-" * 64)
    say(f"total images/sec: {ips:.2f}")
    say("-" * 64)
    say(f"achieved TFLOP/s: {tflops:.3f} ({world} process(es); 6 x {macs / 1e9:.3f} GMACs per image, "
        f"forward convolutions and linear layers)")
    say(f"peak GPU memory: {peak_gib:.2f} GiB of {total_gib:.2f} GiB (rank 0, {device}, timed steps)"
        if peak_gib is not None else f"peak GPU memory: n/a ({device})")
    if a.json and rank == 0:
        print(json.dumps({
            "impl": "pytorch", "bench": "train", "model": a.model, "world_size": world,
            "batch_size": a.batch_size, "image_size": size, "num_classes": a.num_classes, "amp": a.amp,
            "channels_last": a.channels_last, "threads": a.threads, "device": str(device),
            "backend": backend, "comm_hook": a.comm_hook,
            "steps": a.steps, "warmup_steps": a.warmup_steps, "images_per_sec": ips,
            "step_ms": total_s * 1000 / a.steps, "final_loss": final_loss,
            "loss_scale": scaler.get_scale() if a.amp == "fp16" else 1.0,
            "forward_gmacs": macs / 1e9, "tflops": tflops, "peak_mem_gib": peak_gib,
            "gpu_mem_gib": total_gib}), flush=True)
    # Note: one rank was seen hanging at exit (Gloo teardown, torch 1.13) after
    # its peer had left; meet first, then leave without the interpreter's teardown.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
