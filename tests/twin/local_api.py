"""The twin's operator API on 127.0.0.1: HTTP requests become the REST proxy events API Gateway would send
to the real Api handler, so every `hpdhc` command can be tried against a simulated cluster."""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.harness.api_gateway import proxy_event, refusal

STAGE = "/v1"
OPERATOR = "arn:aws:iam::123456789012:user/local-operator"  # a breaker resetter of the twin (tests/harness/synth.py)


def serve(harness: Any, port: int) -> ThreadingHTTPServer:
    """Start serving in a background thread; the caller stops it with `shutdown()`."""

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            url = urllib.parse.urlparse(self.path)
            path = url.path.removeprefix(STAGE) or "/"
            query = dict(urllib.parse.parse_qsl(url.query))
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode() if length else None
            refused = refusal(harness.template.template, self.command, path, OPERATOR)
            if refused is not None:  # what API Gateway answers itself (no route, the resource policy)
                response: dict[str, Any] = {"statusCode": refused[0], "body": json.dumps(refused[1])}
            else:
                event = proxy_event(self.command, path, body, query, OPERATOR)
                response = harness.invoke(harness.function_arns[harness.template.api_logical_id], event)
            payload = (response.get("body") or "").encode()
            self.send_response(response["statusCode"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_DELETE = do_PUT = _handle

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the CLI prints what matters
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def endpoint(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{STAGE}"


__all__ = ["endpoint", "serve"]
