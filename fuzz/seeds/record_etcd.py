#!/usr/bin/env python3
"""Records real etcd v3 gateway replies for fuzz/corpus/etcd_json.

Starts Debian's etcd (etcd-server) on loopback in a temporary folder, sends the
requests dtrain's etcd client sends (src/launch/rendezvous/etcd_client.cpp:
HTTP POSTs of JSON bodies) and stores each reply as fuzz/etcd_json.cpp reads
it: the operation byte, the index of the HTTP status in its kStatuses, and the
body byte for byte (the HTTP framing is libcurl's, not fuzzed here).

    record_etcd.py FUZZ_DIR
"""
import base64
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

# fuzz/etcd_json.cpp's kStatuses.
STATUSES = [200, 400, 404, 500, 503, 204, 301, 429]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    """(status, body bytes) of one POST."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", path, json.dumps(body),
                           {"Content-Type": "application/json", "Accept": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


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
                if post(client, "/v3/kv/range", {"key": b64("x")})[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        key = "dtrain/rdzv/job/state"
        replies = []  # (op byte, name, (status, body))
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
        lease = json.loads(grant[1])["ID"]
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
        os.makedirs(f"{fuzz_dir}/corpus/etcd_json", exist_ok=True)
        for op, name, (status, body) in replies:
            with open(f"{fuzz_dir}/corpus/etcd_json/{name}", "wb") as f:
                f.write(bytes([op, STATUSES.index(status)]) + body)
    finally:
        etcd.terminate()
        etcd.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
