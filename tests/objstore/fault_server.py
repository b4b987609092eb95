#!/usr/bin/env python3
"""An HTTP server that misbehaves on purpose, for the fault tests of dtrain's
S3 client over its real transport (libcurl): each request takes the next
fault from a script, then behaves like S3 serving one object.

  fault_server.py PORT FAULT[,FAULT...]

Faults: reset (close without answering), truncate (promise the whole body,
send half, close), stall (answer nothing for 30 s), slowdown (503 SlowDown),
html (200 text/html, as a web server that is not S3), redirect (301
PermanentRedirect with x-amz-bucket-region: eu-west-2), ok.
GET /__count answers how many requests came (not counted itself).
"""
import http.server
import socket
import sys
import threading
import time

PORT = int(sys.argv[1])
SCRIPT = [f for f in sys.argv[2].split(",") if f]
BODY = bytes(range(256)) * 40  # 10240 bytes
lock = threading.Lock()
count = 0


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body, content_type="application/xml", extra=None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", '"fixed-etag"')
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_one(self):
        global count
        if self.path == "/__count":
            return self.send(200, str(count).encode(), "text/plain")
        with lock:
            fault = SCRIPT[count] if count < len(SCRIPT) else "ok"
            count += 1
        if fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.close_connection = True
            return
        if fault == "stall":
            time.sleep(30)
            return
        if fault == "slowdown":
            return self.send(503, b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>")
        if fault == "html":
            return self.send(200, b"<html><body><h1>Welcome to nginx!</h1></body></html>", "text/html")
        if fault == "redirect":
            return self.send(301, b"<Error><Code>PermanentRedirect</Code><Message>use the other endpoint</Message></Error>",
                             extra={"x-amz-bucket-region": "eu-west-2"})
        if fault == "truncate":
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.send_header("ETag", '"fixed-etag"')
            self.end_headers()
            self.wfile.write(BODY[: len(BODY) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.send(200, BODY, "application/octet-stream")

    do_GET = handle_one
    do_HEAD = handle_one


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


Server(("127.0.0.1", PORT), Handler).serve_forever()
