"""Keep request and response bodies of the OpenStack SDK out of every log, at every level.

keystoneauth logs each request at DEBUG as a curl command line, body included (`-d '...'`), and each
response body. A server create's body carries the user data, that is the runner's JIT config, and its
answer carries the server's admin password; a token request carries the cloud password. With corral at
DEBUG that meant a JIT credential in the log for every runner. The request line (method, URL, headers,
whose tokens keystoneauth already hashes) stays: it is what one reads DEBUG logs for.
"""

from __future__ import annotations

import logging

import openstack.connection

from corral import secrets

BODY_MARK = " -d '"
KEYSTONEAUTH_LOGGERS = (
    "keystoneauth.session",  # everything, when openstacksdk does not split the loggers (its default)
    "keystoneauth.session.request",
    "keystoneauth.session.response",
    "keystoneauth.session.body",
)
AUTH_SECRETS = ("password", "application_credential_secret", "token", "secret")


class DropBodies(logging.Filter):
    """Drops response-body records and cuts the body off request lines; everything else passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.name.endswith(".body") or message.startswith("RESP BODY:"):
            return False
        if BODY_MARK in message:
            record.msg = message[: message.index(BODY_MARK)] + " -d <body not logged>"
            record.args = None
        return True


def keep_bodies_out_of_logs(connection: openstack.connection.Connection) -> None:
    """Filter keystoneauth's loggers (once per process) and register the cloud's credentials for redaction."""
    for name in KEYSTONEAUTH_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, DropBodies) for existing in logger.filters):
            logger.addFilter(DropBodies())
    logging.getLogger("keystoneauth.session.body").setLevel(logging.INFO)
    auth = connection.config.config.get("auth") or {}
    for key in AUTH_SECRETS:
        value = auth.get(key)
        if isinstance(value, str):
            secrets.register(value)
