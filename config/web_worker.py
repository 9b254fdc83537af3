"""gunicorn's threaded worker, with one answer of its own: a request line past gunicorn's limit.

gunicorn reads the request line before any application code runs and caps it at 8190 bytes
(``--limit-request-line``'s maximum; 0 would buffer a line of any length). A line past that got
gunicorn's HTML 414 page, which the API document does not list. This worker answers it as every
other over-long URL is answered (:mod:`config.edges`): ``{"error": "URI_TOO_LONG", ...}``. The
path is unknown at that point (the line was not read to its end), so pages get the JSON too.
Every other error is gunicorn's own handling. ``make run`` starts gunicorn with
``--worker-class config.web_worker.StrataWorker``.
"""

from __future__ import annotations

import json
from typing import Any

from gunicorn.http.errors import LimitRequestLine
from gunicorn.util import write_nonblock
from gunicorn.workers.gthread import ThreadWorker

from config.edges import MAX_URL_BYTES

__all__ = ["StrataWorker", "uri_too_long_response"]


def uri_too_long_response() -> bytes:
    """The raw HTTP answer to a request line gunicorn refused as too long."""
    body = json.dumps(
        {
            "error": "URI_TOO_LONG",
            "message": f"the request target (path and query) is over {MAX_URL_BYTES} bytes",
        }
    ).encode()
    head = (
        "HTTP/1.1 414 URI Too Long\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode("latin-1")
    return head + body


class StrataWorker(ThreadWorker):
    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        if not isinstance(exc, LimitRequestLine):
            super().handle_error(req, client, addr, exc)
            return
        ip = addr[0] if addr else ""
        self.log.warning("Invalid request from ip=%s: %s", ip, exc)
        try:
            write_nonblock(client, uri_too_long_response())
        except OSError:
            self.log.debug("Failed to send error message.")
