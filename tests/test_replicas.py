"""Several `corral serve` replicas on one PostgreSQL: pools leased, wakes across replicas, failover, fencing.

Each replica is a real process (`corral serve`) on its own port, against the test's sandbox and a fresh
database on the real PostgreSQL, with a short lease (3 s) so that failovers fit in a test.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import yaml

from bench.support import CorralProcess, free_port
from corral.engine.leases import HOUSEKEEPING, spread
from corral.files import write_private
from corral.store import Store, tokens
from corral.store.wakes import libpq_url
from corral_sandbox.local import corral_config, pool_spec
from corral_sandbox.server import Sandbox
from tests.store_urls import postgres_url
from tests.test_end_to_end import everything_done
from tests.test_lifecycle import cloud_servers, online_per_pool
from tests.waiting import wait_until

POOLS = ("alpha", "beta", "gamma")
LEASE_S = 3.0


class Replicas:
    """The replicas of one test, their database, and what the database says they hold."""

    def __init__(self, sandbox: Sandbox, control: httpx.Client, folder: Path, database_url: str) -> None:
        self.sandbox = sandbox
        self.control = control
        self.database_url = database_url
        self.config = folder / "corral.yaml"
        self.folder = folder
        self.processes: list[CorralProcess] = []
        self.pool_settings: dict[str, dict[str, Any]] = {}
        """Per pool, settings beyond the defaults, for the config the first `start` writes."""
        self.settings: dict[str, Any] = {}
        """Top-level settings beyond (or instead of) the defaults, for the config the first `start` writes."""

    def write_config(self) -> None:
        document = corral_config(
            self.sandbox.info,
            self.database_url,
            {pool: pool_spec([pool], **{"max_runners": 4, **self.pool_settings.get(pool, {})}) for pool in POOLS},
            default_pool=POOLS[0],
            lease_time=f"{LEASE_S:.0f}s",
            # Passes far apart: a job on a pool another replica holds is served within the test's wait only
            # if the webhook's replica wakes the owner (NOTIFY), not by the next periodic pass.
            **{"reconcile_interval": "60s", "missed_job_scan": "60s", **self.settings},
        )
        write_private(self.config, yaml.safe_dump(document))

    def start(self, count: int) -> list[CorralProcess]:
        if not self.config.exists():
            self.write_config()
        started = [
            CorralProcess(self.config, free_port(), self.sandbox.info.clouds_yaml, self.folder / f"replica-{i}.log")
            for i in range(len(self.processes), len(self.processes) + count)
        ]
        for process in started:
            process.start()
        for process in started:
            process.wait_serving()
        self.processes += started
        self.send_webhooks_to(started[0])
        return started

    def send_webhooks_to(self, process: CorralProcess) -> None:
        self.control.put("/webhook", json={"url": f"{process.url}/webhook"}).raise_for_status()

    def name(self, process: CorralProcess) -> str:
        return f"{socket.gethostname()}:{process.port}"

    def holders(self) -> dict[str, str]:
        """Pool -> replica, for the leases that have not expired."""
        with psycopg.connect(libpq_url(self.database_url)) as connection:
            rows = connection.execute("SELECT pool, holder FROM pool_leases WHERE expires_at > now()").fetchall()
        return {pool: holder for pool, holder in rows}

    def expected(self, live: list[CorralProcess]) -> dict[str, str]:
        names = [self.name(process) for process in live]
        return spread((*POOLS, HOUSEKEEPING), names)

    def token(self, scope: str = "read") -> str:
        """An API token, in the database every replica shares."""
        store = Store(self.database_url)
        _, value = store.run_blocking(tokens.create, f"replicas-test-{scope}", scope)
        store.close()
        return value

    def runners_per_pool(self) -> dict[str, int]:
        with psycopg.connect(libpq_url(self.database_url)) as connection:
            rows = connection.execute("SELECT pool, count(*) FROM runners GROUP BY pool").fetchall()
        return {pool: int(count) for pool, count in rows}

    def stop(self) -> None:
        for process in self.processes:
            if process.exit_code is None:
                with_signal(process, signal.SIGCONT)
            process.stop()


def with_signal(process: CorralProcess, signum: signal.Signals) -> None:
    os.kill(process.pid, signum)


@pytest.fixture
def replicas(sandbox: Sandbox, control: httpx.Client, tmp_path: Path) -> Iterator[Replicas]:
    with postgres_url() as url:
        group = Replicas(sandbox, control, tmp_path, url)
        try:
            yield group
        finally:
            group.stop()


def pool_shown_by(process: CorralProcess, token: str, name: str) -> dict[str, Any]:
    """The pool as this replica's `/api/v1/pools` shows it."""
    pools = httpx.get(f"{process.url}/api/v1/pools", headers={"Authorization": f"Bearer {token}"}).json()
    found: dict[str, Any] = next(found for found in pools if found["name"] == name)
    return found


def queue(control: httpx.Client, pool: str, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        job = control.post("/jobs", json={"repo": "octo-org/app", "labels": [pool], "duration": 0.0})
        job.raise_for_status()
        ids.append(int(job.json()["id"]))
    return ids


def all_completed(control: httpx.Client, job_ids: list[int]) -> Callable[[], bool]:
    def check() -> bool:
        return all(control.get(f"/jobs/{job_id}").json()["status"] == "completed" for job_id in job_ids)

    return check


def test_three_replicas_spread_the_pools_and_serve_jobs_whichever_takes_the_webhook(
    replicas: Replicas, control: httpx.Client, sandbox: Sandbox
) -> None:
    live = replicas.start(3)
    wait_until(lambda: replicas.holders() == replicas.expected(live), timeout=30, what="every pool leased")
    token = replicas.token()
    for process in live:  # any replica answers for all of them
        answer = httpx.get(f"{process.url}/api/v1/replicas", headers={"Authorization": f"Bearer {token}"})
        listed = {row["name"]: row for row in answer.json()}
        assert set(listed) == {replicas.name(p) for p in live} and all(row["live"] for row in listed.values())
        assert {pool: name for name, row in listed.items() for pool in row["pools"]} == replicas.holders()
        assert [row["answering"] for row in listed.values()].count(True) == 1
        pools = httpx.get(f"{process.url}/api/v1/pools", headers={"Authorization": f"Bearer {token}"}).json()
        assert {view["name"]: view["held_by"] for view in pools} == {p: replicas.holders()[p] for p in POOLS}
    jobs = [job for pool in POOLS for job in queue(control, pool, 4)]
    wait_until(all_completed(control, jobs), timeout=45, what="every job served through the webhook's replica")
    assert replicas.runners_per_pool() == dict.fromkeys(POOLS, 4), "one runner per job, never two replicas' worth"
    wait_until(lambda: cloud_servers(sandbox) == {}, timeout=90, what="every server deleted once its job was done")


def test_a_killed_replica_pools_move_to_the_others_and_come_back_when_it_returns(
    replicas: Replicas, control: httpx.Client
) -> None:
    live = replicas.start(3)
    wait_until(lambda: replicas.holders() == replicas.expected(live), timeout=30, what="every pool leased")
    victim = next(p for p in live if replicas.name(p) in set(replicas.holders().values()) - {replicas.name(live[0])})
    victim_pools = [pool for pool, holder in replicas.holders().items() if holder == replicas.name(victim)]
    victim.kill()
    survivors = [process for process in live if process is not victim]
    wait_until(
        lambda: replicas.holders() == replicas.expected(survivors), timeout=LEASE_S * 4, what="the pools failed over"
    )
    jobs = [job for pool in victim_pools if pool != HOUSEKEEPING for job in queue(control, pool, 2)]
    wait_until(all_completed(control, jobs), timeout=45, what="the killed replica's pools served by the others")
    victim.start()
    victim.wait_serving()
    wait_until(lambda: replicas.holders() == replicas.expected(live), timeout=LEASE_S * 4, what="its pools handed back")


def test_a_paused_replica_is_fenced_off_when_it_wakes_and_acts_no_more(
    replicas: Replicas, control: httpx.Client
) -> None:
    live = replicas.start(2)
    wait_until(lambda: replicas.holders() == replicas.expected(live), timeout=30, what="every pool leased")
    holders = replicas.holders()
    paused = next(p for p in live if replicas.name(p) in {holders[pool] for pool in POOLS})
    other = next(p for p in live if p is not paused)
    pools_of_paused = [pool for pool in POOLS if holders[pool] == replicas.name(paused)]
    replicas.send_webhooks_to(other)
    with_signal(paused, signal.SIGSTOP)
    try:
        wait_until(
            lambda: all(replicas.holders().get(pool) == replicas.name(other) for pool in pools_of_paused),
            timeout=LEASE_S * 4,
            what="the paused replica's pools taken over",
        )
        jobs = [job for pool in pools_of_paused for job in queue(control, pool, 2)]
        wait_until(all_completed(control, jobs), timeout=45, what="its jobs served by the other replica")
    finally:
        with_signal(paused, signal.SIGCONT)
    wait_until(
        lambda: "lease lost" in paused.log_path.read_text(), timeout=LEASE_S * 4, what="the woken replica's loss"
    )
    wait_until(lambda: replicas.holders() == replicas.expected(live), timeout=LEASE_S * 6, what="pools rebalanced")
    more = [job for pool in pools_of_paused for job in queue(control, pool, 1)]
    wait_until(all_completed(control, more), timeout=45, what="jobs served after it rejoined")
    runs: dict[str, Any] = replicas.runners_per_pool()
    for pool in pools_of_paused:
        assert runs[pool] == 3, f"pool {pool}: one runner per job, none twice after the pause: {runs}"


def test_an_operator_acting_on_any_replica_reaches_the_pools_owner(
    replicas: Replicas, control: httpx.Client, sandbox: Sandbox
) -> None:
    replicas.pool_settings[POOLS[2]] = {"min_idle": 1}
    live = replicas.start(2)
    wait_until(lambda: replicas.holders() == replicas.expected(live), timeout=30, what="every pool leased")
    holders = replicas.holders()
    pool = POOLS[0]
    owner = next(p for p in live if replicas.name(p) == holders[pool])
    elsewhere = next(p for p in live if p is not owner)
    admin = replicas.token("admin")
    api = httpx.Client(base_url=elsewhere.url, headers={"Authorization": f"Bearer {admin}"}, timeout=10)
    with api:
        assert api.post(f"/api/v1/pools/{pool}/drain").status_code == 200
        jobs = queue(control, pool, 1)
        served_elsewhere = queue(control, POOLS[1], 1) if holders[POOLS[1]] != holders[pool] else []
        wait_until(all_completed(control, served_elsewhere), timeout=30, what="another pool still served")
        assert control.get(f"/jobs/{jobs[0]}").json()["status"] == "queued", "the drained pool starts nothing"
        assert api.post(f"/api/v1/pools/{pool}/undrain").status_code == 200
        wait_until(all_completed(control, jobs), timeout=30, what="the undrained pool served its job")
        warm = POOLS[2]
        warm_owner = holders[warm]

        def warm_runner() -> dict[str, Any] | None:
            runners = api.get("/api/v1/runners", params={"pool": warm}).json()
            return next((r for r in runners if r["state"] in ("booting", "idle")), None)

        first = wait_until(warm_runner, timeout=30, what="the warm pool's runner")
        answer = api.delete(f"/api/v1/runners/{first['id']}")
        # Whichever replica holds the pool, the answer is what the owner did, not "passed on".
        assert (answer.status_code, answer.json()["outcome"]) == (202, "deleting")
        wait_until(
            lambda: (r := warm_runner()) is not None and r["id"] != first["id"],
            timeout=30,
            what="the deleted runner replaced by its pool's owner",
        )
        # A reload asked of one replica reaches every replica (each re-reads its own file).
        replicas.pool_settings[warm] = {"min_idle": 2}
        replicas.write_config()
        reloaded = api.post("/api/v1/reload")
        assert reloaded.status_code == 200, reloaded.text
        assert reloaded.json()["replicas"] == {replicas.name(owner): "reloaded"}

        def starting_or_idle() -> int:
            runners = api.get("/api/v1/runners", params={"pool": warm}).json()
            return sum(runner["state"] in ("pending", "creating", "booting", "idle") for runner in runners)

        wait_until(
            lambda: starting_or_idle() == 2, timeout=30, what=f"the warm pool grown to 2 by its owner ({warm_owner})"
        )


def test_a_replica_older_than_the_schema_a_newer_one_migrated_to_stops_acting(replicas: Replicas) -> None:
    """A rolling upgrade: a newer replica migrates the database while an older one runs. The older one must
    not act on a schema it does not know: it lets its pools go and says why."""
    (old,) = replicas.start(1)
    wait_until(lambda: replicas.holders() == replicas.expected([old]), timeout=30, what="every pool leased")
    with psycopg.connect(libpq_url(replicas.database_url), autocommit=True) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '9001'")
    wait_until(lambda: replicas.holders() == {}, timeout=LEASE_S * 3, what="the old replica letting its pools go")
    assert "newer than this corral knows" in old.log_path.read_text()
    assert old.exit_code is None, "it stays up (its API still answers) but acts for nothing"


def test_every_replica_shows_a_scale_set_pool_whichever_holds_it(replicas: Replicas, control: httpx.Client) -> None:
    """The scale set and its session live on the pool's holder; the others read them from the database."""
    control.put("/scalesets/settings", json={"long_poll_s": 0.2}).raise_for_status()
    pool = POOLS[2]
    replicas.pool_settings[pool] = {"intake": "scale_set"}
    live = replicas.start(2)
    wait_until(lambda: replicas.holders() == replicas.expected(live), timeout=30, what="every pool leased")
    (scale_set,) = wait_until(
        lambda: [found for found in control.get("/scalesets").json() if found["session"]],
        timeout=30,
        what="the pool's holder listening on its scale set",
    )
    token = replicas.token()

    def listening_on(process: CorralProcess) -> dict[str, Any] | None:
        """The pool as this replica shows it, once it shows the session and who holds the pool. Under load a
        lease renewed late reads as lapsed for a moment (`held_by` null): that moment is not what is asked."""
        found = pool_shown_by(process, token, pool)
        return found if found["session"] == "listening" and found["held_by"] is not None else None

    for process in live:
        shown = wait_until(
            partial(listening_on, process), timeout=30, what=f"{replicas.name(process)} showing the session"
        )
        assert (shown["intake"], shown["scale_set_id"]) == ("scale_set", scale_set["id"])
        assert shown["held_by"] == replicas.holders()[pool]
    jobs = queue(control, pool, 2)
    wait_until(all_completed(control, jobs), timeout=45, what="the scale-set pool's jobs served")


def test_every_replica_shows_an_auto_pool_as_its_holder_keeps_it(replicas: Replicas) -> None:
    """`min_idle: {auto: ...}` is worked out on the pool's holder, from the history it reads; the other replicas
    show what the holder's last pass kept and why (its forecast), not the schedule's floor beneath it."""
    pool = POOLS[1]
    replicas.pool_settings[pool] = {"min_idle": {"auto": {"target_wait": "30s", "min": 1}}}
    live = replicas.start(2)
    wait_until(lambda: replicas.holders() == replicas.expected(live), timeout=30, what="every pool leased")
    token = replicas.token()

    def shown(process: CorralProcess) -> dict[str, Any] | None:
        found = pool_shown_by(process, token, pool)
        return found if found["min_idle_auto"] is not None else None

    views = [
        wait_until(partial(shown, process), timeout=30, what=f"{replicas.name(process)} showing auto")
        for process in live
    ]
    # No boot measured yet: auto keeps `min` and says it is learning, on the holder and elsewhere alike.
    for view in views:
        assert (view["min_idle"], view["min_idle_auto"]["wanted"]) == (1, 1), view
        assert view["min_idle_auto"]["reason"] == views[0]["min_idle_auto"]["reason"]
        assert "learning" in view["min_idle_auto"]["reason"]
    assert {view["held_by"] for view in views} == {replicas.holders()[pool]}


def refused_for_quota(replicas: Replicas) -> list[str]:
    with psycopg.connect(libpq_url(replicas.database_url)) as connection:
        rows = connection.execute("SELECT message FROM runners WHERE message ILIKE '%quota%'").fetchall()
    return [row[0] for row in rows]


def test_two_replicas_sharing_a_quota_of_four_never_send_a_create_it_refuses(replicas: Replicas) -> None:
    """Each replica holds one of two pools, and jobs come for both at once: each replica's own reading shows
    room for four, so planning with only its own creates, both would start four and Nova would refuse half."""
    control = replicas.control
    control.put("/quota", json={"instances": 4}).raise_for_status()
    replicas.settings = {"reconcile_interval": "2s"}
    replicas.pool_settings = {pool: {"max_runners": 8} for pool in POOLS}
    live = replicas.start(2)
    wait_until(lambda: replicas.holders() == replicas.expected(live), timeout=30, what="every pool leased")
    holders = replicas.holders()
    first = POOLS[0]
    second = next(pool for pool in POOLS if holders[pool] != holders[first])
    jobs = [{"at": 0.0, "repo": "octo-org/app", "labels": [pool], "duration": 2.0} for pool in (first, second) * 6]
    control.post("/trace", json={"jobs": jobs}).raise_for_status()
    wait_until(lambda: everything_done(control, 12), timeout=120, what="all 12 jobs served, four servers at a time")
    refused = refused_for_quota(replicas)
    assert refused == [], f"{len(refused)} creates refused for quota: {refused[:2]}"


def test_a_high_priority_pool_waiting_on_one_replica_takes_the_room_of_warm_runners_on_another(
    replicas: Replicas, sandbox: Sandbox
) -> None:
    """The quota is full of a low-priority pool's warm runners, held by one replica, when jobs come for a
    high-priority pool another replica holds: the wait reaches the first replica through the pool's status row,
    its warm runners make room (idle_grace is an hour), and the jobs are served."""
    control = replicas.control
    control.put("/quota", json={"instances": 3}).raise_for_status()
    replicas.settings = {"reconcile_interval": "2s"}
    live = replicas.start(2)
    wait_until(lambda: replicas.holders() == replicas.expected(live), timeout=30, what="every pool leased")
    holders = replicas.holders()
    high = POOLS[0]
    low = next(pool for pool in POOLS if holders[pool] != holders[high])
    replicas.pool_settings = {
        low: {"min_idle": 3, "priority": 1, "idle_grace": "1h"},
        high: {"priority": 10, "max_runners": 3},
    }
    replicas.write_config()
    admin = replicas.token("admin")
    reloaded = httpx.post(f"{live[0].url}/api/v1/reload", headers={"Authorization": f"Bearer {admin}"}, timeout=30)
    assert reloaded.status_code == 200, reloaded.text
    wait_until(lambda: online_per_pool(sandbox) == {low: 3}, timeout=30, what="the low pool warm, the quota full")
    jobs = queue(control, high, 2)
    wait_until(all_completed(control, jobs), timeout=60, what="the high pool's jobs served in the low pool's room")
    assert {control.get(f"/jobs/{job}").json()["runner_name"].split("-")[1] for job in jobs} == {high}
    refused = refused_for_quota(replicas)
    assert refused == [], f"{len(refused)} creates refused for quota: {refused[:2]}"
