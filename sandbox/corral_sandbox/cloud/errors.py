"""Errors shaped the way each OpenStack service shapes them.

Handlers raise `ApiError`; the app turns it into the body the service in question would send, so
openstacksdk parses the same message (and raises the same exception class) it would against a real cloud.
Nova and Cinder wrap the message in a key named after the status (`itemNotFound`, `badRequest`, ...),
Neutron names the exception type, Glance answers with webob's plain HTML page, and Keystone (and
keystonemiddleware in front of every other service) sends `{"error": {...}}`.
"""

from __future__ import annotations

import html

from fastapi import Response
from fastapi.responses import JSONResponse

from corral_sandbox.http import ErrorResponder

FAULT_NAMES = {
    400: "badRequest",
    401: "unauthorized",
    403: "forbidden",
    404: "itemNotFound",
    405: "badMethod",
    409: "conflictingRequest",
    413: "overLimit",
    415: "badMediaType",
    429: "overLimit",
    501: "notImplemented",
    503: "serviceUnavailable",
}
"""Nova's and Cinder's `Fault` names; every other status is a `computeFault`."""

REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
    413: "Request Entity Too Large",
    415: "Unsupported Media Type",
    429: "Too Many Requests",
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}

NEUTRON_TYPES = {
    400: "HTTPBadRequest",
    401: "HTTPUnauthorized",
    403: "HTTPForbidden",
    404: "HTTPNotFound",
    409: "HTTPConflict",
    500: "HTTPInternalServerError",
    503: "HTTPServiceUnavailable",
}


class ApiError(Exception):
    """An error a service answers with; `kind` is Neutron's exception type name when it matters."""

    def __init__(self, status: int, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


def reason(status: int) -> str:
    return REASONS.get(status, "Error")


def nova_error(status: int, message: str) -> Response:
    """Nova's (and Cinder's) fault body: `{"itemNotFound": {"code": 404, "message": ...}}`."""
    name = FAULT_NAMES.get(status, "computeFault")
    fault: dict[str, object] = {"code": status, "message": message}
    if status == 413:
        fault["retryAfter"] = "0"
    return JSONResponse({name: fault}, status_code=status)


def keystone_error(status: int, message: str) -> Response:
    """Keystone's body, also what keystonemiddleware sends for a missing or invalid token."""
    return JSONResponse({"error": {"code": status, "message": message, "title": reason(status)}}, status_code=status)


def neutron_error(status: int, message: str, kind: str | None = None) -> Response:
    body = {"NeutronError": {"type": kind or NEUTRON_TYPES.get(status, "HTTPError"), "message": message, "detail": ""}}
    return JSONResponse(body, status_code=status)


def glance_error(status: int, message: str) -> Response:
    """Glance lets webob render its errors: a small HTML page, not JSON."""
    title = f"{status} {reason(status)}"
    page = (
        f"<html>\n <head>\n  <title>{title}</title>\n </head>\n <body>\n  <h1>{title}</h1>\n"
        f"  {html.escape(message)}<br /><br />\n\n\n\n </body>\n</html>"
    )
    return Response(page, status_code=status, media_type="text/html")


def responder_for(service: str) -> ErrorResponder:
    """The error responder `instrumented_router` uses for injected faults on `service`."""
    if service == "network":
        return lambda status, message: neutron_error(status, message)
    return {"identity": keystone_error, "image": glance_error}.get(service, nova_error)


def render(service: str, error: ApiError) -> Response:
    if service == "network":
        return neutron_error(error.status, error.message, error.kind)
    return responder_for(service)(error.status, error.message)
