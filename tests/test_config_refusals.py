"""A configuration that could not work is refused the same way in all three places an operator meets it:
`corral config check`, `corral serve` at start, and a reload of a running corral (POST /api/v1/reload);
and none of the three ever repeats a secret from the file, even when the YAML around it is broken."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from corral.cli import main
from corral_sandbox.local import LocalCorral, corral_config, pool_spec
from corral_sandbox.server import Sandbox


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """`corral serve` sets up the root logger for the process; put the test run's back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def running(sandbox: Sandbox, tmp_path: Path) -> Iterator[LocalCorral]:
    document = corral_config(sandbox.info, f"sqlite:///{tmp_path / 'c.db'}", {"small": pool_spec(["small"])})
    corral = LocalCorral(sandbox.info, tmp_path / "corral.yaml", document).start()
    yield corral
    corral.stop()


def empty_webhook_secret(document: dict[str, Any]) -> str:
    document["github"]["webhook_secret"] = ""
    return yaml.safe_dump(document)


def short_webhook_secret(document: dict[str, Any]) -> str:
    document["github"]["webhook_secret"] = "hunter2"
    return yaml.safe_dump(document)


def pat_on_a_broken_line(document: dict[str, Any]) -> str:
    """The token line with a stray `: [` after the token: the kind of slip PyYAML used to quote back."""
    text = yaml.safe_dump(document)
    token = document["github"]["token"]
    return text.replace(f"token: {token}\n", f"token: {token}: [\n")


BROKEN: dict[str, tuple[Callable[[dict[str, Any]], str], str]] = {
    "empty webhook secret": (empty_webhook_secret, "github.webhook_secret: empty (at least 16 characters)"),
    "short webhook secret": (short_webhook_secret, "github.webhook_secret: too short (at least 16 characters)"),
    "PAT on a broken line": (pat_on_a_broken_line, "not valid YAML at line "),
}


def assert_no_fragment_of(secret: str, text: str) -> None:
    """Not the secret, and no 8 characters in a row of it either (PyYAML used to show 27 of 36)."""
    for start in range(len(secret) - 7):
        assert secret[start : start + 8] not in text, f"a fragment of a secret: {secret[start : start + 8]!r}"


@pytest.mark.parametrize("case", BROKEN)
def test_config_check_refuses_and_repeats_no_secret(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    make, expected = BROKEN[case]
    path = tmp_path / "corral.yaml"
    path.write_text(make(corral_config(sandbox.info, "sqlite:///c.db", {"small": pool_spec(["small"])})))
    assert main(["config", "check", str(path)]) == 1
    out = capsys.readouterr()
    assert expected in out.err
    assert_no_fragment_of(sandbox.info.pat, out.out + out.err)


@pytest.mark.parametrize("case", BROKEN)
def test_serve_refuses_to_start_and_repeats_no_secret(
    sandbox: Sandbox,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    restore_logging: None,
    case: str,
) -> None:
    make, expected = BROKEN[case]
    path = tmp_path / "corral.yaml"
    path.write_text(make(corral_config(sandbox.info, f"sqlite:///{tmp_path / 'c.db'}", {"s": pool_spec(["s"])})))
    assert main(["serve", "--config", str(path), "--listen", "127.0.0.1:0"]) == 1
    out = capsys.readouterr()
    assert expected in out.err
    assert_no_fragment_of(sandbox.info.pat, out.out + out.err + caplog.text)
    assert not (tmp_path / "c.db").exists(), "refused before touching the database"


@pytest.mark.parametrize("case", BROKEN)
def test_a_reload_is_refused_and_neither_the_answer_nor_the_log_repeats_a_secret(
    running: LocalCorral, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    make, expected = BROKEN[case]
    good = running.config_path.read_text()
    generation = running.service.engine.generation
    running.config_path.write_text(make(yaml.safe_load(good)))
    with caplog.at_level(logging.DEBUG), running.api() as api:
        answer = api.post("/api/v1/reload")
    assert answer.status_code == 422
    body = answer.json()
    assert body["reloaded"] is False and body["generation"] == generation
    assert any(expected in problem for problem in body["problems"])
    assert "reload refused" in caplog.text
    assert_no_fragment_of(running.sandbox.pat, answer.text + caplog.text)
    assert_no_fragment_of(running.sandbox.webhook_secret, answer.text + caplog.text)


def test_serve_refused_by_the_otel_environment_says_so_not_that_the_file_is_wrong(
    sandbox: Sandbox,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    restore_logging: None,
) -> None:
    """A sound config file with `OTEL_TRACES_EXPORTER` naming an exporter nobody installed: corral refuses to
    start, under the environment's name. Until 2026-12-06 the refusal came under the file's ("corral.yaml:
    1 problem(s)"), sending the operator to a file with nothing wrong in it."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    path = tmp_path / "corral.yaml"
    path.write_text(
        yaml.safe_dump(corral_config(sandbox.info, f"sqlite:///{tmp_path / 'c.db'}", {"s": pool_spec(["s"])}))
    )
    assert main(["serve", "--config", str(path), "--listen", "127.0.0.1:0"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "the OTEL_* environment: 1 problem(s)"
    assert err[1].startswith("  - OTEL_TRACES_EXPORTER: no span exporter 'zipkin' is installed")
    assert not (tmp_path / "c.db").exists(), "refused before touching the database"
