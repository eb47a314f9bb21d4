"""Reading a job trace (`corral.simulate.trace`): the records a good file gives, and for each broken or hostile
line the exact problem a person reads, naming the line, the field and the fix."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest

from corral.simulate.trace import MAX_LINE_BYTES, MAX_PROBLEMS, Trace, TraceError, TraceJob, load_trace, read_trace
from corral_sandbox.control import TraceRequest

GOOD = "\n".join(
    [
        '{"at": "2026-03-02T09:00:30Z", "repo": "octo-org/app", "labels": ["self-hosted", "linux"], "duration": 42.5}',
        "",
        '{"at": "2026-03-02T10:00:00+01:00", "repo": "octo-org/api", "labels": ["gpu"], "duration": 600,'
        ' "workflow_name": "Nightly"}',
        "   ",
        '{"at": "2026-03-02t09:00:30.250z", "repo": "octo-org/app", "labels": ["self-hosted"], "duration": 0,'
        ' "workflow_name": null}',
        '{"at": "2026-03-02T09:00:30Z", "repo": "octo-org/web", "labels": ["self-hosted"], "duration": 1}\r',
        "",
    ]
)
"""Out of order, with offsets of two zones, a lower-case `t`/`z`, blank lines, a CRLF and a trailing newline."""

FIX_AT = "give seconds from the trace's start (such as 0 or 12.5) or an RFC 3339 time (such as 2026-03-02T09:00:00Z)"
FIX_REPO = "write it as OWNER/REPO, such as octo-org/app"
FIX_LABELS = 'give the job\'s runs-on labels as a list of strings, such as ["self-hosted", "linux"]'
FIX_DURATION = "give the seconds the job ran, 0 or more, such as 42.5"
ONE_OBJECT = (
    'write each job as one object, {"at": 0, "repo": "octo-org/app", "labels": ["self-hosted", "linux"], '
    '"duration": 42.5}'
)
FIRST = b'{"at": 0, "repo": "octo/app", "labels": ["x"], "duration": 1}\n'
"""A good first line: the broken line under test is line 2, and the trace is one of offsets."""


def read(data: bytes) -> Trace:
    return read_trace(io.BytesIO(data))


def problems(data: bytes) -> list[str]:
    with pytest.raises(TraceError) as refused:
        read(data)
    return refused.value.problems


def test_a_good_trace_reads_as_records_sorted_by_at_and_measured_from_its_first_job() -> None:
    trace = read(GOOD.encode())
    assert trace.origin == datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)
    assert trace.jobs == (
        TraceJob(at=0.0, repo="octo-org/api", labels=("gpu",), duration=600.0, workflow_name="Nightly", line=3),
        TraceJob(
            at=30.0, repo="octo-org/app", labels=("self-hosted", "linux"), duration=42.5, workflow_name=None, line=1
        ),
        TraceJob(at=30.0, repo="octo-org/web", labels=("self-hosted",), duration=1.0, workflow_name=None, line=6),
        TraceJob(at=30.25, repo="octo-org/app", labels=("self-hosted",), duration=0.0, workflow_name=None, line=5),
    )


def test_a_trace_of_offsets_is_measured_from_its_earliest_job_and_has_no_origin() -> None:
    data = (
        b'{"at": 12.5, "repo": "o/a", "labels": ["x"], "duration": 3}\n'
        b'{"at": 2, "repo": "o/b", "labels": ["y"], "duration": 7}'
    )
    trace = read(data)
    assert trace == Trace(
        jobs=(
            TraceJob(at=0.0, repo="o/b", labels=("y",), duration=7.0, workflow_name=None, line=2),
            TraceJob(at=10.5, repo="o/a", labels=("x",), duration=3.0, workflow_name=None, line=1),
        ),
        origin=None,
    )


def test_an_empty_trace_has_no_jobs() -> None:
    assert read(b"\n\n") == Trace(jobs=(), origin=None)


def test_records_are_immutable() -> None:
    (job, *_) = read(FIRST).jobs
    with pytest.raises(AttributeError):
        job.duration = 2.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        pytest.param(
            b'{"at": 1, "repo": "octo/app", "labels": ["x"]',
            f"line 2: not JSON (Expecting ',' delimiter at column 46); {ONE_OBJECT}",
            id="bad JSON",
        ),
        pytest.param(
            b'{"at": 1, "repo": "octo/app", "labels": ["x"]}',
            f"line 2: duration: is missing; {FIX_DURATION}",
            id="missing field",
        ),
        pytest.param(
            b'{"at": 1, "repo": "octo/app", "labels": ["x"], "duration": "42"}',
            f"line 2: duration: is a string, not a number; {FIX_DURATION}",
            id="wrong type",
        ),
        pytest.param(
            b'{"at": true, "repo": "octo/app", "labels": ["x"], "duration": 1}',
            f"line 2: at: is true, not a number of seconds or an RFC 3339 time; {FIX_AT}",
            id="boolean at",
        ),
        pytest.param(
            b'{"at": 1, "repo": "octo/app", "labels": ["x"], "duration": -5}',
            f"line 2: duration: is negative (-5); {FIX_DURATION}",
            id="negative duration",
        ),
        pytest.param(
            b'{"at": -0.5, "repo": "octo/app", "labels": ["x"], "duration": 1}',
            f"line 2: at: is negative (-0.5); {FIX_AT}",
            id="negative at",
        ),
        pytest.param(
            b'{"at": 1, "repo": "octo/app", "labels": ["x"], "duration": NaN}',
            f"line 2: duration: is not a finite number; {FIX_DURATION}",
            id="NaN",
        ),
        pytest.param(
            b'{"at": Infinity, "repo": "octo/app", "labels": ["x"], "duration": 1}',
            f"line 2: at: is not a finite number; {FIX_AT}",
            id="Infinity",
        ),
        pytest.param(
            b'{"at": 1, "repo": "octo/app", "labels": ["x"], "duration": 1e400}',
            f"line 2: duration: is not a finite number; {FIX_DURATION}",
            id="a number too large for a float",
        ),
        pytest.param(
            b'{"at": ' + b"1" * 5000 + b', "repo": "octo/app", "labels": ["x"], "duration": 1}',
            f"line 2: at: is not a finite number; {FIX_AT}",
            id="an integer of 5,000 digits",
        ),
        pytest.param(
            b'{"at": 1, "repo": "octo", "labels": ["x"], "duration": 1}',
            f"line 2: repo: 'octo' is not OWNER/REPO; {FIX_REPO}",
            id="repo without owner",
        ),
        pytest.param(
            b'{"at": 1, "repo": "octo/app", "labels": [], "duration": 1}',
            f"line 2: labels: is an empty list; {FIX_LABELS}",
            id="no labels",
        ),
        pytest.param(
            b'{"at": 1, "repo": "octo/app", "labels": ["x", 3], "duration": 1}',
            f"line 2: labels[1]: is a number, not a string; {FIX_LABELS}",
            id="a label not a string",
        ),
        pytest.param(
            b'{"at": 1, "repo": "octo/app", "labels": ["x"], "duration": 1, "workflow": "CI"}',
            "line 2: workflow: unknown field; remove it or check its spelling "
            "(a job has at, repo, labels, duration, workflow_name, conclusion)",
            id="unknown field",
        ),
        pytest.param(
            b'{"at": 1, "repo": "octo/app", "labels": ["x"], "duration": 1, "\\u001b[2J": 0}',
            "line 2: '\\x1b[2J': unknown field; remove it or check its spelling "
            "(a job has at, repo, labels, duration, workflow_name, conclusion)",
            id="a terminal escape as a field name",
        ),
        pytest.param(
            b'{"at": 1, "repo": "octo/app", "labels": ["x"], "duration": 1, "duration": 2}',
            "line 2: duration: given twice; keep one",
            id="field given twice",
        ),
        pytest.param(
            b'[{"at": 1, "repo": "octo/app", "labels": ["x"], "duration": 1}]',
            f"line 2: is a list, not an object; {ONE_OBJECT}",
            id="not an object",
        ),
        pytest.param(
            b'{"at": "2026-03-02T09:00:00Z", "repo": "octo/app", "labels": ["x"], "duration": 1}',
            "line 2: at: is an RFC 3339 time, but line 1 gave seconds from the trace's start; "
            "use one kind of `at` in the whole trace",
            id="mixed kinds of at",
        ),
        pytest.param(
            b'{"at": 1, "repo": "octo/app", "labels": ["x"], "duration": 1, "conclusion": "flaky"}',
            "line 2: conclusion: is 'flaky', not one of success, failure; "
            'give "success" or "failure", or leave the field out (success)',
            id="a conclusion GitHub has no job end with",
        ),
        pytest.param(
            b"\xff\xfe{}",
            "line 2: not UTF-8 (byte 1); save the trace as UTF-8",
            id="not UTF-8",
        ),
        pytest.param(
            b"[" * 50_000,
            f"line 2: not a job (nested too deeply); {ONE_OBJECT}",
            id="nested too deeply",
        ),
        pytest.param(
            b'{"at": 1, "repo": "octo/app", "labels": ["x"], "duration": 1, "workflow_name": "' + b"w" * MAX_LINE_BYTES,
            f"line 2: longer than {MAX_LINE_BYTES:,} bytes, which no job needs; "
            "write one job per line (is this a JSON Lines trace?)",
            id="huge line",
        ),
    ],
)
def test_a_broken_line_is_refused_naming_the_line_the_field_and_the_fix(line: bytes, problem: str) -> None:
    assert problems(FIRST + line + b"\n") == [problem]


@pytest.mark.parametrize(
    ("at", "problem"),
    [
        ("yesterday", f"line 1: at: 'yesterday' is not an RFC 3339 time; {FIX_AT}"),
        ("2026-03-02T09:00:00", f"line 1: at: '2026-03-02T09:00:00' is not an RFC 3339 time; {FIX_AT}"),
        ("2026-02-30T09:00:00Z", f"line 1: at: '2026-02-30T09:00:00Z' is not a date and time that exists; {FIX_AT}"),
    ],
    ids=["not a time", "a time without its offset", "a day that does not exist"],
)
def test_an_at_that_is_no_rfc3339_time_is_refused(at: str, problem: str) -> None:
    line = f'{{"at": "{at}", "repo": "octo/app", "labels": ["x"], "duration": 1}}'
    assert problems(line.encode()) == [problem]


def test_every_problem_of_the_file_is_reported_in_one_go() -> None:
    data = (
        b'{"at": "2026-03-02T09:00:00Z", "repo": "octo/app", "labels": ["x"], "duration": 1}\n'
        b"\n"
        b'{"at": 5, "repo": "app", "labels": "x", "duration": -1}\n'
        b"not json\n"
        b'{"at": "2026-03-02T09:01:00Z", "repo": "octo/app", "labels": ["x"], "duration": 1}\n'
    )
    assert problems(data) == [
        f"line 3: repo: 'app' is not OWNER/REPO; {FIX_REPO}",
        f"line 3: labels: is a string, not a list; {FIX_LABELS}",
        f"line 3: duration: is negative (-1); {FIX_DURATION}",
        "line 3: at: is seconds from the trace's start, but line 1 gave an RFC 3339 time; "
        "use one kind of `at` in the whole trace",
        f"line 4: not JSON (Expecting value at column 1); {ONE_OBJECT}",
    ]


def test_past_the_first_problems_only_their_number_is_reported() -> None:
    data = b"".join(b"{}\n" for _ in range(MAX_PROBLEMS))
    reported = problems(data)
    assert len(reported) == MAX_PROBLEMS + 1
    assert reported[:2] == [f"line 1: at: is missing; {FIX_AT}", f"line 1: repo: is missing; {FIX_REPO}"]
    assert reported[-1] == f"... and {4 * MAX_PROBLEMS - MAX_PROBLEMS:,} more problem(s)"


def test_a_huge_line_is_read_past_in_pieces_and_the_lines_after_it_keep_their_numbers() -> None:
    data = FIRST + b"x" * (5 * MAX_LINE_BYTES) + b"\n" + b'{"at": 1, "repo": "o/r", "labels": ["x"], "duration": -1}'
    assert problems(data) == [
        f"line 2: longer than {MAX_LINE_BYTES:,} bytes, which no job needs; "
        "write one job per line (is this a JSON Lines trace?)",
        f"line 3: duration: is negative (-1); {FIX_DURATION}",
    ]


def test_a_line_of_exactly_the_limit_is_read() -> None:
    head = b'{"at": 0, "repo": "o/r", "labels": ["x"], "duration": 1, "workflow_name": "'
    line = head + b"w" * (MAX_LINE_BYTES - len(head) - 2) + b'"}'
    assert len(line) == MAX_LINE_BYTES
    with pytest.raises(TraceError) as refused:
        read(line)
    assert refused.value.problems == [
        f"line 1: workflow_name: has {MAX_LINE_BYTES - len(head) - 2:,} characters, more than 256; "
        "give the workflow's name as a string, or leave the field out"
    ], "read whole, and refused only for its name"


def test_a_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as refused:
        load_trace(tmp_path / "missing.jsonl")
    assert refused.value.problems == [
        f"cannot read {str(tmp_path / 'missing.jsonl')!r} (No such file or directory); check the path"
    ]


def test_each_job_is_a_job_of_the_sandboxs_trace_request() -> None:
    """The format is the sandbox's `POST /_sandbox/trace`: a trace of offsets posts as it reads."""
    trace = read(b'{"at": 0, "repo": "octo/app", "labels": ["x"], "duration": 2.5, "workflow_name": "CI"}')
    request = TraceRequest.model_validate({"jobs": [job.request() for job in trace.jobs]})
    assert [job.model_dump() for job in request.jobs] == [
        {
            "at": 0.0,
            "repo": "octo/app",
            "labels": ["x"],
            "duration": 2.5,
            "workflow_name": "CI",
            "conclusion": "success",
        }
    ]
