#!/usr/bin/env python3
"""Serves a folder as a read-only S3 bucket through Debian's nginx, the stand-in
for moto_server in bench/s3/s3_vs_s3torchconnector.sh (moto answers 95 to 145
GETs a second on a core, so with moto its own speed is what would be
measured; the issue allows a plain HTTP server answering range GETs).

  static_s3.py ROOT BUCKET LISTEN CONF PREFIX...

ROOT/BUCKET/<key> are the objects. Writes ROOT/_list/<n>.xml, the
ListObjectsV2 answer (one page) for each PREFIX, with the ETags nginx serves
("<mtime hex>-<size hex>", so If-Match and the listing agree), and CONF, an
nginx configuration for path-style requests on LISTEN (addr:port): GET and
HEAD of objects with byte ranges and If-Match are nginx's own; a request with
list-type=2 gets the page for its prefix (an unknown prefix: an empty page).
Signatures are not checked."""
import os
import sys
import time
from urllib.parse import quote
from xml.sax.saxutils import escape


def listing(root, bucket, prefix):
    base = os.path.join(root, bucket)
    keys = []
    for d, _, files in os.walk(os.path.join(base, prefix)):
        for f in files:
            path = os.path.join(d, f)
            keys.append((os.path.relpath(path, base), os.stat(path)))
    keys.sort()
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
           f"<Name>{bucket}</Name><Prefix>{escape(prefix)}</Prefix>",
           f"<KeyCount>{len(keys)}</KeyCount><MaxKeys>{max(1000, len(keys))}</MaxKeys>",
           "<IsTruncated>false</IsTruncated>"]
    for key, st in keys:
        mtime = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(st.st_mtime))
        etag = f"&quot;{int(st.st_mtime):x}-{st.st_size:x}&quot;"
        out.append(f"<Contents><Key>{escape(key)}</Key><LastModified>{mtime}</LastModified>"
                   f"<ETag>{etag}</ETag><Size>{st.st_size}</Size>"
                   "<StorageClass>STANDARD</StorageClass></Contents>")
    out.append("</ListBucketResult>")
    return "\n".join(out) + "\n", len(keys)


def main():
    root, bucket, listen, conf = sys.argv[1:5]
    prefixes = sys.argv[5:]
    root = os.path.abspath(root)
    os.makedirs(os.path.join(root, "_list"), exist_ok=True)
    rules = []
    for n, prefix in enumerate(prefixes):
        xml, count = listing(root, bucket, prefix)
        with open(os.path.join(root, "_list", f"{n}.xml"), "w") as f:
            f.write(xml)
        for spelling in {prefix, quote(prefix, safe="")}:
            rules.append(f'    "{spelling}" /_list/{n}.xml;')
        print(f"static_s3: s3://{bucket}/{prefix}: {count} objects", file=sys.stderr)
    with open(os.path.join(root, "_list", "empty.xml"), "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult '
                'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                f"<Name>{bucket}</Name><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys>"
                "<IsTruncated>false</IsTruncated></ListBucketResult>\n")
    run = os.path.dirname(os.path.abspath(conf))
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1;
daemon off;
pid {run}/nginx.pid;
error_log {run}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {run}/body;
  proxy_temp_path {run}/proxy;
  fastcgi_temp_path {run}/fastcgi;
  uwsgi_temp_path {run}/uwsgi;
  scgi_temp_path {run}/scgi;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  default_type application/octet-stream;
  map $arg_prefix $dtrain_listing {{
{chr(10).join(rules)}
    default /_list/empty.xml;
  }}
  server {{
    listen {listen};
    root {root};
    location ~ ^/{bucket}/?$ {{
      if ($args !~ "list-type=2") {{ return 404; }}
      rewrite ^ $dtrain_listing break;
      default_type application/xml;
    }}
    location /_list/ {{ internal; default_type application/xml; }}
  }}
}}
""")


if __name__ == "__main__":
    main()
