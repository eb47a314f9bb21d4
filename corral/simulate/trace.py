"""A job trace: the job history `corral simulate` will replay, and what `corral jobs export` writes.

The format is JSON Lines: one job per line, each a JSON object with these fields (the fields of the sandbox's
`POST /_sandbox/trace` jobs, so a trace can be replayed against the sandbox too: `TraceJob.request`):

- `at`: when the job was queued, either as seconds from the trace's start (a number, 0 or more) or as an RFC 3339
  time with its offset (`2026-03-02T09:00:00Z`, `2026-03-02T10:00:00.250+01:00`). A trace uses one kind
  throughout: the first line whose `at` is valid decides, and a line of the other kind is refused (mixing them
  leaves no origin both could be measured from).
- `repo`: `OWNER/REPO`.
- `labels`: the job's `runs-on` labels, a list of 1 to 100 non-empty strings.
- `duration`: the seconds the job ran, a finite number, 0 or more.
- `workflow_name` (optional): a string of at most 256 characters, or null.
- `conclusion` (optional): how the job ends when its runner runs it to the end, `success` (the default) or
  `failure` (a job that fails on its own). The sandbox honours it; a simulation has no server that dies under a
  job, so it changes nothing there.

An unknown field is refused, as corral's config refuses an unknown key: a misspelt optional field (`workflow`)
would otherwise vanish without a word; a field given twice on one line is refused too. Blank lines and a
trailing newline are fine. A line longer than `MAX_LINE_BYTES` is refused without ever being held in memory
whole. Every problem in the file is reported in one go (the first `MAX_PROBLEMS`, then how many more), each
naming the line, the field, and the fix.

Reading returns the jobs sorted by `at` (lines with the same `at` keep their order in the file), with `at` in
seconds from the earliest job: the origin is the first job's arrival, whichever line holds it, so a trace of
times and one of offsets replay alike, and any silence before the first job is dropped. For a trace of times,
`Trace.origin` keeps that first job's wall time, as a simulation needs the time of day for scheduled warm
runners; for a trace of offsets it is None.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from corral.model import MAX_WORKFLOW_NAME, REPO_PATTERN, Job

MAX_LINE_BYTES = 64 * 1024
"""The longest line read, newline excluded: a job takes well under 1 KiB, so a longer line is not a job, and
refusing it keeps a hostile file from being read into memory whole."""
MAX_LABELS = 100
"""The most `runs-on` labels a job may have (the sandbox's limit too)."""
MAX_PROBLEMS = 100
"""Problems reported one by one; past these, only how many more there are."""
FIELDS = ("at", "repo", "labels", "duration", "workflow_name", "conclusion")
CONCLUSIONS = ("success", "failure")
EXAMPLE = '{"at": 0, "repo": "octo-org/app", "labels": ["self-hosted", "linux"], "duration": 42.5}'
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]{1,40}")

FIXES = {
    "at": "give seconds from the trace's start (such as 0 or 12.5) or an RFC 3339 time (such as 2026-03-02T09:00:00Z)",
    "repo": "write it as OWNER/REPO, such as octo-org/app",
    "labels": 'give the job\'s runs-on labels as a list of strings, such as ["self-hosted", "linux"]',
    "duration": "give the seconds the job ran, 0 or more, such as 42.5",
    "workflow_name": "give the workflow's name as a string, or leave the field out",
    "conclusion": 'give "success" or "failure", or leave the field out (success)',
}
"""What to write instead, by field: the end of every problem with that field."""
EXPECTED = {
    "at": "a number of seconds or an RFC 3339 time",
    "repo": "a string",
    "labels": "a list",
    "duration": "a number",
    "workflow_name": "a string",
    "conclusion": "a string",
}
"""What each field must be, as the end of `is a list, not a number`."""


class TraceError(ValueError):
    """A trace cannot be replayed; `problems` names each line, field and fix (the first `MAX_PROBLEMS`)."""

    def __init__(self, problems: list[str], more: int = 0) -> None:
        self.problems = problems + ([f"... and {more:,} more problem(s)"] if more else [])
        super().__init__("invalid trace:\n" + "\n".join(f"  - {problem}" for problem in self.problems))


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace, as read: `at` in seconds from the trace's first job, `line` where the file has it
    (for a later message about the job, such as one saying no pool takes its labels)."""

    at: float
    repo: str
    labels: tuple[str, ...]
    duration: float
    workflow_name: str | None
    line: int
    conclusion: str = "success"

    def request(self) -> dict[str, Any]:
        """This job as the sandbox's `POST /_sandbox/trace` takes one in its `jobs`."""
        return {
            "at": self.at,
            "repo": self.repo,
            "labels": list(self.labels),
            "duration": self.duration,
            "workflow_name": self.workflow_name,
            "conclusion": self.conclusion,
        }


@dataclass(frozen=True, slots=True)
class Trace:
    """A trace's jobs, sorted by `at`; `origin` is the first job's wall time when the file gave times (None
    when it gave offsets, or has no jobs)."""

    jobs: tuple[TraceJob, ...]
    origin: datetime | None


def _moment(value: object) -> float | datetime:
    """`at` as given: seconds (a finite number, 0 or more) or an aware time; ValueError saying what it is not."""
    if isinstance(value, bool) or value is None or not isinstance(value, int | float | str):
        raise ValueError(f"is {_kind(value)}, not {EXPECTED['at']}")
    if isinstance(value, str):
        if not RFC3339.fullmatch(value):
            raise ValueError(f"{_show(value)} is not an RFC 3339 time")
        try:
            return datetime.fromisoformat(value.upper())
        except ValueError:
            raise ValueError(f"{_show(value)} is not a date and time that exists") from None
    seconds = float(value)
    if not math.isfinite(seconds):
        raise ValueError("is not a finite number")
    if seconds < 0:
        raise ValueError(f"is negative ({value!r})")
    return seconds


class _Fields(BaseModel):
    """One line's fields, validated strictly: JSON's `true` is no number, `"42"` no duration."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    at: Annotated[float | datetime, BeforeValidator(_moment)]
    repo: str = Field(pattern=REPO_PATTERN)
    labels: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1, max_length=MAX_LABELS)
    duration: float = Field(ge=0, allow_inf_nan=False)
    workflow_name: str | None = Field(default=None, max_length=MAX_WORKFLOW_NAME)
    conclusion: Literal["success", "failure"] = "success"


def _kind(value: object) -> str:
    """What a JSON value is, as a sentence says it."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    return "a list" if isinstance(value, list) else "an object"


def _show(value: str) -> str:
    """A value of the file, quoted, escaped (no control character reaches the terminal) and cut short."""
    return repr(value[:60]) + ("..." if len(value) > 60 else "")


def _name(key: object) -> str:
    """A field's name from the file, as is when it is plain, else quoted and cut short."""
    text = str(key)
    return text if PLAIN_NAME.fullmatch(text) else _show(text)


def _field_problem(line: int, error: Any) -> str:
    """One of pydantic's errors as `line N: field: what is wrong; the fix`."""
    location = tuple(error["loc"])
    field = str(location[0]) if location else ""
    where = _name(field) + "".join(f"[{part}]" for part in location[1:])
    kind, value = error["type"], error.get("input")
    if kind == "extra_forbidden":
        return f"line {line}: {where}: unknown field; remove it or check its spelling (a job has {', '.join(FIELDS)})"
    if kind == "missing":
        what = "is missing"
    elif kind == "value_error":
        what = str(error["ctx"]["error"])
    elif kind == "finite_number":
        what = "is not a finite number"
    elif kind == "greater_than_equal":
        what = f"is negative ({value!r})"
    elif kind == "string_pattern_mismatch":
        what = f"{_show(value)} is not OWNER/REPO"
    elif kind == "too_short":
        what = "is an empty list"
    elif kind == "too_long":
        what = f"has {error['ctx']['actual_length']:,} labels, more than the {MAX_LABELS} a job may have"
    elif kind == "string_too_short":
        what = "is an empty string"
    elif kind == "literal_error":
        what = f"is {_show(value) if isinstance(value, str) else _kind(value)}, not one of {', '.join(CONCLUSIONS)}"
    elif kind == "string_too_long":
        what = f"has {len(value):,} characters, more than {error['ctx']['max_length']}"
    elif kind.endswith("_type"):
        expected = "a string" if len(location) > 1 else EXPECTED.get(field, "valid")
        what = f"is {_kind(value)}, not {expected}"
    else:
        what = str(error["msg"])
    return f"line {line}: {where}: {what}; {FIXES.get(field, 'see the trace format in docs/simulate.md')}"


def _integer(text: str) -> int | float:
    """json's integer hook: an integer of more digits than any time or duration needs is read as a float
    (infinite when huge, and refused as such by its field), never handed to `int`, which refuses
    past 4,300 digits with an error that names no line, and takes quadratic time on the way."""
    return int(text) if len(text) <= 18 else float(text)


class _Duplicate(ValueError):
    def __init__(self, key: str) -> None:
        self.key = key


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object hook: a key given twice is a mistake, not "the last one wins"."""
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise _Duplicate(key)
        document[key] = value
    return document


def _lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) for each line, None for one longer than MAX_LINE_BYTES (read past in pieces)."""
    number = 0
    while chunk := stream.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(chunk) > MAX_LINE_BYTES and not chunk.endswith(b"\n"):
            while chunk and not chunk.endswith(b"\n"):
                chunk = stream.readline(MAX_LINE_BYTES + 1)
            yield number, None
        else:
            yield number, chunk


def _document(number: int, raw: bytes | None) -> dict[str, Any] | str | None:
    """The line's JSON object; a problem (str) when it is none; None for a blank line."""
    if raw is None:
        return (
            f"line {number}: longer than {MAX_LINE_BYTES:,} bytes, which no job needs; "
            "write one job per line (is this a JSON Lines trace?)"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"line {number}: not UTF-8 (byte {exc.start + 1}); save the trace as UTF-8"
    if not text.strip():
        return None
    try:
        document = json.loads(text.rstrip("\r\n"), object_pairs_hook=_refuse_duplicates, parse_int=_integer)
    except _Duplicate as exc:
        return f"line {number}: {_name(exc.key)}: given twice; keep one"
    except json.JSONDecodeError as exc:
        return f"line {number}: not JSON ({exc.msg} at column {exc.pos + 1}); write each job as one object, {EXAMPLE}"
    except RecursionError:
        return f"line {number}: not a job (nested too deeply); write each job as one object, {EXAMPLE}"
    if not isinstance(document, dict):
        return f"line {number}: is {_kind(document)}, not an object; write each job as one object, {EXAMPLE}"
    return document


def _valid_at(document: dict[str, Any]) -> float | datetime | None:
    """The line's `at` when it is valid, whatever else is wrong with the line: the first one decides the
    trace's kind, and every later line of the other kind is refused, even one refused for another field too."""
    try:
        return _moment(document.get("at"))
    except ValueError:
        return None


def _is_time(moment: float | datetime) -> bool:
    return isinstance(moment, datetime)


def _kind_of_moment(value: float | datetime) -> str:
    return "an RFC 3339 time" if isinstance(value, datetime) else "seconds from the trace's start"


def read_trace(stream: IO[bytes]) -> Trace:
    """The trace in `stream` (binary, read line by line); TraceError listing every problem."""
    problems: list[str] = []
    more = 0
    read: list[tuple[_Fields, int]] = []
    first: tuple[float | datetime, int] | None = None  # the first valid `at`, which decides the trace's kind

    def refuse(*found: str) -> None:
        nonlocal more
        for problem in found:
            if len(problems) < MAX_PROBLEMS:
                problems.append(problem)
            else:
                more += 1

    for number, raw in _lines(stream):
        document = _document(number, raw)
        if document is None:
            continue
        if isinstance(document, str):
            refuse(document)
            continue
        moment = _valid_at(document)
        mixed = first is not None and moment is not None and _is_time(moment) != _is_time(first[0])
        if first is None and moment is not None:
            first = (moment, number)
        try:
            fields: _Fields | None = _Fields.model_validate(document)
        except ValidationError as exc:
            refuse(*(_field_problem(number, error) for error in exc.errors()))
            fields = None
        if mixed and first is not None and moment is not None:
            refuse(
                f"line {number}: at: is {_kind_of_moment(moment)}, but line {first[1]} gave "
                f"{_kind_of_moment(first[0])}; use one kind of `at` in the whole trace"
            )
        if fields is None or mixed:
            continue
        read.append((fields, number))
    if problems:
        raise TraceError(problems, more)
    return _normalised(read)


def _normalised(read: list[tuple[_Fields, int]]) -> Trace:
    """The jobs sorted by `at`, measured from the earliest one."""
    if not read:
        return Trace(jobs=(), origin=None)
    moments = [fields.at for fields, _ in read]
    origin: datetime | None = None
    if isinstance(moments[0], datetime):
        origin = min(moment for moment in moments if isinstance(moment, datetime))
        offsets = [(moment - origin).total_seconds() for moment in moments if isinstance(moment, datetime)]
    else:
        start = min(moment for moment in moments if isinstance(moment, float))
        offsets = [moment - start for moment in moments if isinstance(moment, float)]
    jobs = [
        TraceJob(
            at=offset,
            repo=fields.repo,
            labels=tuple(fields.labels),
            duration=fields.duration,
            workflow_name=fields.workflow_name,
            line=number,
            conclusion=fields.conclusion,
        )
        for offset, (fields, number) in zip(offsets, read, strict=True)
    ]
    return Trace(jobs=tuple(sorted(jobs, key=lambda job: (job.at, job.line))), origin=origin)


def load_trace(path: Path) -> Trace:
    """The trace in the file at `path`; TraceError naming every problem, or the file when it cannot be read."""
    try:
        with path.open("rb") as stream:
            return read_trace(stream)
    except OSError as exc:
        raise TraceError([f"cannot read {str(path)!r} ({exc.strerror or exc}); check the path"]) from None


@dataclass(frozen=True, slots=True)
class Export:
    """What `corral jobs export` writes: trace lines oldest first, and the jobs left out, by why."""

    lines: tuple[str, ...]
    not_run: int
    """Jobs with no duration to replay: not completed yet, or completed without having started (cancelled
    while queued, when GitHub gave no start time)."""
    unfit: int
    """Jobs whose stored row the trace format refuses (no labels, say): written, they would make the whole
    trace unreadable."""


def _rfc3339(moment: datetime) -> str:
    """UTC with a `Z`, to the millisecond when there is a fraction (GitHub's times are whole seconds)."""
    utc = moment.astimezone(UTC).replace(microsecond=moment.microsecond // 1000 * 1000)
    return utc.isoformat(timespec="milliseconds" if utc.microsecond else "seconds").replace("+00:00", "Z")


def _seconds(value: float) -> float | int:
    """To the millisecond, and without a `.0` when whole."""
    rounded = round(value, 3)
    return int(rounded) if rounded.is_integer() else rounded


def export(jobs: Iterable[Job]) -> Export:
    """Trace lines for jobs from corral's store, sorted by `at`.

    `at` is when GitHub queued the job (its `created_at`), or when corral first heard of it where GitHub's
    time is unknown; `duration` is completed minus started, to the millisecond, 0 when clocks made it negative
    (a scale-set job's times are when corral heard the news). A job not completed, or never started, is left
    out rather than given a guessed duration: a replay of a running job would invent when it ends. Jobs with
    the same `at` keep the order they came in.
    """
    kept: list[tuple[datetime, int, str]] = []
    not_run = unfit = 0
    for index, job in enumerate(jobs):
        if job.completed_at is None or job.started_at is None:
            not_run += 1
            continue
        queued = job.queued_at or job.received_at
        line: dict[str, Any] = {
            "at": _rfc3339(queued),
            "repo": job.repository,
            "labels": list(job.labels),
            "duration": _seconds(max(0.0, (job.completed_at - job.started_at).total_seconds())),
        }
        if job.workflow is not None:
            line["workflow_name"] = job.workflow
        try:
            _Fields.model_validate(line)
        except ValidationError:
            unfit += 1
            continue
        kept.append((queued, index, json.dumps(line)))
    kept.sort(key=lambda item: (item[0], item[1]))
    return Export(lines=tuple(line for _, _, line in kept), not_run=not_run, unfit=unfit)
