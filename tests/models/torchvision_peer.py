"""The Python side of tests/models: torchvision 0.14's models as the reference.

One process serves many requests (importing torch and building models is the slow part), one
command per line on stdin, one answer line on stdout ("ok ..." or "error ..."):

  ref NAME SIZE DIR     torchvision NAME (1000 classes) seeded, with random BatchNorm
                        statistics; writes DIR/NAME.weights.pt (dict(state_dict())),
                        DIR/NAME.io.pt ({"x": input [2, 3, SIZE, SIZE], "logits": eval logits}),
                        DIR/NAME.keys.txt ("key d0,d1,..." per state_dict entry, in order);
                        answers "ok <parameter count>"
  check NAME IO WEIGHTS OUT
                        loads WEIGHTS (a dtrain file) into torchvision NAME (the model `ref`
                        built when the names match, a new one otherwise) with strict=True,
                        writes {"logits": eval logits on IO's "x", "n": 0} to OUT
  checkpoint NAME CKPT  loads torch.load(CKPT)["model"] into torchvision NAME, strict=True
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
    with torch.no_grad():
        logits = model(x)
    base = os.path.join(out_dir, name)
    sd = model.state_dict()
    torch.save(dict(sd), base + ".weights.pt")
    torch.save({"x": x, "logits": logits}, base + ".io.pt")
    with open(base + ".keys.txt", "w") as f:
        for k, v in sd.items():
            f.write("%s [%s]\n" % (k, ",".join(str(d) for d in v.shape)))
    return "ok %d" % sum(p.numel() for p in model.parameters())


def check(name, io_path, weights, out):
    model = build(name)
    model.load_state_dict(torch.load(weights), strict=True)
    model.eval()
    with torch.no_grad():
        logits = model(torch.load(io_path)["x"])
    torch.save({"logits": logits, "n": 0}, out)
    return "ok"


def checkpoint(name, path):
    model = build(name)
    model.load_state_dict(torch.load(path)["model"], strict=True)
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


COMMANDS = {"ref": ref, "check": check, "checkpoint": checkpoint, "forms": forms}

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
