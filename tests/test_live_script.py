"""`scripts/live.sh` takes ministack from the repository, and ministack's scripts need nothing outside their folder.

The live suite itself needs a running ministack; these checks use `LIVE_DRY_RUN=1`, which resolves and checks
the paths and exits before installing or starting anything.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # runs scripts/live.sh (a dry run) in a child process

ROOT = Path(__file__).resolve().parents[1]
LIVE_SH = ROOT / "scripts" / "live.sh"
MINISTACK = ROOT / "scripts" / "ministack"


def dry_run(script: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run live.sh's path resolution only, with ministack's home in `tmp_path` and no MINISTACK_DIR inherited."""
    environment = {k: v for k, v in os.environ.items() if k not in {"MINISTACK_DIR", "MINISTACK_VENV"}}
    environment.update(LIVE_DRY_RUN="1", MINISTACK_HOME=str(tmp_path / "ministack-home"), **env)
    return subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=environment, timeout=30, check=False
    )


def test_live_sh_takes_ministack_from_the_repository_by_default(tmp_path: Path) -> None:
    result = dry_run(LIVE_SH, tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"[live] ministack scripts: {MINISTACK}\n" in result.stdout
    assert not (tmp_path / "ministack-home").exists()  # a dry run creates nothing


def test_live_sh_names_the_setting_when_ministack_is_not_where_it_looks(tmp_path: Path) -> None:
    result = dry_run(LIVE_SH, tmp_path, MINISTACK_DIR=str(tmp_path / "nowhere"))
    assert result.returncode == 2
    assert "set MINISTACK_DIR" in result.stderr and str(tmp_path / "nowhere") in result.stderr


def test_every_file_the_scripts_use_from_ministacks_folder_is_there() -> None:
    used = {MINISTACK / name for name in re.findall(r"\$MINISTACK_DIR/([\w./-]+)", LIVE_SH.read_text())}
    for script in MINISTACK.glob("*.sh"):
        used |= {MINISTACK / name.rstrip("/.") for name in re.findall(r"\$HERE/([\w./-]+)", script.read_text())}
    assert {path.name for path in used} >= {"install.sh", "start.sh", "stop.sh", "wsgi_apps", "mechdriver"}
    assert [path for path in used if not path.exists()] == []
    assert all(path.resolve().is_relative_to(MINISTACK) for path in used)
