#!/usr/bin/env python3
"""Records the s3_xml fuzz target's seed corpus (fuzz/s3_xml.cpp) from a real
moto_server on loopback: the raw XML bodies of ListObjectsV2 pages (one page,
truncated pages with continuation tokens, CommonPrefixes, url-encoded keys
with spaces, '+', '%', UTF-8 and control bytes, an empty listing) and of S3's
<Error> replies (NoSuchBucket, NoSuchKey, SignatureDoesNotMatch,
InvalidAccessKeyId, PreconditionFailed, InvalidRange, BucketAlreadyOwnedByYou),
as botocore received them (its before-parse event).

  /var/cache/dtrain/s3-test-venv/bin/python fuzz/seeds/record_s3.py fuzz/corpus/s3_xml

Each file is the target's input: byte 0 the operation, byte 1 the status
(the tables in fuzz/s3_xml.cpp), then the body; a listing of several pages
holds them separated by fuzz/s3_xml.cpp's kPageSeparator.
"""
import os
import socket
import subprocess
import sys
import time

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

# Must match fuzz/s3_xml.cpp.
OP_LIST_PAGE, OP_LIST_ALL, OP_GET, OP_PUT, OP_HEAD, OP_DELETE, OP_GET_RANGED = range(7)
STATUSES = [200, 206, 301, 307, 400, 403, 404, 409, 412, 416, 429, 500, 501, 503, 204, 304]
PAGE_SEPARATOR = b"\n--dtrain-fuzz-page--\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(out):
    os.makedirs(out, exist_ok=True)
    port = free_port()
    server = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "moto_server"),
                               "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        record(endpoint, out)
    finally:
        server.terminate()
        server.wait(10)


def record(endpoint, out):
    config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                    request_checksum_calculation="when_required",
                    response_checksum_validation="when_required")
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id="fuzz", aws_secret_access_key="fuzz", config=config)
    seen = []

    def keep(response_dict, **_):
        body = response_dict["body"]
        if not isinstance(body, bytes):  # GetObject's stream
            body = body.read()
        seen.append((response_dict["status_code"], body, response_dict["headers"]))

    s3.meta.events.register("before-parse.s3", keep)

    def call(fn, **kwargs):
        seen.clear()
        try:
            fn(**kwargs)
        except ClientError:
            pass
        return list(seen)

    def write(name, op, pages, headers=()):
        """headers: the response headers to keep in front of the body."""
        status = pages[0][0]
        index = STATUSES.index(status) if status in STATUSES else 0
        head = b""
        if headers:
            head = b"".join(f"{h}: {pages[0][2][h]}\n".encode() for h in headers
                            if h in pages[0][2]) + b"\n"
        body = head + PAGE_SEPARATOR.join(p[1] for p in pages)
        with open(os.path.join(out, name), "wb") as f:
            f.write(bytes([op, index]) + body)

    s3.create_bucket(Bucket="data")
    keys = ["train/shard-000000.tar", "train/shard-000001.tar", "train/a b+c%d.tar",
            "train/\u00e9t\u00e9/x.jpg", "train/tab\there", "val/shard-000000.tar", "ckpt/step-100.pt"]
    for k in keys:
        s3.put_object(Bucket="data", Key=k, Body=b"x" * (len(k) * 7))
    s3.create_bucket(Bucket="empty")

    write("list-one-page", OP_LIST_PAGE,
          call(s3.list_objects_v2, Bucket="data", Prefix="train/", EncodingType="url"))
    write("list-empty", OP_LIST_PAGE, call(s3.list_objects_v2, Bucket="empty", EncodingType="url"))
    write("list-delimiter", OP_LIST_PAGE,
          call(s3.list_objects_v2, Bucket="data", Delimiter="/", EncodingType="url"))
    write("list-not-encoded", OP_LIST_PAGE, call(s3.list_objects_v2, Bucket="data"))
    # Pages of 2 keys with continuation tokens, all of them.
    pages = []
    token = None
    while True:
        kwargs = {"Bucket": "data", "MaxKeys": 2, "EncodingType": "url"}
        if token:
            kwargs["ContinuationToken"] = token
        seen.clear()
        r = s3.list_objects_v2(**kwargs)
        pages += seen
        token = r.get("NextContinuationToken")
        if not r.get("IsTruncated"):
            break
    write("list-truncated-page", OP_LIST_PAGE, pages[:1])
    write("list-all-pages", OP_LIST_ALL, pages)

    write("error-no-such-bucket", OP_LIST_PAGE, call(s3.list_objects_v2, Bucket="nobucket"))
    write("error-no-such-key", OP_GET, call(s3.get_object, Bucket="data", Key="train/missing"))
    write("error-invalid-range", OP_GET,
          call(s3.get_object, Bucket="data", Key=keys[0], Range="bytes=100000-100010"))
    write("error-precondition", OP_PUT,
          call(s3.put_object, Bucket="data", Key=keys[0], Body=b"y", IfNoneMatch="*"))
    write("error-no-such-bucket-delete", OP_DELETE,
          call(s3.delete_bucket, Bucket="nobucket"))
    write("get-ranged", OP_GET_RANGED,
          call(s3.get_object, Bucket="data", Key=keys[0], Range="bytes=10-109"),
          ["content-range", "content-length", "etag", "last-modified"])
    write("get-whole", OP_GET, call(s3.get_object, Bucket="data", Key=keys[0]),
          ["content-length", "etag"])
    write("head-present", OP_HEAD, call(s3.head_object, Bucket="data", Key=keys[0]),
          ["content-length", "etag", "last-modified"])
    write("put-created", OP_PUT, call(s3.put_object, Bucket="data", Key="ckpt/new", Body=b"w"),
          ["etag"])
    write("head-missing", OP_HEAD, call(s3.head_object, Bucket="data", Key="missing"))
    # A wrong key once moto checks signatures would need IAM; moto's
    # signature errors come from its IAM-backed mode (tests/objstore), so
    # record them there: INITIAL_NO_AUTH_ACTION_COUNT=0 in a second server.


def record_auth_errors(out):
    port = free_port()
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="0")
    server = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "moto_server"),
                               "-H", "127.0.0.1", "-p", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1})
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="AKIAUNKNOWN000000000", aws_secret_access_key="x",
                          config=config)
        seen = []
        s3.meta.events.register("before-parse.s3",
                                lambda response_dict, **_: seen.append(
                                    (response_dict["status_code"], response_dict["body"],
                                     response_dict["headers"])))
        try:
            s3.list_objects_v2(Bucket="data")
        except ClientError:
            pass
        if seen:
            status, body, _ = seen[0]
            index = STATUSES.index(status) if status in STATUSES else 0
            with open(os.path.join(out, "error-invalid-access-key"), "wb") as f:
                f.write(bytes([OP_LIST_PAGE, index]) + body)
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main(sys.argv[1])
    record_auth_errors(sys.argv[1])
