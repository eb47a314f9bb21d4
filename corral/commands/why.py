"""`corral why <job id | job or run URL>`: what a job went through and, while it waits, why it has no runner.

The answer comes from `GET /api/v1/jobs/{id}` (the job's timeline and its current blocking reason). A run's
URL names no job: every job corral knows of that run is told, so a matrix's waiting legs show side by side,
scale-set jobs included. A scale-set job is known by its runner request id (`--scale-set ID`), not by the
job id in GitHub's URLs: GitHub's scale-set messages do not carry that one, so give its run's URL.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from corral.commands.client import common_options, request
from corral.github.webhooks import MAX_ID

JOB_URL = re.compile(r"/actions/runs/(?P<run>\d+)/job/(?P<job>\d+)")
RUN_URL = re.compile(r"/actions/runs/(?P<run>\d+)(?:/attempts/\d+)?/?(?:[?#].*)?$")


def add_parser(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    why = subcommands.add_parser("why", help="a job's timeline and, while it waits, why it has no runner yet (API)")
    common_options(why)
    why.add_argument("job", help="a job id, a job's URL (.../actions/runs/R/job/J) or a run's URL (.../actions/runs/R)")
    why.add_argument(
        "--scale-set", action="store_true", help="JOB is a scale-set job's runner request id (corral scale-set-jobs)"
    )
    why.set_defaults(handler=_why)


def target(text: str) -> tuple[str, int]:
    """(`job` or `run`, id) from what the user gave; SystemExit naming the accepted forms otherwise."""
    text = text.strip()
    match = JOB_URL.search(text)
    if match:
        kind, number = "job", int(match["job"])
    elif (match := RUN_URL.search(text)) is not None:
        kind, number = "run", int(match["run"])
    elif text.isdigit():
        kind, number = "job", int(text)
    else:
        raise SystemExit(
            f"corral why: {text[:100]!r} is neither a job id nor a GitHub Actions job or run URL "
            "(https://github.com/OWNER/REPO/actions/runs/RUN/job/JOB)"
        )
    if not 1 <= number <= MAX_ID:
        raise SystemExit(f"corral why: {number} is out of range for a GitHub id")
    return kind, number


def _why(args: argparse.Namespace) -> int:
    kind, number = target(args.job)
    if kind == "job" and args.scale_set:
        stories = [request(args, "GET", f"/api/v1/scale-set-jobs/{number}")]
    elif kind == "job":
        story = request(args, "GET", f"/api/v1/jobs/{number}", answers=(404,))
        if "id" not in story:
            raise SystemExit(
                f"corral why: {story.get('detail', 'unknown job')}; for a scale-set pool's job, give its run's URL "
                "(scale-set messages do not carry GitHub's job id)"
            )
        stories = [story]
    else:
        jobs = request(args, "GET", "/api/v1/jobs", params={"run_id": number})
        scale_set_jobs = request(args, "GET", "/api/v1/scale-set-jobs", params={"run_id": number})
        if not jobs and not scale_set_jobs:
            raise SystemExit(f"corral why: corral knows no job of run {number}")
        stories = [request(args, "GET", f"/api/v1/jobs/{job['id']}") for job in jobs]
        stories += [request(args, "GET", f"/api/v1/scale-set-jobs/{job['id']}") for job in scale_set_jobs]
    if args.json:
        print(json.dumps(stories if kind == "run" else stories[0], indent=2))
        return 0
    print("\n\n".join(render(story) for story in stories))
    return 0


def render(story: dict[str, Any]) -> str:
    labels = ",".join(story["labels"])
    pool = story["pool"] or "no pool"
    what = "scale-set job request" if str(story.get("source") or "").startswith("scale_set") else "job"
    lines = [f"{what} {story['id']} of {story['repository']} [{labels}]: {story['status']}, {pool}"]
    waiting = story.get("waiting")
    if waiting:
        until = f" (until {waiting['until']})" if waiting.get("until") else ""
        lines.append(f"waiting: {waiting['code']}: {waiting['sentence']}{until}")
    for entry in story["timeline"]:
        lines.append(f"  {entry['at']}  {entry['event']:<17} {entry['detail']}")
    return "\n".join(lines)
