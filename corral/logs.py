"""Logging set-up for `corral serve`: one line per event, as JSON for log pipelines or plain for people.

State transitions carry `runner`, `pool`, `from_state`, `to_state` and `reason` as fields, so a JSON log
can be filtered by runner or pool without parsing messages. Every line, from corral or from a library,
passes through `RedactSecrets` on its way out, and uvicorn's loggers go through the same handler, so in
JSON mode every line (tracebacks included) is one JSON object.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

from pythonjsonlogger.json import JsonFormatter

from corral import secrets

LogFormat = Literal["console", "json"]
CONSOLE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
QUIET_LOGGERS = {
    "httpx": logging.WARNING,  # a line per request at INFO; corral's own lines are the ones worth reading
    "httpcore": logging.INFO,  # its DEBUG trace prints response headers and nothing an operator needs
    # a warning with a traceback on every retry of a 5xx; corral reports each call's final outcome itself
    "githubkit": logging.ERROR,
}
_STANDARD_ATTRIBUTES = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class RedactSecrets(logging.Filter):
    """Blank every known secret out of a record: its message, traceback, stack and extra fields.

    The record is rewritten in place (message pre-formatted, traceback pre-rendered), so whatever
    formatter follows, plain or JSON, prints only the redacted text.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = secrets.redact(record.getMessage())
        record.args = None
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        if record.exc_text:
            record.exc_text = secrets.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = secrets.redact(record.stack_info)
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRIBUTES and isinstance(value, str):
                record.__dict__[key] = secrets.redact(value)
        return True


def configure_logging(log_format: LogFormat, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(
            JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s", rename_fields={"levelname": "level"})
        )
    else:
        handler.setFormatter(logging.Formatter(CONSOLE_FORMAT))
    handler.addFilter(RedactSecrets())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name, quiet_level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(quiet_level)
    for name in UVICORN_LOGGERS:
        # uvicorn's default set-up gives these their own plain-text handlers; corral's handler takes them.
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True
