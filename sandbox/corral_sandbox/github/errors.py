"""Errors shaped the way GitHub's REST API shapes them.

GitHub answers every error with `{"message", "documentation_url", "status"}` (the status as a string);
githubkit parses that body into `BasicError`, so corral sees the same message it would see in production.
Handlers raise `GitHubError`; the app renders it.
"""

from __future__ import annotations

from fastapi import Response
from fastapi.responses import JSONResponse

DOCS = "https://docs.github.com/rest"


class GitHubError(Exception):
    """An error response a handler or the auth/rate-limit hook wants to send."""

    def __init__(
        self,
        status: int,
        message: str,
        documentation_url: str = DOCS,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.documentation_url = documentation_url
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, self.documentation_url, self.headers)


def error_response(
    status: int, message: str, documentation_url: str = DOCS, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = {"message": message, "documentation_url": documentation_url, "status": str(status)}
    return JSONResponse(body, status_code=status, headers=headers)


def fault_response(status: int, message: str) -> Response:
    """The `ErrorResponder` for injected endpoint faults."""
    return error_response(status, message)


def not_found() -> GitHubError:
    return GitHubError(404, "Not Found")


def bad_credentials() -> GitHubError:
    return GitHubError(401, "Bad credentials")


def invalid_request(detail: str) -> GitHubError:
    """GitHub's 422 for a body that fails its JSON schema, e.g. `"name" wasn't supplied.`"""
    return GitHubError(422, f"Invalid request.\n\n{detail}")
