#!/usr/bin/env python3
"""Stand-in for Feishu in the molecule scenario: appends each POST as a JSON line
{"received": epoch seconds, "path": ..., "body": ...} and answers as Feishu does."""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

ADDRESS, OUT = sys.argv[1], sys.argv[2]


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with open(OUT, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"received": time.time(), "path": self.path, "body": body}) + "\n")
        answer = b'{"code":0,"msg":"success"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


host, _, port = ADDRESS.rpartition(":")
HTTPServer((host, int(port)), Handler).serve_forever()
