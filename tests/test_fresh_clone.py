"""A `git clone` into an empty folder carries everything its tests need: nothing is looked up beside it.

The clone is of the committed HEAD, into a temporary folder with nothing else in it, so a test that reads a
file the repository does not carry (reference fixtures, ministack's scripts) fails here even on a machine where
that file happens to sit next to the checkout. The clone runs with this session's Python, but imports its own
code: PYTHONPATH puts the clone (and its sandbox/, where corral_sandbox lives) ahead of the editable installs of
this checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def git(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def git_toplevel() -> Path | None:
    """This checkout's root if it is a git checkout and git is installed, else None."""
    if shutil.which("git") is None:
        return None
    result = git("rev-parse", "--show-toplevel")
    return Path(result.stdout.strip()).resolve() if result.returncode == 0 else None


pytestmark = [
    pytest.mark.e2e,  # clones the repository and runs pytest in the clone
    pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed, so there is nothing to clone with"),
    pytest.mark.skipif(
        shutil.which("git") is not None and git_toplevel() != ROOT,
        reason=f"{ROOT} is not the root of a git checkout (an unpacked archive?), so there is no HEAD to clone",
    ),
]


def run_in(checkout: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run this session's Python in `checkout`, importing `corral`, `corral_sandbox` and `tests` from there."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    environment.update(
        PYTHONPATH=os.pathsep.join([str(checkout), str(checkout / "sandbox")]), PYTHONDONTWRITEBYTECODE="1"
    )
    return subprocess.run(
        [sys.executable, *args], cwd=checkout, env=environment, capture_output=True, text=True, timeout=timeout
    )


def collected(checkout: Path) -> list[str]:
    """The node ids pytest collects in `checkout`; fails on any collection error."""
    # Collecting imports every test module: ~12 s alone, minutes beside the rest of the suite on two cores.
    result = run_in(checkout, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", timeout=400)
    assert result.returncode == 0, f"collection in {checkout} failed:\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"
    return [line for line in result.stdout.splitlines() if "::" in line]


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """HEAD cloned into `<empty folder>/corral`: no `shared` (or anything else) beside it."""
    parent = tmp_path_factory.mktemp("fresh-clone")
    target = parent / "corral"
    result = git("clone", "--quiet", "--no-hardlinks", str(ROOT), str(target))
    assert result.returncode == 0, result.stderr
    assert [path.name for path in parent.iterdir()] == ["corral"]
    yield target
    shutil.rmtree(target, ignore_errors=True)


def test_the_clone_imports_its_own_code(clone: Path) -> None:
    result = run_in(
        clone,
        "-c",
        "import corral, corral_sandbox, tests; print(corral.__file__, corral_sandbox.__file__, tests.__file__)",
    )
    assert result.returncode == 0, result.stderr
    imported = [Path(line).resolve() for line in result.stdout.split()]
    assert imported == [
        clone.resolve() / "corral" / "__init__.py",
        clone.resolve() / "sandbox" / "corral_sandbox" / "__init__.py",
        clone.resolve() / "tests" / "__init__.py",
    ]


@pytest.mark.long
def test_a_fresh_clone_collects_every_test_without_errors(clone: Path) -> None:
    in_clone = collected(clone)
    # Every test module committed at HEAD contributes tests in the clone (one that needs a file the clone lacks
    # fails collection above). Collected once, in the clone only: a second collection here cost ~50 s of CPU.
    modules = git("ls-files", "tests", cwd=clone).stdout.split()
    test_modules = {path for path in modules if Path(path).name.startswith("test_") and path.endswith(".py")}
    collected_modules = {node.split("::")[0] for node in in_clone}
    assert test_modules, "the clone has no test modules"
    assert sorted(test_modules - collected_modules) == [], "test modules the clone collected nothing from"


def test_a_fresh_clone_carries_the_webhook_fixtures_and_ministack(clone: Path) -> None:
    fixtures = run_in(clone, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_webhook_fixtures.py")
    assert fixtures.returncode == 0, fixtures.stdout[-4000:]
    assert " passed" in fixtures.stdout and "skipped" not in fixtures.stdout

    environment = {k: v for k, v in os.environ.items() if k not in {"MINISTACK_DIR", "MINISTACK_VENV"}}
    environment.update(LIVE_DRY_RUN="1", MINISTACK_HOME=str(clone.parent / "ministack-home"))
    live = subprocess.run(
        ["bash", str(clone / "scripts" / "live.sh")], capture_output=True, text=True, env=environment, timeout=30
    )
    assert live.returncode == 0, live.stderr
    assert f"[live] ministack scripts: {clone / 'scripts' / 'ministack'}\n" in live.stdout
