"""A real c10d TCPStore client (whichever torch runs this) against a store
server, for tests/comm/store_server/test_store_python_clients.cpp.

  python_store_client.py PORT ops PREFIX       every query this release has, checked
  python_store_client.py PORT wait KEY         wait for KEY, print its value
  python_store_client.py PORT set KEY VALUE

The expected values are what each release's own server answered to the same
calls (see test_store_server.cpp's recordings). Prints OK last on success.
"""
import datetime
import sys

import torch
import torch.distributed as dist


def connect(port):
    return dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=20))


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")


def ops(s, p):
    s.set(p + "k", "v")
    check("get", s.get(p + "k"), b"v")
    check("add", (s.add(p + "c", 5), s.add(p + "c", 2)), (5, 7))
    check("compare_set swaps", s.compare_set(p + "k", "v", "w"), b"w")
    check("compare_set keeps", s.compare_set(p + "k", "x", "y"), b"w")
    check("compare_set creates", s.compare_set(p + "new", "", "z"), b"z")
    before = s.num_keys()
    s.set(p + "extra", "1")
    check("num_keys", s.num_keys(), before + 1)
    check("delete_key", (s.delete_key(p + "k"), s.delete_key(p + "k")), (True, False))
    s.wait([p + "c", p + "new"])
    try:
        s.wait([p + "never"], datetime.timedelta(milliseconds=300))
        sys.exit("wait for a missing key returned")
    except RuntimeError:  # DistStoreError derives from it in 2.x
        pass
    if hasattr(s, "multi_get"):  # 2.x
        s.append(p + "a", "x")
        s.append(p + "a", "y")
        check("multi_get", s.multi_get([p + "a", p + "c"]), [b"xy", b"7"])
        s.multi_set([p + "m1", p + "m2"], ["1", "2"])
        check("check", (s.check([p + "m1", p + "m2"]), s.check([p + "nope"])), (True, False))
        s.queue_push(p + "q", "a")
        s.queue_push(p + "q", "b")
        check("queue_len", s.queue_len(p + "q"), 2)
        check("queue_pop", s.queue_pop(p + "q"), b"a")
        keys = set(s.list_keys())
        check("list_keys", {p + "a", p + "m1", p + "m2"} <= keys, True)
    # After a timed-out wait a 1.13 client's connection still carries the
    # server's later STOP_WAITING, so this release's last call is the wait.


def main():
    port, role = int(sys.argv[1]), sys.argv[2]
    s = connect(port)
    if role == "ops":
        ops(s, sys.argv[3])
    elif role == "wait":
        print("waiting", flush=True)
        s.wait([sys.argv[3]])
        print(s.get(sys.argv[3]).decode())
    elif role == "set":
        s.set(sys.argv[3], sys.argv[4])
    print(f"OK torch {torch.__version__}")


if __name__ == "__main__":
    main()
