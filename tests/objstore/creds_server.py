#!/usr/bin/env python3
"""Container credentials and EC2 instance metadata (IMDSv2) on loopback, for
the credential-provider tests.

  creds_server.py PORT CONTAINER_TOKEN [FAILURES]

GET /creds            container credentials; needs Authorization: CONTAINER_TOKEN
PUT /latest/api/token IMDSv2 session token; needs X-aws-ec2-metadata-token-ttl-seconds
GET /latest/meta-data/iam/security-credentials/[ROLE]  needs X-aws-ec2-metadata-token
(IMDSv1, without a session token, is refused as on instances that require v2)
FAILURES (default 0): the first FAILURES requests for the role's credentials
are answered 503, as a busy instance metadata service does.
"""
import datetime
import http.server
import json
import sys

PORT, CONTAINER_TOKEN = int(sys.argv[1]), sys.argv[2]
FAILURES = [int(sys.argv[3]) if len(sys.argv) > 3 else 0]
SESSION = "imds-session-token"
ROLE = "trainer-role"


def expiry():
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, text, content_type="application/json"):
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self):
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return self.answer(200, SESSION, "text/plain")
        self.answer(400, "bad token request", "text/plain")

    def do_GET(self):
        if self.path == "/creds":
            if self.headers.get("Authorization") != CONTAINER_TOKEN:
                return self.answer(401, '{"code": "Unauthorized"}')
            return self.answer(200, json.dumps({"AccessKeyId": "CONTAINERKEY", "SecretAccessKey": "csecret",
                                                "Token": "ctoken", "Expiration": expiry()}))
        base = "/latest/meta-data/iam/security-credentials/"
        if self.path.startswith(base):
            if self.headers.get("X-aws-ec2-metadata-token") != SESSION:
                return self.answer(401, "IMDSv2 session token required", "text/plain")
            if self.path == base:
                return self.answer(200, ROLE, "text/plain")
            if self.path == base + ROLE and FAILURES[0] > 0:
                FAILURES[0] -= 1
                return self.answer(503, "busy", "text/plain")
            if self.path == base + ROLE:
                return self.answer(200, json.dumps({"Code": "Success", "AccessKeyId": "IMDSKEY",
                                                    "SecretAccessKey": "isecret", "Token": "itoken",
                                                    "Expiration": expiry()}))
        self.answer(404, "not found", "text/plain")


http.server.HTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
