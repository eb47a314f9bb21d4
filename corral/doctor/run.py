"""`run_doctor`: load the configuration, run the three sections at once, each within its deadline, print.

The sections (cloud, GitHub, database) run in daemon threads, side by side: a cloud that hangs must not
hold up the database's answer, and a thread stuck in a library call past its deadline is abandoned (the
process can still exit) and reported as a failure with whatever it had found by then. Each call inside is
bounded too (`CALL_TIMEOUT_S`), so the deadline is a net, not the plan.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from corral.config import ConfigError, CorralConfig, load_config
from corral.doctor.cloud import check_cloud
from corral.doctor.database import check_database
from corral.doctor.github import check_github
from corral.doctor.render import render_json, render_text
from corral.doctor.report import Check, Level, Report, Section

CALL_TIMEOUT_S = 10.0
"""One API call or connection attempt, at most (or the config's own timeout, if shorter)."""
CONFIG_INVALID = 2
SECTION_DEADLINE_S = 60.0
"""A whole section, at most: a few dozen calls that each answer within seconds on a healthy setup."""


def _in_thread(section: Section, work: Callable[[], None]) -> threading.Thread:
    def run() -> None:
        try:
            work()
        except Exception as exc:  # a bug or a far end's surprise: reported as the section's, not a traceback
            section.failed("unexpected error", f"{type(exc).__name__}: {exc}", "run again; report it if it persists")

    thread = threading.Thread(target=run, name=f"corral-doctor-{section.name}", daemon=True)
    thread.start()
    return thread


def diagnose(config: CorralConfig, config_path: Path, deadline_s: float = SECTION_DEADLINE_S) -> list[Check]:
    """Every check of every section, in section order; a section past the deadline ends with a failure."""
    github, database = Section("github"), Section("database")
    github_timeout = min(CALL_TIMEOUT_S, config.github.timeout)
    clouds = config.cloud_settings()
    running = []
    for name, settings in clouds.items():  # a section per cloud, named for it when there are several
        section, timeout = Section("cloud" if len(clouds) == 1 else f"cloud {name}"), settings.timeout
        check = functools.partial(check_cloud, config, section, min(CALL_TIMEOUT_S, timeout), name)
        running.append((section, _in_thread(section, check)))
    running += [
        (github, _in_thread(github, lambda: check_github(config, github, github_timeout))),
        (database, _in_thread(database, lambda: check_database(config, database, config_path, CALL_TIMEOUT_S))),
    ]
    deadline = time.monotonic() + deadline_s
    checks: list[Check] = []
    for section, thread in running:
        thread.join(max(0.0, deadline - time.monotonic()))
        checks.extend(section.snapshot())
        if thread.is_alive():
            checks.append(
                Check(
                    section.name,
                    "deadline",
                    Level.FAIL,
                    f"no answer within {deadline_s:.0f}s; the items above are all it found",
                    "check that the far end is reachable and answering, then run the doctor again",
                )
            )
    return checks


def _quiet_libraries() -> None:
    """keystoneauth and openstacksdk warn through logging about what the report already says; with no
    handler configured, Python would print those warnings raw to stderr between the report's lines."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.NullHandler())


def _config_problems(config_path: Path, problems: list[str], as_json: bool, out: TextIO | None) -> int:
    if as_json:
        document = {"config": str(config_path), "ok": False, "config_problems": problems, "checks": []}
        target = out or sys.stdout
        json.dump(document, target, indent=2)
        target.write("\n")
    else:
        target = out or sys.stderr
        print(f"{config_path}: {len(problems)} problem(s)", file=target)
        for problem in problems:
            print(f"  - {problem}", file=target)
    return CONFIG_INVALID


def run_doctor(config_path: Path, *, as_json: bool = False, out: TextIO | None = None) -> int:
    """Check a configuration against the far ends it names; print the report; 0 only if nothing failed.

    Exit codes: 0 every item passed or warned; 1 an item failed; 2 the file is not a valid configuration
    (its problems are printed as `corral config check` prints them).
    """
    _quiet_libraries()
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        return _config_problems(config_path, exc.problems, as_json, out)
    report = Report(str(config_path), diagnose(config, config_path))
    (render_json if as_json else render_text)(report, out or sys.stdout)
    return report.exit_code
