"""Where a running process spends its CPU, sampled from outside by py-spy: every thread, nothing changed in it.

cProfile sees one thread and doubles the cost of what it measures; `corral serve` does its store, cloud and
GitHub calls in threads. py-spy reads the stack of the thread holding the GIL 200 times a second while a
benchmark phase runs (a thread waiting, on a queue, a lock or a socket, is not counted), and `top_frames`
folds them by function: the share of samples each function was on the stack (inclusive) and on top of it
(self).

    with sampled(pid) as profile:
        ...  # the phase measured
    print(profile.report())

`BENCH_SPY_RAW=folder` also keeps each phase's raw stacks there, `stacks-1.txt` on (for `flamegraph.pl`,
speedscope, or a grep).

py-spy needs to be allowed to read another process's memory: as root, or with `kernel.yama.ptrace_scope` 0.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

RATE = 200
"""Samples a second."""


@dataclass(frozen=True)
class Frame:
    function: str
    """`name (file.py)`: the function and the file it is in, without the line (one row per function)."""
    inclusive: float
    """Share of the samples with this function anywhere on the stack."""
    own: float
    """Share of the samples with this function on top of the stack."""


def _function(frame: str) -> str:
    """`Class.method (threading.py)` of py-spy's `Class.method (path/to/threading.py:1002)`."""
    name, _, where = frame.partition(" (")
    if not where:
        return name
    path = where.removesuffix(")").rsplit(":", 1)[0]
    return f"{name} ({path.rsplit('/', 1)[-1]})"


def top_frames(raw: str, count: int) -> tuple[int, list[Frame]]:
    """py-spy's raw (collapsed) stacks, one `frame;frame;... samples` line each, folded by function: the
    total samples, and the `count` functions most often on the stack, most first (ties by name)."""
    total = 0
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, samples = line.rpartition(" ")
        if not stack or not samples.isdigit():
            continue
        n = int(samples)
        total += n
        functions = [_function(frame) for frame in stack.split(";")]
        own[functions[-1]] += n
        for function in set(functions):
            inclusive[function] += n
    ranked = sorted(inclusive.items(), key=lambda item: (-item[1], item[0]))[:count]
    return total, [Frame(name, n / total, own[name] / total) for name, n in ranked]


def top_own(raw: str, count: int) -> list[Frame]:
    """The `count` functions most often on top of the stack (where the CPU itself went), most first: what
    `top_frames` misses when the costly leaves (a parser, a driver) sit under many callers."""
    _, frames = top_frames(raw, sys.maxsize)
    return sorted(frames, key=lambda frame: (-frame.own, frame.function))[:count]


def _row(frame: Frame) -> str:
    return f"  {frame.inclusive:6.1%} {frame.own:6.1%}  {frame.function}"


@dataclass
class Profile:
    """What `sampled` gathered: py-spy's raw stacks, or why there are none."""

    raw: str = ""
    problem: str | None = None
    top: int = 40

    def report(self) -> str:
        if self.problem is not None:
            return f"profile: none ({self.problem})"
        total, frames = top_frames(self.raw, self.top)
        rows = [f"profile: {total} samples at {RATE}/s, by function (on the stack / on top)"]
        rows += [f"  {frame.inclusive:6.1%} {frame.own:6.1%}  {frame.function}" for frame in frames]
        rows += ["by time on top (self):"]
        rows += [
            f"  {frame.inclusive:6.1%} {frame.own:6.1%}  {frame.function}" for frame in top_own(self.raw, self.top)
        ]
        return "\n".join(rows)


@contextlib.contextmanager
def sampled(pid: int, top: int = 40) -> Iterator[Profile]:
    """Sample process `pid` with py-spy for as long as the block runs."""
    profile = Profile(top=top)
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        profile.problem = "py-spy is not installed: bash scripts/install.sh"
        yield profile
        return
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "stacks.txt"
        # --gil: only the thread holding the GIL, the one running Python; without it a thread pool's idle
        # workers and the loop's select showed as half of the samples.
        command = [spy, "record", "-p", str(pid), "-r", str(RATE), "--format", "raw", "--nonblocking", "--gil"]
        process = subprocess.Popen(
            [*command, "-o", str(output)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        try:
            yield profile
        finally:
            process.send_signal(signal.SIGINT)  # py-spy writes what it has on an interrupt
            _, errors = process.communicate(timeout=60)
            if output.exists():
                profile.raw = output.read_text()
                if keep := os.environ.get("BENCH_SPY_RAW"):  # the stacks themselves, for a flame graph
                    folder_kept = Path(keep)
                    folder_kept.mkdir(parents=True, exist_ok=True)
                    kept = len(list(folder_kept.glob("stacks-*.txt")))
                    (folder_kept / f"stacks-{kept + 1}.txt").write_text(profile.raw)
            else:
                profile.problem = (errors.strip().splitlines() or ["py-spy wrote nothing"])[-1]
