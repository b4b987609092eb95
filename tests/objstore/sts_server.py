#!/usr/bin/env python3
"""A small STS for the web-identity tests (moto's never expires credentials
and never reads the token): AssumeRoleWithWebIdentity answers credentials
that live LIFETIME seconds, only when WebIdentityToken equals the content of
EXPECTED_TOKEN_FILE at that moment; GET /count says how many were issued.

  sts_server.py PORT EXPECTED_TOKEN_FILE LIFETIME
"""
import datetime
import http.server
import sys
import urllib.parse

PORT, TOKEN_FILE, LIFETIME = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
issued = 0


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.answer(200, str(issued))

    def do_POST(self):
        global issued
        length = int(self.headers.get("Content-Length", "0"))
        form = urllib.parse.parse_qs(self.rfile.read(length).decode(), keep_blank_values=True)
        field = lambda name: form.get(name, [""])[0]
        with open(TOKEN_FILE) as f:
            expected = f.read().strip()
        if field("Action") != "AssumeRoleWithWebIdentity" or field("Version") != "2011-06-15" \
                or not field("RoleArn") or not field("RoleSessionName"):
            return self.answer(400, "<ErrorResponse><Error><Code>InvalidParameterValue</Code>"
                                    "<Message>bad request</Message></Error></ErrorResponse>")
        if field("WebIdentityToken") != expected:
            return self.answer(403, "<ErrorResponse><Error><Code>InvalidIdentityToken</Code>"
                                    "<Message>token mismatch</Message></Error></ErrorResponse>")
        issued += 1
        expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=LIFETIME)
        self.answer(200, f"""<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Credentials>
      <AccessKeyId>ASIATEST{issued:04d}</AccessKeyId>
      <SecretAccessKey>secret-{issued}</SecretAccessKey>
      <SessionToken>token-{issued}</SessionToken>
      <Expiration>{expires.strftime('%Y-%m-%dT%H:%M:%SZ')}</Expiration>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>""")


server = http.server.HTTPServer(("127.0.0.1", PORT), Handler)
print("ready", flush=True)
server.serve_forever()
