"""A shell set up for another OpenStack: what an OpenStack user's environment holds when they run the demo,
the tests or a benchmark. Its clouds.yaml and secure.yaml have entries named like the sandbox's, pointing at
a loopback port nothing listens on (a connection that used them fails rather than leaves the machine), and
the `OS_*` variables name credentials of their own."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from pathlib import Path

import yaml


def closed_port_url() -> str:
    """A loopback identity URL nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/identity"


def hostile_entry(auth_url: str) -> dict[str, object]:
    """A clouds.yaml entry of the other cloud: credentials of its own, its identity service at `auth_url`."""
    return {
        "auth": {
            "auth_url": auth_url,
            "username": "someone-else",
            "password": "not-the-sandbox-password",
            "project_name": "elsewhere",
            "user_domain_name": "Default",
            "project_domain_name": "Default",
        },
        "region_name": "ElsewhereOne",
        "identity_api_version": 3,
    }


def hostile_variables(folder: Path, cloud_names: Iterable[str], elsewhere: str) -> dict[str, str]:
    """The `OS_*` variables of such a shell, its clouds.yaml and secure.yaml written in `folder`;
    `OS_CLOUD` names the first of `cloud_names`."""
    names = list(cloud_names)
    clouds = folder / "clouds.yaml"
    clouds.write_text(yaml.safe_dump({"clouds": {name: hostile_entry(elsewhere) for name in names}}))
    secure = folder / "secure.yaml"
    secure.write_text(yaml.safe_dump({"clouds": {name: {"auth": {"auth_url": elsewhere}} for name in names}}))
    return {
        "OS_CLIENT_CONFIG_FILE": str(clouds),
        "OS_CLIENT_SECURE_FILE": str(secure),
        "OS_CLOUD": names[0],
        "OS_AUTH_URL": elsewhere,
        "OS_USERNAME": "someone-else",
        "OS_PASSWORD": "not-the-sandbox-password",
        "OS_PROJECT_NAME": "elsewhere",
        "OS_USER_DOMAIN_NAME": "Default",
        "OS_PROJECT_DOMAIN_NAME": "Default",
        "OS_REGION_NAME": "ElsewhereOne",
        "OS_INTERFACE": "admin",
    }
