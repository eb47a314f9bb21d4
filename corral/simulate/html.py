"""`corral simulate --html`: one self-contained page, a timeline per pool and its wait distribution.

No script, no stylesheet or font from elsewhere: inline SVG drawn here, so the page opens anywhere, can be
mailed or attached to a change request, and shows the same for the same run. Each pool gets:

- a timeline of the measured window: jobs waiting for a runner, and runners booting, idle and busy, each
  sampled at `SAMPLES` evenly spaced moments (the count at that moment, from the ledger's exact times);
- a histogram of its waits (queued to started), in `BINS` bins from 0 to the longest wait.

Every text from the config or trace (pool names) is escaped; nothing else in the page comes from input.
"""

from __future__ import annotations

import html
from bisect import bisect_right
from collections.abc import Iterable, Sequence

from corral.simulate.report import Report
from corral.simulate.run import Outcome
from corral.simulate.world import SimJob, SimServer

SAMPLES = 480
BINS = 30
WIDTH, HEIGHT, MARGIN = 960, 220, 40
SERIES = (
    ("waiting jobs", "#d62728"),
    ("booting", "#ff7f0e"),
    ("idle", "#7f7f7f"),
    ("busy", "#2ca02c"),
)

Span = tuple[float, float]


def render(outcome: Outcome, found: Report, measure_from: float = 0.0) -> str:
    """The page for `outcome`, whose figures (`found`) were reported from `measure_from`."""
    start, end = _window(outcome, measure_from)
    every = timelines(outcome, measure_from)
    sections = []
    for name, pool in found.pools.items():
        jobs = [job for job in outcome.ledger.jobs if job.pool == name and job.queued_at >= start]
        counts = every[name]
        waits = [job.started_at - job.queued_at for job in jobs if job.started_at is not None]
        figures = ", ".join(f"{key} {value:g}" for key, value in (vars(pool.wait_s) if pool.wait_s else {}).items())
        sections.append(
            f"<section><h2>{html.escape(name)}</h2>"
            f"<p>{pool.jobs} jobs, {pool.served} served; waits (s): {figures or 'none'}; runner-hours: "
            + ", ".join(f"{kind} {hours:g}" for kind, hours in pool.runner_time.hours().items())
            + f"; peak {pool.peak_servers} servers</p>"
            + _timeline(counts, start, end)
            + _histogram(waits)
            + "</section>"
        )
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>corral simulate</title>"
        "<style>body{font:14px system-ui,sans-serif;margin:2em;color:#222}svg{display:block;margin:.5em 0 1.5em}"
        "text{font:11px system-ui,sans-serif;fill:#444}</style></head><body>"
        f"<h1>corral simulate</h1><p>{found.jobs} jobs, {found.unmatched} unmatched; "
        f"{found.measured_s / 3600:.3g} h measured.</p>" + _legend() + "".join(sections) + "</body></html>\n"
    )


def timelines(outcome: Outcome, measure_from: float = 0.0) -> dict[str, dict[str, list[int]]]:
    """Per pool, per series (`SERIES`), the count at each of `SAMPLES` evenly spaced moments of the window,
    its first moment and its last included."""
    start, end = _window(outcome, measure_from)
    found = {}
    for name in outcome.pools:
        jobs = [job for job in outcome.ledger.jobs if job.pool == name and job.queued_at >= start]
        servers = [server for server in outcome.ledger.servers if server.pool == name]
        found[name] = {label: _counts(spans, start, end) for label, spans in _spans(jobs, servers, end).items()}
    return found


def _window(outcome: Outcome, measure_from: float) -> tuple[float, float]:
    start = outcome.origin + measure_from
    return start, max(outcome.end, start + 1.0)


def _spans(jobs: Sequence[SimJob], servers: Sequence[SimServer], end: float) -> dict[str, list[Span]]:
    """Each series as the intervals during which one thing was in it."""
    spans: dict[str, list[Span]] = {label: [] for label, _ in SERIES}
    for job in jobs:
        spans["waiting jobs"].append((job.queued_at, job.started_at if job.started_at is not None else end))
    for server in servers:
        gone = server.deleted_at if server.deleted_at is not None else end
        online = server.online_at if server.online_at is not None else gone
        spans["booting"].append((server.created_at, online))
        if server.online_at is None:
            continue
        left = server.done_at if server.done_at is not None else gone
        took = server.busy_at if server.busy_at is not None else left
        spans["idle"].append((server.online_at, min(took, left)))
        if server.busy_at is not None:
            spans["busy"].append((server.busy_at, left))
    return spans


def _counts(spans: Iterable[Span], start: float, end: float) -> list[int]:
    """How many spans hold each of the `SAMPLES` moments from `start` to `end`: began at or before it, and
    not ended by it."""
    begins = sorted(begin for begin, finish in spans if finish > begin)
    finishes = sorted(finish for begin, finish in spans if finish > begin)
    step = (end - start) / (SAMPLES - 1)
    moments = [start + index * step for index in range(SAMPLES)]
    return [bisect_right(begins, moment) - bisect_right(finishes, moment) for moment in moments]


def _timeline(counts: dict[str, list[int]], start: float, end: float) -> str:
    top = max(max(values, default=0) for values in counts.values()) or 1
    plot_w, plot_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN

    def point(index: int, value: int) -> str:
        return f"{MARGIN + index * plot_w / (SAMPLES - 1):.1f},{HEIGHT - MARGIN - value * plot_h / top:.1f}"

    lines = "".join(
        f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="'
        + " ".join(point(index, value) for index, value in enumerate(counts[label]))
        + '"/>'
        for label, colour in SERIES
    )
    hours = (end - start) / 3600
    axes = (
        f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" y2="{HEIGHT - MARGIN}" stroke="#999"/>'
        f'<text x="{MARGIN}" y="{HEIGHT - MARGIN + 16}">0 h</text>'
        f'<text x="{WIDTH - MARGIN}" y="{HEIGHT - MARGIN + 16}" text-anchor="end">{hours:.3g} h</text>'
        f'<text x="{MARGIN - 6}" y="{MARGIN + 4}" text-anchor="end">{top}</text>'
        f'<text x="{MARGIN - 6}" y="{HEIGHT - MARGIN}" text-anchor="end">0</text>'
    )
    return f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img">{axes}{lines}</svg>'


def _histogram(waits: Sequence[float]) -> str:
    if not waits:
        return "<p>No job was served.</p>"
    longest = max(waits) or 1.0
    bins = [0] * BINS
    for wait in waits:
        bins[min(int(wait / longest * BINS), BINS - 1)] += 1
    top = max(bins)
    plot_w, plot_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN
    width = plot_w / BINS
    bars = "".join(
        f'<rect x="{MARGIN + index * width:.1f}" y="{HEIGHT - MARGIN - count * plot_h / top:.1f}" '
        f'width="{width - 1:.1f}" height="{count * plot_h / top:.1f}" fill="#1f77b4"><title>{count} jobs waited '
        f"{index * longest / BINS:.3g}-{(index + 1) * longest / BINS:.3g} s</title></rect>"
        for index, count in enumerate(bins)
    )
    axes = (
        f'<text x="{MARGIN}" y="{HEIGHT - MARGIN + 16}">0 s</text>'
        f'<text x="{WIDTH - MARGIN}" y="{HEIGHT - MARGIN + 16}" text-anchor="end">{longest:.3g} s waited</text>'
        f'<text x="{MARGIN - 6}" y="{MARGIN + 4}" text-anchor="end">{top}</text>'
    )
    return f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img">{axes}{bars}</svg>'


def _legend() -> str:
    return (
        "<p>"
        + " ".join(f'<span style="color:{colour}">&#9632; {html.escape(label)}</span>' for label, colour in SERIES)
        + " (timelines); waits from queued to started (histograms)</p>"
    )
