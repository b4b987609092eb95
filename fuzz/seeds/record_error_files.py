#!/usr/bin/env python3
"""Writes fuzz/corpus/error_file: error files as torchrun's workers leave them.

Runs functions decorated with torch.distributed.elastic's @record (Debian's
python3-torch) that fail in different ways, with TORCHELASTIC_ERROR_FILE set,
and keeps each file as written. Run with the system Python: /usr/bin/python3.

    record_error_files.py FUZZ_DIR
"""
import os
import subprocess
import sys
import tempfile

CHILD = r'''
import os, sys
from torch.distributed.elastic.multiprocessing.errors import record
kind = sys.argv[1]

@record
def main():
    if kind == "runtime":
        raise RuntimeError("NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, "
                           "unhandled system error")
    if kind == "value":
        raise ValueError("rank 3: bad batch size 0")
    if kind == "unicode":
        raise KeyError("ключ \u2603 \"quoted\"\n second line")
    if kind == "nested":
        try:
            raise OSError(28, "No space left on device")
        except OSError as e:
            raise RuntimeError("checkpoint write failed") from e
    if kind == "exit":
        sys.exit(3)

main()
'''


def main():
    out = os.path.join(sys.argv[1], "corpus", "error_file")
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        for kind in ("runtime", "value", "unicode", "nested", "exit"):
            path = os.path.join(work, kind + ".json")
            env = dict(os.environ, TORCHELASTIC_ERROR_FILE=path)
            subprocess.run([sys.executable, "-c", CHILD, kind], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if os.path.exists(path):
                with open(path, "rb") as f:
                    data = f.read()
                with open(os.path.join(out, "torch-record-" + kind), "wb") as f:
                    f.write(data)


if __name__ == "__main__":
    main()
