"""The `corral` command as an operator runs it: exit codes and what it prints."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml

from corral.cli import main


def write(path: Path, document: object) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


GOOD = {
    "github": {"token": "ghp_secret_value"},
    "pools": {"small": {"scope": {"org": "o"}, "labels": ["small"], "image": "i", "flavor": "f"}},
}


def test_config_check_accepts_a_good_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", str(write(tmp_path / "c.yaml", GOOD))]) == 0
    out = capsys.readouterr().out
    assert "ok (1 pools, default small)" in out and "ghp_secret_value" not in out


def test_config_check_lists_every_problem_and_exits_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = {**GOOD, "default_pool": "nope", "pools": {"small": {**GOOD["pools"]["small"], "max_runners": 0}}}  # type: ignore[dict-item]
    assert main(["config", "check", str(write(tmp_path / "c.yaml", bad))]) == 1
    err = capsys.readouterr().err
    assert "pools.small.max_runners" in err


def test_migrate_creates_the_schema(tmp_path: Path) -> None:
    database = tmp_path / "corral.db"
    assert main(["migrate", "--database-url", f"sqlite:///{database}"]) == 0
    tables = {row[0] for row in sqlite3.connect(database).execute("select name from sqlite_master")}
    assert {"runners", "runner_events", "jobs", "deliveries", "pool_status"} <= tables
