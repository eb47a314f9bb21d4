"""The doctor's report for people (grouped by section, the fix under each item that is not a pass) and for
machines (`--json`: one object, every item with its status)."""

from __future__ import annotations

import json
from typing import TextIO

from corral.doctor.report import Level, Report

MARKS = {Level.PASS: "ok  ", Level.WARN: "WARN", Level.FAIL: "FAIL", Level.SKIPPED: "skip"}


def summary(report: Report) -> str:
    return (
        f"{report.count(Level.PASS)} passed, {report.count(Level.WARN)} warning(s), "
        f"{report.count(Level.FAIL)} failed, {report.count(Level.SKIPPED)} skipped"
    )


def render_text(report: Report, out: TextIO) -> None:
    print(f"corral doctor: {report.config}", file=out)
    section = None
    for check in report.checks:
        if check.section != section:
            section = check.section
            print(f"\n{section}", file=out)
        print(f"  {MARKS[check.level]}  {check.name}: {check.detail}", file=out)
        if check.fix and check.level is not Level.PASS:
            print(f"        fix: {check.fix}", file=out)
    verdict = "all checks passed" if report.ok else "corral will not work as configured"
    print(f"\n{summary(report)}: {verdict}", file=out)


def render_json(report: Report, out: TextIO) -> None:
    document = {
        "config": report.config,
        "ok": report.ok,
        "summary": {str(level): report.count(level) for level in Level},
        "checks": [check.as_dict() for check in report.checks],
    }
    json.dump(document, out, indent=2)
    out.write("\n")
