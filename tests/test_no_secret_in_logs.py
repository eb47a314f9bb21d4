"""No secret in any log line: a whole corral at DEBUG on every logger serves jobs end to end, and not one
line, from corral or from any library, carries the PAT, the webhook secret, the App's private key, the
cloud's password or any JIT config the sandbox issued, verbatim or base64-encoded as it travels in user data.
The redaction filter on corral's handler is tested on its own below; the end-to-end test checks what the
libraries emit before that filter, so it proves the sources are quiet, not only that the net caught them."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from corral import secrets
from corral.logs import configure_logging
from corral.model import RunnerState
from corral.serve import server_config
from corral_sandbox.github import jitconfig
from corral_sandbox.local import LocalCorral, app_github, corral_config, pool_spec
from corral_sandbox.server import Sandbox, bind_socket
from tests.waiting import wait_until

JOBS = 5
CHUNK = 32
"""Secrets are looked for in pieces of this many characters: a leak of twice that, anywhere, holds one."""


class EveryRecord(logging.Handler):
    """Every record as it arrives at the root, before corral's handler: message, traceback, stack, extras."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.loggers: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        fields = {key: str(value) for key, value in record.__dict__.items() if key not in ("msg", "args")}
        fields["message"] = record.getMessage()
        if record.exc_info:
            fields["exception"] = logging.Formatter().formatException(record.exc_info)
        self.lines.append(json.dumps(fields))
        self.loggers.add(record.name)


def all_loggers() -> dict[str, logging.Logger]:
    return {name: lg for name, lg in logging.Logger.manager.loggerDict.items() if isinstance(lg, logging.Logger)}


@pytest.fixture
def root_logging() -> Iterator[None]:
    """Put back the root's handlers and every logger's level, propagation and handlers after the test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    saved = {name: (lg.level, lg.propagate, lg.handlers[:]) for name, lg in all_loggers().items()}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, logger in all_loggers().items():
        logger.level, logger.propagate, logger.handlers[:] = saved.get(name, (logging.NOTSET, True, []))


def every_logger_at_debug(capture: logging.Handler) -> None:
    """Whatever level a library or corral chose for a logger, and wherever uvicorn sent its lines: DEBUG, to us."""
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    root.handlers.insert(0, capture)
    for logger in all_loggers().values():
        logger.setLevel(logging.DEBUG)
        logger.propagate = True


def base64_stretches(secret: str) -> list[str]:
    """How `secret` reads inside any base64 text that contains it, at each of the three byte alignments."""
    stretches = []
    for offset in range(3):
        encoded = base64.b64encode(b"." * offset + secret.encode()).decode()
        stretches.append(encoded[4:-4])
    return stretches


def pieces(text: str) -> list[str]:
    return [text[start : start + CHUNK] for start in range(0, len(text) - CHUNK + 1, CHUNK)]


def run_jobs(corral: LocalCorral, control: httpx.Client) -> None:
    jobs = [
        control.post("/jobs", json={"repo": "octo-org/app", "labels": ["small"], "duration": 0.1}).json()
        for _ in range(JOBS)
    ]

    def all_done() -> bool:
        corral.settle()
        return all(control.get(f"/jobs/{job['id']}").json()["status"] == "completed" for job in jobs)

    wait_until(all_done, timeout=60, what=f"{JOBS} jobs completed")

    def runners_gone() -> bool:
        corral.settle()
        return not corral.runners(states=[s for s in RunnerState if s is not RunnerState.DELETED])

    wait_until(runners_gone, timeout=30, what="every runner deleted")


@pytest.mark.parametrize("auth", ["token", "app"])
def test_at_debug_on_every_logger_no_line_carries_a_secret(
    sandbox: Sandbox,
    control: httpx.Client,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    root_logging: None,
    auth: str,
) -> None:
    configure_logging("json", "DEBUG")
    document = corral_config(sandbox.info, f"sqlite:///{tmp_path / 'c.db'}", {"small": pool_spec(["small"])})
    if auth == "app":
        document["github"] = app_github(sandbox.info)
    capture = EveryRecord()
    issued: list[str] = []  # the sandbox keeps no config it issued: collect them as they go out
    sandbox.call(lambda: sandbox.world.github.jit_config_watchers.append(issued.append))
    corral = LocalCorral(sandbox.info, tmp_path / "corral.yaml", document)
    every_logger_at_debug(capture)  # after uvicorn set up its loggers, so that it does not undo this
    corral.start()
    try:
        run_jobs(corral, control)
    finally:
        corral.stop()
    streams = capsys.readouterr()

    assert len(issued) >= JOBS
    credentials = sandbox.world.credentials
    key_lines = [line for line in Path(sandbox.info.private_key_path).read_text().splitlines() if "-----" not in line]
    named = {
        "the PAT": [sandbox.info.pat],
        "the webhook secret": [sandbox.info.webhook_secret],
        "the App's private key": key_lines,
        "the OpenStack password": [credentials.openstack_password],
        "corral's API token": [corral.token],
        "a JIT config": [piece for config in issued for piece in pieces(config)],
        "a JIT config in base64 user data": [
            piece for config in issued for stretch in base64_stretches(config) for piece in pieces(stretch)
        ],
    }
    where = {
        "a record from a library or corral": "\n".join(capture.lines),
        "corral's log on stderr": streams.err,
        "stdout": streams.out,
    }
    assert "corral.engine" in " ".join(capture.loggers) and "keystoneauth.session" in capture.loggers, (
        "DEBUG really was on: corral and the SDK both logged"
    )
    assert "<body not logged>" in where["a record from a library or corral"], "requests were logged, bodies not"
    for place, text in where.items():
        for what, values in named.items():
            for value in values:
                assert value not in text, f"{what} is in {place}"
        assert not list(jitconfig.find_secrets(text.encode())), f"a JIT config, however wrapped, is in {place}"
    for line in streams.err.splitlines():
        assert line.startswith("{"), line
        json.loads(line)  # every line on corral's handler is JSON, whichever library wrote it


def test_the_redaction_filter_blanks_registered_secrets_and_their_base64_forms(
    capsys: pytest.CaptureFixture[str], root_logging: None
) -> None:
    jit_config = base64.b64encode(json.dumps({"credentials": "x" * 900}).encode()).decode()
    secrets.register_encoded(jit_config)
    secrets.register("a-webhook-secret-to-hide")
    user_data = base64.b64encode(f"#!/bin/sh\nexport JIT='{jit_config}'\n".encode()).decode()
    configure_logging("console", "DEBUG")
    log = logging.getLogger("some.library")
    log.debug("secret %s in a message", "a-webhook-secret-to-hide")
    log.debug("a create: %s", json.dumps({"server": {"user_data": user_data}}))
    log.debug("a JIT config cut short: %s", jit_config[:120])
    log.debug("GET /?token=corral_0123abcd_%s HTTP/1.1", "k" * 43)
    log.debug("Authorization: Bearer corral_0123abcd_%s", "m" * 43)
    log.debug("Authorization: token ghp_%s", "Q" * 36)
    try:
        raise RuntimeError(f"failed with {jit_config}")
    except RuntimeError:
        log.exception("in a traceback")
    log.info("a field", extra={"reason": "webhook secret a-webhook-secret-to-hide"})
    err = capsys.readouterr().err
    for secret in ["a-webhook-secret-to-hide", "ghp_QQQQ", "kkkkkkkkkk", "mmmmmmmmmm"]:
        assert secret not in err
    for piece in pieces(jit_config) + [p for stretch in base64_stretches(jit_config) for p in pieces(stretch)]:
        assert piece not in err
    assert "secret *** in a message" in err and "GET /?token=*** HTTP/1.1" in err
    assert "Bearer corral_0123abcd_***" in err, "the token's id stays readable"
    assert re.search(r"RuntimeError: failed with \*\*\*", err)


@pytest.mark.parametrize("prefix", ["", "a", "ab"])
def test_a_registered_jit_config_is_blanked_inside_base64_at_any_alignment(prefix: str) -> None:
    """Short enough that only the registry, not the long-base64 rule, can catch it."""
    registry = secrets.SecretRegistry()
    registry.register_encoded("jit-Zm9vYmFyYmF6")
    encoded = base64.b64encode(f"{prefix}JIT=jit-Zm9vYmFyYmF6;".encode()).decode()
    assert len(encoded) < 100
    redacted = registry.redact(f"user_data: {encoded}")
    assert "***" in redacted
    for stretch in base64_stretches("jit-Zm9vYmFyYmF6"):
        assert stretch not in redacted


def test_the_oldest_jit_configs_are_forgotten_but_still_blanked_whole() -> None:
    """The registry keeps only the most recent JIT configs (memory stays bounded); an older one is still
    blanked by the long-base64 rule."""
    registry = secrets.SecretRegistry()
    configs = [base64.b64encode(f"config {n} ".encode() * 40).decode() for n in range(secrets.MAX_JIT_CONFIGS + 1)]
    for config in configs:
        registry.register_encoded(config)
    assert registry.redact(f"[{configs[0]}]") == "[***]"
    assert registry.redact(f"[{configs[-1]}]") == "[***]"


def test_uvicorn_lines_are_json_in_json_mode(capsys: pytest.CaptureFixture[str], root_logging: None) -> None:
    """A request handler that raises: uvicorn logs the traceback; in JSON mode it is one JSON line."""

    async def boom(request: Request) -> Response:
        raise RuntimeError("a handler failed")

    configure_logging("json", "INFO")
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(server_config(Starlette(routes=[Route("/boom", boom)]), "127.0.0.1", port))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, what="uvicorn started")
        assert httpx.get(f"http://127.0.0.1:{port}/boom").status_code == 500
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    (error,) = [line for line in lines if line["name"] == "uvicorn.error" and line["level"] == "ERROR"]
    assert "RuntimeError: a handler failed" in error["exc_info"]
