#!/usr/bin/env python3
"""Records real etcd v3 gateway replies for fuzz/corpus/etcd_json and etcd_http.

Starts Debian's etcd (etcd-server) on loopback in a temporary folder, sends the
requests dtrain's etcd client sends (src/launch/rendezvous/etcd_client.cpp,
HTTP/1.1 POST with Connection: close), and stores each raw reply, byte for
byte, as read from the socket. etcd_json inputs start with the operation byte
of fuzz/etcd_json.cpp; etcd_http inputs are the bare replies.

    record_etcd.py FUZZ_DIR
"""
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    data = json.dumps(body).encode()
    request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
               "Content-Type: application/json\r\nAccept: application/json\r\n"
               f"Connection: close\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        raw = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return raw
            raw += chunk


def b64(text):
    return base64.b64encode(text.encode()).decode()


def main():
    fuzz_dir = sys.argv[1]
    work = tempfile.mkdtemp(prefix="dtrain-etcd-record.")
    client, peer = free_port(), free_port()
    etcd = subprocess.Popen(
        ["etcd", "--data-dir", f"{work}/data", "--name", "rec",
         "--listen-client-urls", f"http://127.0.0.1:{client}",
         "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"rec=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                if b"200 OK" in post(client, "/v3/kv/range", {"key": b64("x")}):
                    break
            except OSError:
                pass
            time.sleep(0.1)
        key = "dtrain/rdzv/job/state"
        replies = []  # (op byte, name, raw)
        replies.append((0, "get-absent", post(client, "/v3/kv/range", {"key": b64(key)})))
        replies.append((3, "cas-absent-succeeds", post(client, "/v3/kv/txn", {
            "compare": [{"key": b64(key), "result": "EQUAL", "target": "CREATE",
                         "create_revision": "0"}],
            "success": [{"request_put": {"key": b64(key), "value": b64("0 open")}}],
            "failure": [{"request_range": {"key": b64(key)}}]})))
        replies.append((3, "cas-absent-fails", post(client, "/v3/kv/txn", {
            "compare": [{"key": b64(key), "result": "EQUAL", "target": "CREATE",
                         "create_revision": "0"}],
            "success": [{"request_put": {"key": b64(key), "value": b64("0 open")}}],
            "failure": [{"request_range": {"key": b64(key)}}]})))
        replies.append((4, "cas-value-fails", post(client, "/v3/kv/txn", {
            "compare": [{"key": b64(key), "result": "EQUAL", "target": "VALUE",
                         "value": b64("7 closed")}],
            "success": [{"request_put": {"key": b64(key), "value": b64("1 open")}}],
            "failure": [{"request_range": {"key": b64(key)}}]})))
        replies.append((0, "get-present", post(client, "/v3/kv/range", {"key": b64(key)})))
        replies.append((1, "put", post(client, "/v3/kv/put",
                                       {"key": b64(key), "value": b64("1 complete 2 5")})))
        grant = post(client, "/v3/lease/grant", {"TTL": "10"})
        replies.append((6, "lease-grant", grant))
        lease = json.loads(grant.split(b"\r\n\r\n", 1)[1])["ID"]
        replies.append((2, "put-leased", post(client, "/v3/kv/put", {
            "key": b64("dtrain/rdzv/job/hb/n0"), "value": b64("1"), "lease": lease})))
        replies.append((7, "keep-alive", post(client, "/v3/lease/keepalive", {"ID": lease})))
        replies.append((8, "revoke", post(client, "/v3/lease/revoke", {"ID": lease})))
        replies.append((7, "keep-alive-unknown", post(client, "/v3/lease/keepalive", {"ID": lease})))
        replies.append((8, "revoke-unknown", post(client, "/v3/lease/revoke", {"ID": lease})))
        replies.append((2, "put-leased-unknown", post(client, "/v3/kv/put", {
            "key": b64("dtrain/rdzv/job/hb/n0"), "value": b64("1"), "lease": lease})))
        replies.append((5, "delete", post(client, "/v3/kv/deleterange", {"key": b64(key)})))
        replies.append((5, "delete-absent", post(client, "/v3/kv/deleterange", {"key": b64(key)})))
        replies.append((0, "not-found-path", post(client, "/v3/kv/nothing", {"key": b64(key)})))
        replies.append((0, "bad-request", post(client, "/v3/kv/range", {"key": "@@"})))
        for sub in ("etcd_json", "etcd_http"):
            os.makedirs(f"{fuzz_dir}/corpus/{sub}", exist_ok=True)
        for op, name, raw in replies:
            with open(f"{fuzz_dir}/corpus/etcd_json/{name}", "wb") as f:
                f.write(bytes([op]) + raw)
            with open(f"{fuzz_dir}/corpus/etcd_http/{name}", "wb") as f:
                f.write(raw)
    finally:
        etcd.terminate()
        etcd.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
