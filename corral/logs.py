"""Logging set-up for `corral serve`: one line per event, as JSON for log pipelines or plain for people.

State transitions carry `runner`, `pool`, `from_state`, `to_state` and `reason` as fields, so a JSON log
can be filtered by runner or pool without parsing messages.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

from pythonjsonlogger.json import JsonFormatter

LogFormat = Literal["console", "json"]
CONSOLE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(log_format: LogFormat, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(
            JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s", rename_fields={"levelname": "level"})
        )
    else:
        handler.setFormatter(logging.Formatter(CONSOLE_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # httpx logs every request at INFO; corral's own lines are the ones worth reading.
    logging.getLogger("httpx").setLevel(logging.WARNING)
