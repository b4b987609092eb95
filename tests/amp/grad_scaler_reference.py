"""PyTorch's GradScaler as the reference for dtrain's (tests/amp/test_grad_scaler.cpp).

python3-torch 1.13's torch.cuda.amp.GradScaler only runs on CUDA: it disables
itself without a GPU, asserts that tensors are CUDA tensors, and its two ATen
kernels (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_) have
no CPU implementation. So this script runs PyTorch's own GradScaler class on
the CPU by
  - running under `python3 -O` (the CUDA-only `assert`s are compiled out),
  - telling it AMP is available (amp_definitely_not_available -> False),
  - replacing the two kernels by their arithmetic, transcribed from
    aten/src/ATen/native/cuda/AmpKernels.cu (1.13): found_inf = 1 when any
    element is inf/NaN and grad *= inv_scale; and for the update
      found_inf:  scale = float(scale * backoff); tracker = 0
      otherwise:  tracker + 1 == interval ? (scale = float(scale * growth) if
                  that is finite; tracker = 0) : tracker += 1
Everything else (scale/unscale_/step/update, per-optimizer records, skipping,
state_dict) is PyTorch 1.13's code. With PyTorch 2.3 or newer the script uses
torch.amp.GradScaler("cpu") and ATen's CPU kernels unchanged.

Usage:
  python3 -O grad_scaler_reference.py trajectory PATTERN INIT_SCALE GROWTH_INTERVAL
      PATTERN: one letter per iteration: c clean, x inf in a gradient, n NaN.
      Prints "step <stepped 0|1> <scale> <growth tracker>" per iteration, then
      "weights <w...>" (Linear(3, 2) weight then bias after the run).
  python3 -O grad_scaler_reference.py state IN OUT
      Loads IN (a state_dict dtrain pickled) into a GradScaler, prints
      "keys <sorted keys of a fresh GradScaler's state_dict>" and
      "loaded <scale> <growth tracker> <growth factor> <backoff factor> <interval>",
      and torch.save()s the scaler's state_dict() to OUT.
"""
import sys

import torch

# PyTorch 2.3+ has a CPU GradScaler with real CPU kernels: use it as it is.
NATIVE_CPU = hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler")
if not NATIVE_CPU:
    import torch.cuda.amp.grad_scaler as grad_scaler

    grad_scaler.amp_definitely_not_available = lambda: False


def make_scaler(**kwargs):
    if NATIVE_CPU:
        return torch.amp.GradScaler("cpu", **kwargs)
    return grad_scaler.GradScaler(**kwargs)


def check_and_unscale_(grads, found_inf, inv_scale):
    for g in grads:
        if not bool(torch.isfinite(g).all()):
            found_inf.fill_(1.0)
        if float(inv_scale.item()) != 1.0:
            g.mul_(inv_scale)


def f32(value):
    return float(torch.tensor(value, dtype=torch.float64).float().item())


def update_scale_(scale, tracker, found_inf, growth, backoff, interval):
    s = float(scale.item())
    t = int(tracker.item())
    if float(found_inf.item()) != 0.0:
        s = f32(s * backoff)
        t = 0
    else:
        successful = t + 1
        if successful == interval:
            grown = f32(s * growth)
            if grown != float("inf"):
                s = grown
            t = 0
        else:
            t = successful
    scale.fill_(s)
    tracker.fill_(t)
    return scale


if not NATIVE_CPU:
    torch._amp_foreach_non_finite_check_and_unscale_ = check_and_unscale_
    torch._amp_update_scale_ = update_scale_


def model():
    # Must match make_reference_model() in test_grad_scaler.cpp.
    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.1 - 0.2)
        lin.bias.copy_(torch.tensor([0.05, -0.05]))
    return lin


def trajectory(pattern, init_scale, interval):
    lin = model()
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    scaler = make_scaler(init_scale=init_scale, growth_interval=interval)
    x0 = torch.linspace(-1, 1, 12).reshape(4, 3)
    y = torch.linspace(0.5, -0.5, 8).reshape(4, 2)
    for k, kind in enumerate(pattern):
        opt.zero_grad()
        x = x0 * (1 + 0.1 * k)
        loss = ((lin(x) - y) ** 2).mean()
        scaler.scale(loss).backward()
        if kind == "x":
            lin.weight.grad[0, 0] = float("inf")
        elif kind == "n":
            lin.bias.grad[1] = float("nan")
        before = [p.detach().clone() for p in lin.parameters()]
        scaler.step(opt)
        stepped = int(any(not torch.equal(b, p) for b, p in zip(before, lin.parameters())))
        scaler.update()
        print("step", stepped, repr(scaler.get_scale()), scaler._get_growth_tracker())
    values = torch.cat([lin.weight.detach().reshape(-1), lin.bias.detach()])
    print("weights", " ".join(repr(float(v)) for v in values))


def state(path_in, path_out):
    loaded = torch.load(path_in)
    print("keys", " ".join(sorted(make_scaler().state_dict().keys())))
    scaler = make_scaler()
    scaler.load_state_dict(loaded)
    d = scaler.state_dict()
    print("loaded", repr(d["scale"]), d["_growth_tracker"], repr(d["growth_factor"]),
          repr(d["backoff_factor"]), d["growth_interval"])
    torch.save(d, path_out)


if __name__ == "__main__":
    if sys.argv[1] == "trajectory":
        trajectory(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
    else:
        state(sys.argv[2], sys.argv[3])
