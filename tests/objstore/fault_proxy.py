#!/usr/bin/env python3
"""A fault-injecting HTTP/1.1 proxy between dtrain's S3 client and a real S3
API (moto_server), for the tests of retries and their bounds
(tests/objstore/test_fault_proxy.cpp). Run with the venv that
scripts/s3-test-env.sh makes (boto3, for the "replace" fault).

  fault_proxy.py UPSTREAM KEY SECRET PORT_FILE RULES_JSON

It listens on a free loopback port and writes the number to PORT_FILE (whole,
by a rename). Every request is forwarded to UPSTREAM (http://host:port)
byte for byte on a connection of its own: its head, Host and every signed
header included, is not rewritten, so the server checks SigV4 as the client
signed it. The answer comes back as the server sent it, unless a rule says
otherwise, but for its Connection header: the client's connection stays
open for its next request, as S3's do (moto closes each one).

RULES_JSON is a list of rules, each
  {"op": "GetObject", "key": "shards/*", "on": [1, 2] or "all", "fault": NAME,
   ...the fault's parameters}
"op" is the S3 operation the request is (GetObject, HeadObject, PutObject,
ListObjectsV2, UploadPart, ...; "*" or absent: any), "key" an fnmatch pattern
of the object key (absent: any; a listing's key is its prefix), "on" the
occurrences, counted from 1 over the requests that match the rule's op and
key, that get the fault. The first rule whose occurrence it is wins.
Faults:
  slowdown        503 SlowDown with S3's XML error body (not forwarded)
  reset           the connection reset (RST) before any answer (not forwarded)
  reset_mid_body  forwarded; the answer's head and half its body, then RST
  lose_answer     forwarded (the server acts on it), then RST without a byte
                  of the answer
  stall           no byte back for "seconds" (default 30), then closed (not
                  forwarded)
  stall_mid_body  forwarded; the head and half the body, then nothing for
                  "seconds" (default 30), then closed
  truncate        forwarded; the head (Content-Length N) and half the body,
                  then the connection closed cleanly (FIN)
  redirect        301 PermanentRedirect with x-amz-bucket-region: "region"
                  (default eu-west-2), as S3 answers a request sent to the
                  wrong region's endpoint (not forwarded)
  wrong_region    400 AuthorizationHeaderMalformed with x-amz-bucket-region
                  and <Region> in the body, as S3 answers a request signed for
                  the wrong region (not forwarded); "region_header": false
                  leaves the header out (the body alone names the region)
  replace         before forwarding, the object is rewritten on UPSTREAM with
                  boto3 (every byte inverted: same size, another ETag), so a
                  read pinned to the old ETag meets a replaced object

GET /__proxy/log answers the log as JSON: one entry per request, in arrival
order: {"n", "method", "op", "bucket", "key", "range", "if_match", "fault",
"status"} ("status": what the client was sent, 0 when no status line was).
"""
import fnmatch
import json
import os
import re
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.parse

UPSTREAM, KEY, SECRET, PORT_FILE, RULES_TEXT = sys.argv[1:6]
UPSTREAM_HOST, UPSTREAM_PORT = urllib.parse.urlsplit(UPSTREAM).hostname, urllib.parse.urlsplit(UPSTREAM).port
RULES = json.loads(RULES_TEXT)
lock = threading.Lock()
replace_lock = threading.Lock()
matched = [0] * len(RULES)  # requests that matched each rule so far
log = []


class Closed(Exception):
    """The client went away."""


def read_head(sock, buffer):
    """Reads up to the blank line; returns (head bytes, rest of buffer)."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            raise Closed()
        buffer += chunk
        if len(buffer) > 1 << 20:
            raise Closed()
    end = buffer.index(b"\r\n\r\n") + 4
    return buffer[:end], buffer[end:]


def parse_head(head):
    lines = head.decode("latin-1").split("\r\n")
    first = lines[0].split(" ")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return first, headers


def read_exact(sock, buffer, n):
    while len(buffer) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise Closed()
        buffer += chunk
    return buffer[:n], buffer[n:]


def operation(method, target):
    """The S3 operation of a path-style request, its bucket and key."""
    split = urllib.parse.urlsplit(target)
    query = urllib.parse.parse_qs(split.query, keep_blank_values=True)
    path = urllib.parse.unquote(split.path)
    bucket, _, key = path.lstrip("/").partition("/")
    if not key:
        if method == "GET" and "list-type" in query:
            return "ListObjectsV2", bucket, query.get("prefix", [""])[0]
        return f"{method}Bucket", bucket, ""
    if method == "GET":
        return "GetObject", bucket, key
    if method == "HEAD":
        return "HeadObject", bucket, key
    if method == "PUT":
        return ("UploadPart" if "partNumber" in query else "PutObject"), bucket, key
    if method == "POST":
        return ("CreateMultipartUpload" if "uploads" in query else "CompleteMultipartUpload"), bucket, key
    if method == "DELETE":
        return ("AbortMultipartUpload" if "uploadId" in query else "DeleteObject"), bucket, key
    return method, bucket, key


def pick_fault(op, key):
    """The fault for this request (a rule, or None); counts occurrences."""
    with lock:
        chosen = None
        for i, rule in enumerate(RULES):
            if rule.get("op", "*") not in ("*", op):
                continue
            if not fnmatch.fnmatchcase(key, rule.get("key", "*")):
                continue
            matched[i] += 1
            on = rule.get("on", "all")
            if chosen is None and (on == "all" or matched[i] in on):
                chosen = rule
        return chosen


def s3_error(status, reason, code, message, extra_xml="", extra_headers=None, head_only=False):
    body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>"
            f"<Message>{message}</Message>{extra_xml}<RequestId>FAULTPROXY</RequestId>"
            f"<HostId>fault-proxy</HostId></Error>").encode()
    lines = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/xml",
             f"Content-Length: {len(body)}", "x-amz-request-id: FAULTPROXY"]
    lines += [f"{k}: {v}" for k, v in (extra_headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (b"" if head_only else body)


def reset(sock):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def forward(raw_request, method):
    """Sends the request upstream on a new connection; returns (head, body,
    closes) of the answer as the server sent them."""
    up = socket.create_connection((UPSTREAM_HOST, UPSTREAM_PORT), timeout=60)
    try:
        up.sendall(raw_request)
        head, rest = read_head(up, b"")
        first, headers = parse_head(head)
        status = int(first[1])
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            body = b""
        elif "content-length" in headers:
            body, _ = read_exact(up, rest, int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = rest
            while not body.endswith(b"0\r\n\r\n"):
                chunk = up.recv(65536)
                if not chunk:
                    break
                body += chunk
        else:  # to the end of the connection
            body = rest
            while True:
                chunk = up.recv(65536)
                if not chunk:
                    break
                body += chunk
            # The client cannot find the end without a length: close after.
            return head, body, True, status
        # moto closes after every answer; S3 keeps connections open, so the
        # client's connection is kept (Connection is hop-by-hop) and faults
        # also meet reused connections.
        head = re.sub(rb"(?im)^connection:[^\r\n]*\r\n", b"", head)
        return head, body, False, status
    finally:
        up.close()


def boto3_client():
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=UPSTREAM, region_name="us-east-1",
                        aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                        config=Config(s3={"addressing_style": "path"},
                                      request_checksum_calculation="when_required",
                                      response_checksum_validation="when_required"))


# Made before the port is written when a rule replaces objects, so that a
# replacement takes milliseconds, well inside the client's request timeout.
S3 = boto3_client() if any(rule.get("fault") == "replace" for rule in RULES) else None


def replace_object(bucket, key):
    with replace_lock:  # one replacement at a time
        old = S3.get_object(Bucket=bucket, Key=key)["Body"].read()
        S3.put_object(Bucket=bucket, Key=key, Body=bytes(b ^ 0xFF for b in old))


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        sock = self.request
        buffer = b""
        try:
            while True:
                head, buffer = read_head(sock, buffer)
                first, headers = parse_head(head)
                method, target = first[0], first[1]
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    sock.sendall(s3_error(501, "Not Implemented", "NotImplemented",
                                          "fault_proxy.py takes Content-Length bodies only"))
                    return
                body, buffer = read_exact(sock, buffer, int(headers.get("content-length", "0")))
                if target.startswith("/__proxy/log"):
                    with lock:
                        text = json.dumps(log).encode()
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(text) + text)
                    return
                if not self.one(sock, head + body, method, target, headers):
                    return
        except (Closed, ConnectionError, OSError):
            return

    def one(self, sock, raw, method, target, headers):
        """Answers one request; False when the connection is done."""
        op, bucket, key = operation(method, target)
        rule = pick_fault(op, key)
        fault = rule["fault"] if rule else None
        entry = {"method": method, "op": op, "bucket": bucket, "key": key,
                 "range": headers.get("range", ""), "if_match": headers.get("if-match", ""),
                 "fault": fault, "status": 0}
        with lock:
            entry["n"] = len(log) + 1
            log.append(entry)
        seconds = rule.get("seconds", 30) if rule else 0
        if fault == "slowdown":
            entry["status"] = 503
            sock.sendall(s3_error(503, "Slow Down", "SlowDown", "Please reduce your request rate.",
                                  head_only=method == "HEAD"))
            return True
        if fault == "reset":
            reset(sock)
            return False
        if fault == "stall":
            time.sleep(seconds)
            return False
        if fault in ("redirect", "wrong_region"):
            region = rule.get("region", "eu-west-2")
            if fault == "redirect":
                entry["status"] = 301
                sock.sendall(s3_error(
                    301, "Moved Permanently", "PermanentRedirect",
                    "The bucket you are attempting to access must be addressed using the specified "
                    "endpoint. Please send all future requests to this endpoint.",
                    f"<Endpoint>{bucket}.s3.{region}.amazonaws.com</Endpoint><Bucket>{bucket}</Bucket>",
                    {"x-amz-bucket-region": region}, head_only=method == "HEAD"))
            else:
                entry["status"] = 400
                sock.sendall(s3_error(
                    400, "Bad Request", "AuthorizationHeaderMalformed",
                    f"The authorization header is malformed; the region 'us-east-1' is wrong; "
                    f"expecting '{region}'", f"<Region>{region}</Region>",
                    {"x-amz-bucket-region": region} if rule.get("region_header", True) else {},
                    head_only=method == "HEAD"))
            return True
        if fault == "replace":
            replace_object(bucket, key)
        head, body, closes, status = forward(raw, method)
        entry["status"] = status
        if fault == "lose_answer":
            entry["status"] = 0
            reset(sock)
            return False
        if fault in ("reset_mid_body", "stall_mid_body", "truncate") and body:
            sock.sendall(head + body[: len(body) // 2])
            if fault == "reset_mid_body":
                reset(sock)
            elif fault == "stall_mid_body":
                time.sleep(seconds)
            else:
                sock.shutdown(socket.SHUT_WR)
            return False
        sock.sendall(head + body)
        return not closes


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    server = Server(("127.0.0.1", 0), Handler)
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(PORT_FILE + ".tmp", PORT_FILE)
    server.serve_forever()


if __name__ == "__main__":
    main()
