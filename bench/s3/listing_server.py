#!/usr/bin/python3
"""A generated S3 endpoint for listing benchmarks (issue 18).

Serves one bucket holding an ImageFolder that exists only as arithmetic:

    ROOT/train/nCCCCCCCC/nCCCCCCCC_IIIII.JPEG   classes x train-per-class keys
    ROOT/val/nCCCCCCCC/nCCCCCCCC_IIIII.JPEG     classes x val-per-class keys

(1000 x 1281 by default: ImageNet's 1.28 million training keys). Key i of the
sorted key space is computed, not stored, so ListObjectsV2 (list-type=2,
prefix, max-keys, continuation-token, start-after, encoding-type=url)
answers each page in O(page + log keys) time, where moto sorts its whole
bucket on every page. GET (with Range and If-Match) and HEAD of any key
answer one small valid JPEG, the same bytes and ETag for every key, so a
loader can read its first batch. No signatures are checked; a delimiter is
refused (501: dtrain's listings send none).

    listing_server.py --port-file FILE [--bucket data] [--root imagenet]
                      [--classes 1000] [--train-per-class 1281]
                      [--val-per-class 50] [--jpeg FILE]

GET /__stats answers {"list": N, "get": N, "head": N}, the requests served
since the start (or since the last /__stats?reset=1).
"""
import argparse
import hashlib
import http.server
import io
import json
import os
import re
import sys
import threading
import urllib.parse
from xml.sax.saxutils import escape

LAST_MODIFIED = "2026-01-01T00:00:00.000Z"


def make_jpeg():
    try:
        from PIL import Image
    except ImportError:
        sys.exit("listing_server.py: no PIL to make a JPEG; give one with --jpeg FILE")
    img = Image.new("RGB", (64, 48))
    img.putdata([(x * 4, y * 5, 128) for y in range(48) for x in range(64)])
    out = io.BytesIO()
    img.save(out, "JPEG", quality=85)
    return out.getvalue()


class Keyspace:
    """The sorted keys of the generated ImageFolder; key(i) in O(1)."""

    def __init__(self, root, classes, splits):
        self.root = root.strip("/")
        self.classes = classes
        # (split, per class), in key order ("train" < "val").
        self.splits = sorted(splits)
        self.width = len(str(max(per for _, per in splits) - 1))
        self.total = sum(classes * per for _, per in self.splits)

    def key(self, i):
        for split, per in self.splits:
            n = self.classes * per
            if i < n:
                c, j = divmod(i, per)
                return f"{self.root}/{split}/n{c:08d}/n{c:08d}_{j:0{self.width}d}.JPEG"
            i -= n
        raise IndexError(i)

    def lower_bound(self, text):
        """The index of the first key >= text."""
        lo, hi = 0, self.total
        while lo < hi:
            mid = (lo + hi) // 2
            if self.key(mid) < text:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def has(self, key):
        i = self.lower_bound(key)
        return i < self.total and self.key(i) == key


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, bucket, keys, jpeg):
        super().__init__(address, Handler)
        self.bucket = bucket
        self.keys = keys
        self.jpeg = jpeg
        self.etag = '"' + hashlib.md5(jpeg).hexdigest() + '"'
        self.lock = threading.Lock()
        self.stats = {"list": 0, "get": 0, "head": 0}

    def count(self, what):
        with self.lock:
            self.stats[what] += 1


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=(), content_type="application/xml"):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", content_type)
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, message, resource):
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{escape(message)}</Message><Resource>{escape(resource)}</Resource>"
            "<RequestId>listing-server</RequestId></Error>"
        ).encode()
        self.reply(status, body)

    def split_path(self):
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.lstrip("/").split("/", 1)
        bucket = urllib.parse.unquote(parts[0])
        key = urllib.parse.unquote(parts[1]) if len(parts) > 1 else ""
        return bucket, key, urllib.parse.parse_qs(url.query, keep_blank_values=True)

    def do_GET(self):
        bucket, key, query = self.split_path()
        if bucket == "__stats":
            with self.server.lock:
                body = json.dumps(self.server.stats).encode()
                if query.get("reset"):
                    self.server.stats = dict.fromkeys(self.server.stats, 0)
            return self.reply(200, body, content_type="application/json")
        if bucket != self.server.bucket:
            return self.error(404, "NoSuchBucket", "The specified bucket does not exist", bucket)
        if not key:
            return self.list_objects(bucket, query)
        self.object(bucket, key)

    def do_HEAD(self):
        bucket, key, _ = self.split_path()
        if bucket != self.server.bucket:
            return self.error(404, "NoSuchBucket", "The specified bucket does not exist", bucket)
        self.object(bucket, key)

    def object(self, bucket, key):
        self.server.count("head" if self.command == "HEAD" else "get")
        if not self.server.keys.has(key):
            return self.error(404, "NoSuchKey", "The specified key does not exist.", key)
        etag = self.server.etag
        match = self.headers.get("If-Match")
        if match and match != etag:
            return self.error(412, "PreconditionFailed", "At least one of the preconditions "
                              "you specified did not hold", key)
        data = self.server.jpeg
        headers = [("ETag", etag), ("Last-Modified", "Thu, 01 Jan 2026 00:00:00 GMT"),
                   ("Accept-Ranges", "bytes")]
        ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if ranged:
            first = int(ranged.group(1))
            last = min(int(ranged.group(2) or len(data) - 1), len(data) - 1)
            if first >= len(data):
                return self.error(416, "InvalidRange", "The requested range is not satisfiable",
                                  key)
            headers.append(("Content-Range", f"bytes {first}-{last}/{len(data)}"))
            return self.reply(206, data[first:last + 1], headers, "image/jpeg")
        self.reply(200, data, headers, "image/jpeg")

    def list_objects(self, bucket, query):
        self.server.count("list")
        one = lambda name, default="": query.get(name, [default])[0]
        if one("list-type") != "2":
            return self.error(501, "NotImplemented", "only ListObjectsV2 (list-type=2)", bucket)
        if one("delimiter"):
            return self.error(501, "NotImplemented", "no delimiter listings here", bucket)
        prefix = one("prefix")
        max_keys = max(0, min(int(one("max-keys", "1000")), 1000))
        token = one("continuation-token")
        keys = self.server.keys
        if token:
            try:
                i = int(token)  # the index of the next key: opaque to clients
            except ValueError:
                return self.error(400, "InvalidArgument", "The continuation token provided is "
                                  "incorrect", bucket)
        else:
            i = keys.lower_bound(max(prefix, one("start-after")))
            if one("start-after") and i < keys.total and keys.key(i) == one("start-after"):
                i += 1
        url = one("encoding-type") == "url"
        out = []
        while len(out) < max_keys and i < keys.total:
            k = keys.key(i)
            if not k.startswith(prefix):
                break
            out.append(k)
            i += 1
        truncated = i < keys.total and keys.key(i).startswith(prefix)
        etag = escape(self.server.etag, {'"': "&quot;"})
        size = len(self.server.jpeg)
        parts = [
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{len(out)}</KeyCount><MaxKeys>{max_keys}</MaxKeys>"
            f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"
        ]
        if url:
            parts.append("<EncodingType>url</EncodingType>")
        if token:
            parts.append(f"<ContinuationToken>{token}</ContinuationToken>")
        if truncated:
            parts.append(f"<NextContinuationToken>{i}</NextContinuationToken>")
        for k in out:
            name = urllib.parse.quote(k, safe="/") if url else escape(k)
            parts.append(
                f"<Contents><Key>{name}</Key><LastModified>{LAST_MODIFIED}</LastModified>"
                f"<ETag>{etag}</ETag><Size>{size}</Size><StorageClass>STANDARD</StorageClass>"
                "</Contents>")
        parts.append("</ListBucketResult>")
        self.reply(200, "".join(parts).encode())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port-file", required=True, help="written with the port once listening")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--bucket", default="data")
    p.add_argument("--root", default="imagenet")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--train-per-class", type=int, default=1281)
    p.add_argument("--val-per-class", type=int, default=50)
    p.add_argument("--jpeg", help="the bytes every object answers (default: a 64x48 JPEG)")
    args = p.parse_args()
    if args.classes < 1 or args.train_per_class < 1 or args.val_per_class < 1:
        sys.exit("listing_server.py: --classes and --*-per-class must be at least 1")
    jpeg = open(args.jpeg, "rb").read() if args.jpeg else make_jpeg()
    keys = Keyspace(args.root, args.classes,
                    [("train", args.train_per_class), ("val", args.val_per_class)])
    server = Server((args.host, 0), args.bucket, keys, jpeg)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{server.server_address[1]}\n")
    os.replace(tmp, args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
