"""The Python side of tests/models: torchvision's models as the reference (the release of the
LibTorch under test: 0.14 with torch 1.13, 0.26 with torch 2.11; tests/support/peer_version.h).

One process serves many requests (importing torch and building models is the slow part), one
command per line on stdin, one answer line on stdout ("ok ..." or "error ..."):

  ref NAME SIZE DIR     torchvision NAME (1000 classes) seeded, with random BatchNorm
                        statistics; writes DIR/NAME.weights.pt (dict(state_dict())),
                        DIR/NAME.io.pt ({"x": input [2, 3, SIZE, SIZE], "logits": eval logits,
                        "train_logits": training-mode logits after manual_seed(5), taken after
                        the eval logits}),
                        DIR/NAME.keys.txt ("key d0,d1,..." per state_dict entry, in order);
                        answers "ok <parameter count>"
  check NAME IO WEIGHTS OUT
                        loads WEIGHTS (a dtrain file) into torchvision NAME (the model `ref`
                        built when the names match, a new one otherwise) with strict=True,
                        writes {"logits": eval logits on IO's "x", "n": 0} to OUT
  checkpoint NAME CKPT  loads torch.load(CKPT)["model"] into torchvision NAME, strict=True
  init NAME SEED OUT    torchvision NAME (1000 classes) as constructed after
                        manual_seed(SEED) (its own initialisation); writes OUT: "key numel mean std min max
                        kurtosis" per state_dict entry (float64 statistics of its first 2^20
                        elements, numel counting those; std and kurtosis are the population's,
                        kurtosis 0 for a constant tensor)
  forms DIR             writes bench/peer/cnn.py's Net (dtrain's `cnn`) in several torch.save
                        forms: ordered.pt, plain.pt, legacy.pt, module.pt, wrapped.pt, ddp.pt,
                        and its eval logits on ones(2, 1, 28, 28) with plain.pt's weights in
                        logits.pt
"""

import os
import sys

import torch
import torchvision

torch.set_num_threads(int(os.environ.get("DTRAIN_TEST_THREADS", "2")))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "peer"))


def load(path):
    # dtrain's files are plain dicts of tensors; weights_only (the default from torch 2.6)
    # refuses torch::pickle_save's type tags, so it is turned off (as tests/train/peer/common.py).
    try:
        return torch.load(path, weights_only=False)
    except TypeError:
        return torch.load(path)


last = {}  # the model `ref` built last, reused by `check` (building VGG-19 takes seconds)


def build(name):
    if last.get("name") == name:
        return last["model"]
    return getattr(torchvision.models, name)(num_classes=1000)


def randomize_norms(model, gen):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                # Ranges that keep ResNet-152's logits near 1 (gamma 0.5..1.5 gives 1e7).
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) * 0.4 + 0.4)
                m.bias.copy_(torch.rand(m.bias.shape, generator=gen) * 0.4 - 0.2)
                m.running_mean.copy_(torch.rand(m.running_mean.shape, generator=gen) * 0.4 - 0.2)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 1.0)
                m.num_batches_tracked.fill_(7)


def ref(name, size, out_dir):
    torch.manual_seed(0)
    last.clear()
    model = build(name)
    last.update(name=name, model=model)
    gen = torch.Generator().manual_seed(1)
    randomize_norms(model, gen)
    model.eval()
    x = torch.randn(2, 3, size, size, generator=gen)
    base = os.path.join(out_dir, name)
    sd = model.state_dict()
    torch.save(dict(sd), base + ".weights.pt")  # before training mode changes the statistics
    with torch.no_grad():
        logits = model(x)
        # Training mode (batch statistics, dropout, stochastic depth) from a known seed.
        model.train()
        torch.manual_seed(5)
        train_logits = model(x)
        model.eval()
    torch.save({"x": x, "logits": logits, "train_logits": train_logits}, base + ".io.pt")
    with open(base + ".keys.txt", "w") as f:
        for k, v in sd.items():
            f.write("%s [%s]\n" % (k, ",".join(str(d) for d in v.shape)))
    return "ok %d" % sum(p.numel() for p in model.parameters())


def check(name, io_path, weights, out):
    model = build(name)
    model.load_state_dict(load(weights), strict=True)
    model.eval()
    with torch.no_grad():
        logits = model(load(io_path)["x"])
    torch.save({"logits": logits, "n": 0}, out)
    return "ok"


def checkpoint(name, path):
    model = build(name)
    model.load_state_dict(load(path)["model"], strict=True)
    return "ok"


def init(name, seed, out):
    torch.manual_seed(seed)
    last.clear()
    model = build(name)
    last.update(name=name, model=model)
    with open(out, "w") as f:
        for k, v in model.state_dict().items():
            t = v.detach().flatten()[:1 << 20].double()
            mean = t.mean()
            std = (t - mean).pow(2).mean().sqrt()
            kurt = ((t - mean).pow(4).mean() / std.pow(4)).item() if std > 0 else 0.0
            f.write("%s %d %.17g %.17g %.17g %.17g %.17g\n" % (
                k, t.numel(), mean.item(), std.item(), t.min().item(), t.max().item(), kurt))
    return "ok"


def forms(out_dir):
    from cnn import Net

    torch.manual_seed(3)
    net = Net().eval()
    sd = net.state_dict()
    p = lambda f: os.path.join(out_dir, f)
    torch.save(sd, p("ordered.pt"))
    torch.save(dict(sd), p("plain.pt"))
    torch.save(dict(sd), p("legacy.pt"), _use_new_zipfile_serialization=False)
    torch.save(net, p("module.pt"))
    torch.save({"state_dict": dict(sd), "epoch": 3}, p("wrapped.pt"))
    torch.save({"module." + k: v for k, v in sd.items()}, p("ddp.pt"))
    with torch.no_grad():
        torch.save({"logits": net(torch.ones(2, 1, 28, 28)), "n": 0}, p("logits.pt"))
    return "ok"


COMMANDS = {"ref": ref, "check": check, "checkpoint": checkpoint, "init": init, "forms": forms}

for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    try:
        args = [int(w) if w.isdigit() else w for w in words[1:]]
        answer = COMMANDS[words[0]](*args)
    except Exception as e:  # the C++ test prints it
        answer = "error %s: %s" % (type(e).__name__, str(e).replace("\n", " ")[:500])
    print(answer, flush=True)
