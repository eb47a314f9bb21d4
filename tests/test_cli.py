"""The `corral` command as an operator runs it: exit codes and what it prints."""

from __future__ import annotations

import json
import sqlite3
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from corral.api.views import pool_views
from corral.cli import main
from corral.clock import utcnow
from corral.model import Delivery, JobState, JobUpdate
from corral.simulate.trace import Trace, TraceJob, load_trace
from corral.store import Store, jobs
from corral.store.database import head_revision, schema_revision
from corral_sandbox.local import LocalCorral, corral_config, pool_spec
from corral_sandbox.server import Sandbox
from tests.waiting import wait_until


def write(path: Path, document: object) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


GOOD: dict[str, Any] = {
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
    bad = {**GOOD, "default_pool": "nope", "pools": {"small": {**GOOD["pools"]["small"], "max_runners": 0}}}
    assert main(["config", "check", str(write(tmp_path / "c.yaml", bad))]) == 1
    err = capsys.readouterr().err
    assert "pools.small.max_runners" in err


def test_config_check_reports_every_phase_in_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A refused field (a short webhook secret, a typo) used to hide every rule across sections: the template,
    the default pool, labels that tell pools apart, placements, shared volumes' pools, pool names."""
    (tmp_path / "typo.sh").write_text("#!/bin/sh\nexec ./run.sh --name ${runer_name}\n")
    small = GOOD["pools"]["small"]
    bad = {
        "github": {"token": "ghp_secret_value", "webhook_secret": "hunter2"},
        "user_data_template": "typo.sh",
        "default_pool": "huge",
        "extra_volumes": [{"name": "docker", "size_gb": 20, "propagation": ["c", "nope"]}],
        "pools": {
            "a": {**small, "placements": [{"cloud": "nowhere"}]},
            "b": small,
            "c": {**small, "labels": ["gpu"], "flavr": "m1.large"},
            "Big_Pool": {**small, "labels": ["big"]},
        },
    }
    path = write(tmp_path / "c.yaml", bad)
    assert main(["config", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"{path}: 8 problem(s)",
        "  - github.webhook_secret: too short (at least 16 characters): anyone who can guess it can sign fake jobs "
        "and make corral start VMs; generate one with `openssl rand -hex 32` and set it here and in GitHub's "
        "webhook settings, or remove the key to turn /webhook off",
        "  - pools.c.flavr: unknown key; remove it or check its spelling",
        "  - pools: pool name 'Big_Pool' cannot be part of a server name: use 1-24 lowercase letters, digits and "
        "dashes, starting and ending with a letter or digit",
        "  - pools.a.placements.0.cloud: 'nowhere' names no cloud (known: ['default']); declare your clouds in "
        "`clouds` by name",
        "  - default_pool: 'huge' names no pool; use one of ['Big_Pool', 'a', 'b', 'c']",
        "  - pools.b: same scope and labels as pool 'a', so no job could tell them apart; give one of them a "
        "distinguishing label",
        f"  - user_data_template: user data template {tmp_path / 'typo.sh'}: unknown placeholder ${{runer_name}}; "
        "use ${jit_config}, ${runner_name}, ${pool}, ${labels}, ${runner_download_url}, ${cache_volume}, "
        "${cache_mount} ($$ for a $); point it at a readable string.Template script",
        "  - extra_volumes.0.propagation: no pool named ['nope']; use 'all' or pool names from "
        "['Big_Pool', 'a', 'b', 'c']",
    ]
    assert "hunter2" not in err


@pytest.mark.parametrize("command", [["demo", "--duration", "3"], ["sandbox", "--boot-delay", "0.2"]])
def test_without_corral_sandbox_the_demo_and_sandbox_say_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    # A None entry in sys.modules is how Python marks a module that cannot be imported: as in a production venv
    # with corral's wheel alone (scripts/check-wheel.sh runs the installed command there too).
    for name in [name for name in sys.modules if name == "corral_sandbox" or name.startswith("corral_sandbox.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "corral_sandbox", None)

    status = main(command)

    captured = capsys.readouterr()
    assert (status, captured.out) == (2, "")
    assert captured.err == (
        f"corral {command[0]}: the sandbox is not installed; `corral {command[0]}` needs the corral-sandbox "
        "distribution of the same version as corral (0.1.0). From a checkout of corral: `bash scripts/install.sh` "
        "(a development venv with both), or `pip install ./sandbox` into this environment.\n"
    )


def test_migrate_creates_the_schema(tmp_path: Path) -> None:
    database = tmp_path / "corral.db"
    assert main(["migrate", "--database-url", f"sqlite:///{database}"]) == 0
    tables = {row[0] for row in sqlite3.connect(database).execute("select name from sqlite_master")}
    assert {"runners", "runner_events", "jobs", "deliveries", "pool_status"} <= tables


def test_tokens_are_shown_once_listed_without_values_and_revocable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--database-url", f"sqlite:///{tmp_path / 'corral.db'}"]
    assert main(["token", *url, "create", "--name", "grafana", "--scope", "metrics"]) == 0
    token = capsys.readouterr().out.strip()
    assert token.startswith("corral_")
    assert main(["token", *url, "list", "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert (listed["name"], listed["scope"], listed["revoked_at"]) == ("grafana", "metrics", None)
    assert token not in json.dumps(listed)
    assert main(["token", *url, "revoke", listed["id"]]) == 0
    assert main(["token", *url, "revoke", listed["id"]]) == 1


@pytest.mark.parametrize("where", ["before the action", "after the action"])
def test_token_commands_take_the_config_before_or_after_the_action(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """The README writes `corral token create --config corral.yaml ...`; both orders work."""
    config = write(tmp_path / "c.yaml", {**GOOD, "database_url": f"sqlite:///{tmp_path / 'corral.db'}"})

    def token(action: str, *rest: str) -> list[str]:
        option = ["--config", str(config)]
        return ["token", *option, action, *rest] if where == "before the action" else ["token", action, *option, *rest]

    assert main(token("create", "--name", "ops", "--scope", "admin")) == 0
    assert capsys.readouterr().out.startswith("corral_")
    assert main(token("list", "--json")) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert (listed["name"], listed["scope"]) == ("ops", "admin")
    assert main(token("revoke", listed["id"])) == 0


def test_an_option_after_the_action_wins_over_one_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path / "c.yaml", {**GOOD, "database_url": f"sqlite:///{tmp_path / 'from-config.db'}"})
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert main(["token", "--config", str(config), "create", "--database-url", other, "--name", "x"]) == 0
    assert (tmp_path / "other.db").exists() and not (tmp_path / "from-config.db").exists()


def recorded_job(store: Store, job_id: int, queued: datetime, ran_s: float, workflow: str | None = None) -> None:
    """A job queued at `queued` that ran `ran_s` seconds, as webhook intake records its `completed` delivery."""
    update = JobUpdate(
        job_id,
        "octo-org/app",
        ("self-hosted", "linux"),
        JobState.COMPLETED,
        "small",
        queued_at=queued,
        started_at=queued + timedelta(seconds=30),
        completed_at=queued + timedelta(seconds=30 + ran_s),
        workflow=workflow,
    )
    delivery = Delivery(id=f"delivery-{job_id}", event="workflow_job", action="completed", job=update)
    store.run_blocking(jobs.record, [delivery], now=queued + timedelta(seconds=30 + ran_s))


def test_jobs_export_writes_the_databases_jobs_as_a_trace_that_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "corral.db"
    config = write(tmp_path / "c.yaml", {**GOOD, "database_url": f"sqlite:///{database}"})
    store = Store(f"sqlite:///{database}")
    store.migrate()
    t0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    recorded_job(store, 2, t0 + timedelta(minutes=5), 12.5)
    recorded_job(store, 1, t0, 300, workflow="CI")
    recorded_job(store, 3, t0 - timedelta(days=2), 60)
    store.close()
    output = tmp_path / "jobs.jsonl"

    since = ["--since", "2026-03-01T09:00:00Z"]
    assert main(["jobs", "export", "--config", str(config), *since, "--format", "jsonl", "--output", str(output)]) == 0
    assert output.read_text() == (
        '{"at": "2026-03-02T09:00:00Z", "repo": "octo-org/app", "labels": ["self-hosted", "linux"], "duration": 300, '
        '"workflow_name": "CI"}\n'
        '{"at": "2026-03-02T09:05:00Z", "repo": "octo-org/app", "labels": ["self-hosted", "linux"], "duration": 12.5}\n'
    )
    assert capsys.readouterr() == (
        "",
        f"corral jobs export: 2 job(s) queued since 2026-03-01T09:00:00+00:00 to {output}\n",
    )
    assert load_trace(output) == Trace(
        jobs=(
            TraceJob(
                at=0.0, repo="octo-org/app", labels=("self-hosted", "linux"), duration=300.0, workflow_name="CI", line=1
            ),
            TraceJob(
                at=300.0,
                repo="octo-org/app",
                labels=("self-hosted", "linux"),
                duration=12.5,
                workflow_name=None,
                line=2,
            ),
        ),
        origin=t0,
    )


def test_jobs_export_takes_a_duration_back_from_now_and_writes_to_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    store = Store(url)
    store.migrate()
    recent = utcnow().replace(microsecond=0) - timedelta(days=6)
    recorded_job(store, 1, recent, 42)
    recorded_job(store, 2, recent - timedelta(days=2), 42)
    store.close()
    assert main(["jobs", "export", "--database-url", url, "--since", "7d"]) == 0
    out, err = capsys.readouterr()
    stamp = recent.isoformat().replace("+00:00", "Z")
    assert out == f'{{"at": "{stamp}", "repo": "octo-org/app", "labels": ["self-hosted", "linux"], "duration": 42}}\n'
    assert err.startswith("corral jobs export: 1 job(s) queued since ") and err.endswith("\n")


def test_jobs_export_refuses_what_it_cannot_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match=r"^corral jobs export: --since 'last week' is neither an ISO 8601 time"):
        main(["jobs", "export", "--database-url", f"sqlite:///{tmp_path / 'corral.db'}", "--since", "last week"])
    assert main(["jobs", "export"]) == 2
    assert capsys.readouterr().err == "corral jobs export: give --config or --database-url\n"
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    # It only reads: a database whose schema is not this corral's is refused, not migrated under its server.
    assert main(["jobs", "export", "--database-url", url]) == 2
    assert capsys.readouterr().err == (
        f"corral jobs export: the database's schema is at revision None, older than this corral's "
        f"{head_revision()!r}; this command only reads and changes nothing: run `corral migrate` first, or use the "
        "corral version that serves it\n"
    )
    store = Store(url)
    try:
        assert store.run_blocking(schema_revision) is None, "nothing was migrated"
        store.migrate()
    finally:
        store.close()
    unwritable = tmp_path / "no-such-folder" / "jobs.jsonl"
    assert main(["jobs", "export", "--database-url", url, "--output", str(unwritable)]) == 1
    assert capsys.readouterr().err == (
        f"corral jobs export: cannot write {str(unwritable)!r} (No such file or directory); check the path\n"
    )


def test_a_refused_request_prints_one_line_per_problem_naming_the_field(sandbox: Sandbox, tmp_path: Path) -> None:
    """FastAPI refuses bad parameters with a list of problems; the command used to print that list raw."""
    document = corral_config(sandbox.info, f"sqlite:///{tmp_path / 'corral.db'}", {"small": pool_spec(["small"])})
    corral = LocalCorral(sandbox.info, tmp_path / "corral.yaml", document).start()
    try:
        remote = ["--url", corral.url, "--token", corral.token]
        with pytest.raises(SystemExit) as refused:
            main(["runners", *remote, "--pool", "Not_A_Pool", "--state", "idle", "--state", "sleepy"])
        assert str(refused.value).splitlines() == [
            "corral: GET /api/v1/runners: HTTP 422: 2 problem(s)",
            "  - query parameter pool: String should match pattern '^[a-z0-9]([a-z0-9-]{0,22}[a-z0-9])?$'",
            "  - query parameter state[1]: Input should be 'pending', 'creating', 'booting', 'idle', 'busy', "
            "'finished', 'failed', 'deleting' or 'deleted'",
        ]
        with pytest.raises(SystemExit) as unknown:
            main(["drain", "nope", *remote])
        assert str(unknown.value) == "corral: POST /api/v1/pools/nope/drain: HTTP 404: no pool 'nope'"
    finally:
        corral.stop()


def test_client_commands_talk_to_a_running_corral(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = corral_config(
        sandbox.info, f"sqlite:///{tmp_path / 'corral.db'}", {"small": pool_spec(["small"], min_idle=1)}
    )
    corral = LocalCorral(sandbox.info, tmp_path / "corral.yaml", document).start()
    try:
        remote = ["--url", corral.url, "--token", corral.token]

        def one_idle() -> bool:
            corral.settle()
            views = corral.call(lambda: pool_views(corral.service.config, corral.service.operator))
            return views[0].idle == 1

        wait_until(one_idle, what="one idle runner")
        assert main(["pools", *remote]) == 0
        table = capsys.readouterr().out.splitlines()
        assert table[0].split()[:3] == ["NAME", "DEFAULT", "READY"]
        assert table[1].split()[:4] == ["small", "True", "True", "1"]
        assert main(["runners", *remote, "--json", "--state", "idle"]) == 0
        assert [runner["pool"] for runner in json.loads(capsys.readouterr().out)] == ["small"]
        assert main(["drain", "small", *remote, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["reason"] == "drained by an operator"
        with pytest.raises(SystemExit, match="wants a token"):
            main(["pools", "--url", corral.url])
        document["pools"]["small"]["min_idle"] = 2
        corral.write_config(document)
        assert main(["reload", *remote]) == 0
        assert capsys.readouterr().out.startswith("this replica: reloaded, generation 2")
        document["pools"]["small"]["max_runners"] = -1
        corral.write_config(document)
        assert main(["reload", *remote]) == 1, "a refused reload is a failed command"
        out = capsys.readouterr().out
        assert out.startswith("this replica: refused") and "pools.small.max_runners" in out
    finally:
        corral.stop()
