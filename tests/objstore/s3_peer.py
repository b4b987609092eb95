#!/usr/bin/env python3
"""The independent side of dtrain's object-store tests: botocore signs and
boto3 reads and writes (tests/objstore). Run with the venv that
scripts/s3-test-env.sh makes.

  s3_peer.py sign                     JSON cases on stdin -> botocore's requests on stdout
  s3_peer.py setup ENDPOINT           IAM user + key with s3:* on moto -> {"key","secret"}
  s3_peer.py put ENDPOINT KEY SECRET BUCKET      {"object key": "body as hex"} on stdin
  s3_peer.py get ENDPOINT KEY SECRET BUCKET OBJ  -> {"size","sha256","etag"}
  s3_peer.py download ENDPOINT KEY SECRET BUCKET OBJ PATH
  s3_peer.py list ENDPOINT KEY SECRET BUCKET PREFIX -> [keys]
  s3_peer.py uploads ENDPOINT KEY SECRET BUCKET  -> number of unfinished multipart uploads
"""
import datetime
import hashlib
import json
import sys
import urllib.parse
from unittest import mock

import boto3
import botocore.auth
from botocore.config import Config


class Captured(Exception):
    pass


def client(endpoint, key, secret, token=None, region="us-east-1", addressing="path", service="s3"):
    config = Config(
        s3={"addressing_style": addressing},
        retries={"max_attempts": 1, "mode": "standard"},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return boto3.client(service, endpoint_url=endpoint, region_name=region,
                        aws_access_key_id=key, aws_secret_access_key=secret,
                        aws_session_token=token, config=config)


def sign(cases):
    """Each case names a boto3 S3 call; botocore builds and signs it at the
    case's fixed date, and the request is caught before it is sent."""
    out = []
    for case in cases:
        c = client(case.get("endpoint"), case["access_key"], case["secret"], case.get("token"),
                   case.get("region", "us-east-1"), case.get("addressing", "path"))
        captured = {}

        def catch(request, **_):
            captured["url"] = request.url
            captured["headers"] = {k.lower(): (v if isinstance(v, str) else v.decode())
                                   for k, v in request.headers.items()}
            raise Captured()

        c.meta.events.register("before-send.s3", catch)
        params = dict(case["params"])
        if "Body" in params:
            params["Body"] = bytes.fromhex(params["Body"])
        when = datetime.datetime.strptime(case["date"], "%Y%m%dT%H%M%SZ")
        with mock.patch.object(botocore.auth.datetime, "datetime",
                               mock.Mock(wraps=datetime.datetime)) as fake:
            fake.utcnow.return_value = when
            fake.now.return_value = when.replace(tzinfo=datetime.timezone.utc)
            try:
                getattr(c, case["op"])(**params)
            except Captured:
                pass
        headers = captured["headers"]
        signed = headers["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
        # The HTTP layer adds Host after signing, from the URL.
        headers.setdefault("host", urllib.parse.urlsplit(captured["url"]).netloc)
        out.append({"url": captured["url"], "authorization": headers["authorization"],
                    "signed": {name: headers[name] for name in signed}})
    return out


def setup(endpoint):
    """moto checks signatures against IAM users once INITIAL_NO_AUTH_ACTION_COUNT
    requests have passed: make one with a key that may do anything."""
    iam = client(endpoint, "bootstrap", "bootstrap", service="iam")
    iam.create_user(UserName="dtrain")
    policy = {"Version": "2012-10-17",
              "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    iam.put_user_policy(UserName="dtrain", PolicyName="all", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="dtrain")["AccessKey"]
    return {"key": key["AccessKeyId"], "secret": key["SecretAccessKey"]}


def main(argv):
    cmd = argv[1]
    if cmd == "sign":
        result = sign(json.load(sys.stdin))
    elif cmd == "setup":
        result = setup(argv[2])
    else:
        endpoint, key, secret, bucket = argv[2:6]
        s3 = client(endpoint, key, secret)
        if cmd == "put":
            try:
                s3.create_bucket(Bucket=bucket)
            except s3.exceptions.BucketAlreadyOwnedByYou:
                pass
            for name, body in json.load(sys.stdin).items():
                s3.put_object(Bucket=bucket, Key=name, Body=bytes.fromhex(body))
            result = "ok"
        elif cmd == "get":
            answer = s3.get_object(Bucket=bucket, Key=argv[6])
            body = answer["Body"].read()
            result = {"size": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                      "etag": answer["ETag"]}
        elif cmd == "download":
            s3.download_file(bucket, argv[6], argv[7])
            result = "ok"
        elif cmd == "list":
            keys = []
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=argv[6]):
                keys += [o["Key"] for o in page.get("Contents", [])]
            result = keys
        elif cmd == "uploads":
            result = len(s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []))
        else:
            raise SystemExit(f"unknown command {cmd}")
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main(sys.argv)
