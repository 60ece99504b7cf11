#!/usr/bin/env python3
"""Alertmanager webhook -> Feishu (Lark) custom bot relay. Python standard library only.

Alertmanager has no Feishu receiver, and a Feishu bot hook does not accept Alertmanager's
webhook JSON. Alertmanager posts to http://<listen>/feishu/<channel>; the relay turns the
alert group into a Feishu text message and posts it to that channel's bot.

Config (JSON, --config): {"channels": {"critical": {"url": "https://open.feishu.cn/open-apis/
bot/v2/hook/...", "secret_file": "/etc/feishu-relay/critical.secret"}, ...}}. "secret"
may be given inline instead of "secret_file"; without either, messages are unsigned.

- Signed (when the channel has a secret) as Feishu specifies: sign = base64(HMAC-SHA256
  with key timestamp + "\\n" + secret over an empty message), sent with the timestamp.
- Retried with exponential backoff on network errors, HTTP 429/5xx and Feishu's rate-limit
  codes; the relay answers 502 when delivery finally fails, so Alertmanager retries too.
- Bot URLs (their path is a credential) and secrets are never logged.
"""

import argparse
import base64
import hashlib
import hmac
import json
import logging
import sys
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = logging.getLogger("feishu_relay")
MAX_TEXT = 4000  # Feishu rejects very large messages; alert groups can be long
RATE_LIMIT_CODES = {9499, 11232}  # Feishu's "too many requests" answers (HTTP 200)


def sign(timestamp, secret):
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", digestmod=hashlib.sha256).digest()).decode()


def load_config(path):
    with open(path, encoding="utf-8") as handle:
        cfg = json.load(handle)
    channels = {}
    for name, chan in cfg["channels"].items():
        secret = chan.get("secret")
        if chan.get("secret_file"):
            with open(chan["secret_file"], encoding="utf-8") as handle:
                secret = handle.read().strip()
        channels[name] = {"url": chan["url"], "secret": secret or None}
    return channels


def format_text(payload):
    status = payload.get("status", "firing").upper()
    common = payload.get("commonLabels", {})
    lines = [f"[{status}] {common.get('alertname', 'alerts')} ({len(payload.get('alerts', []))})"]
    for alert in payload.get("alerts", []):
        labels, notes = alert.get("labels", {}), alert.get("annotations", {})
        where = " ".join(f"{k}={labels[k]}" for k in ("Hostname", "node", "instance", "gpu", "UUID") if k in labels)
        lines.append(f"- {alert.get('status', status).upper()} {labels.get('alertname', '')} "
                     f"severity={labels.get('severity', '')} {where}".rstrip())
        for key in ("summary", "description", "action"):
            if notes.get(key):
                lines.append(f"  {key}: {notes[key]}")
    text = "\n".join(lines)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def feishu_message(payload, secret, now=time.time):
    msg = {"msg_type": "text", "content": {"text": format_text(payload)}}
    if secret:
        timestamp = str(int(now()))
        msg.update(timestamp=timestamp, sign=sign(timestamp, secret))
    return msg


def deliver(channel, name, payload, *, attempts=5, backoff=1.0, timeout=10.0, sleep=None):
    """Post to the channel's bot; True when Feishu accepted it. Logs no URL and no secret."""
    for attempt in range(1, attempts + 1):
        # Sign per attempt: Feishu rejects timestamps older than an hour.
        body = json.dumps(feishu_message(payload, channel["secret"])).encode()
        req = urllib.request.Request(channel["url"], data=body, headers={"Content-Type": "application/json"})
        retry, why = True, ""
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                answer = json.loads(resp.read() or b"{}")
            code = answer.get("code", answer.get("StatusCode", 0))
            if code == 0:
                count = len(payload.get("alerts", []))
                LOG.info("channel %s: delivered %d alert(s) on attempt %d", name, count, attempt)
                return True
            retry, why = code in RATE_LIMIT_CODES, f"Feishu code {code}: {answer.get('msg', '')}"
        except urllib.error.HTTPError as exc:
            retry, why = exc.code == 429 or exc.code >= 500, f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            why = type(exc).__name__  # the exception text can hold the URL
        LOG.warning("channel %s: attempt %d/%d failed: %s", name, attempt, attempts, why)
        if not retry:
            break
        if attempt < attempts:
            (sleep or time.sleep)(backoff * 2 ** (attempt - 1))
    return False


def make_handler(channels, **deliver_args):
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, code, text):
            body = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 (http.server's naming)
            if self.path == "/healthz":
                self._answer(200, "ok\n")
            else:
                self._answer(404, "not found\n")

        def do_POST(self):  # noqa: N802
            prefix = "/feishu/"
            name = self.path[len(prefix):] if self.path.startswith(prefix) else None
            if name not in channels:
                self._answer(404, "unknown channel\n")
                return
            try:
                payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if not isinstance(payload, dict):
                    raise ValueError("not an object")
            except ValueError:
                self._answer(400, "body is not Alertmanager webhook JSON\n")
                return
            if deliver(channels[name], name, payload, **deliver_args):
                self._answer(200, "delivered\n")
            else:
                self._answer(502, "Feishu delivery failed\n")

        def log_message(self, fmt, *args):  # request lines go to our logger, at debug
            LOG.debug("%s " + fmt, self.address_string(), *args)

    return Handler


def make_server(address, channels, **deliver_args):
    return ThreadingHTTPServer(address, make_handler(channels, **deliver_args))


def main(argv=None):
    parser = argparse.ArgumentParser(description="Alertmanager webhook to Feishu bot relay")
    parser.add_argument("--config", required=True, help="JSON file with the channels")
    parser.add_argument("--listen", default="127.0.0.1:9099", help="host:port")
    parser.add_argument("--attempts", type=int, default=5)
    parser.add_argument("--backoff", type=float, default=1.0, help="first retry delay in seconds, doubled each time")
    parser.add_argument("--check", action="store_true", help="validate the config and exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        channels = load_config(args.config)
        for name, chan in channels.items():
            if not chan["url"].startswith(("https://", "http://")):
                raise ValueError(f"channel {name}: url is not http(s)")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"bad config {args.config}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.check:
        print(f"config OK: channels {', '.join(sorted(channels))}")
        return 0
    host, _, port = args.listen.rpartition(":")
    server = make_server((host, int(port)), channels, attempts=args.attempts, backoff=args.backoff)
    LOG.info("listening on %s for channels %s", args.listen, ", ".join(sorted(channels)))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
