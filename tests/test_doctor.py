"""`corral doctor` against the sandbox: a healthy setup passes item by item, and each problem, injected once
through the sandbox's control API or the config, fails the run naming its item and the fix."""

from __future__ import annotations

import io
import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openstack.connection
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from corral.cli import main
from corral.config import load_config
from corral.doctor import run_doctor
from corral.doctor.report import Level
from corral.doctor.run import diagnose
from corral.store import Store
from corral_sandbox.local import app_github, corral_config, pool_spec
from corral_sandbox.server import Sandbox
from tests.waiting import wait_until
from tests.webhook_receiver import WebhookReceiver

HEALTHY_ITEMS = {
    ("cloud", "cloud configuration"),
    ("cloud", "keystone authentication"),
    ("cloud", "service catalog"),
    ("cloud", "pool small: image"),
    ("cloud", "pool small: flavor"),
    ("cloud", "pool small: network private"),
    ("cloud", "pool small: security group default"),
    ("cloud", "pool small: key pair"),
    ("cloud", "pool small: availability zone"),
    ("cloud", "pool small: volume type ssd"),
    ("cloud", "pool small: quota"),
    ("github", "reachable"),
    ("github", "clock"),
    ("github", "github app"),
    ("github", "installation org:octo-org"),
    ("github", "permissions org:octo-org"),
    ("github", "webhook secret"),
    ("github", "webhook deliveries"),
    ("database", "database connection"),
    ("database", "database schema"),
}
ROOMY_QUOTA = {"instances": 20, "cores": 40, "ram": 100_000, "volumes": 100, "gigabytes": 2000}


def free_port() -> int:
    """A loopback port nothing listens on (a connection to it is refused at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Setup:
    """A config document for the sandbox (App auth, a migrated SQLite database, a pool using every kind of
    named resource) and a way to run the doctor on it."""

    def __init__(self, sandbox: Sandbox, tmp_path: Path) -> None:
        self.sandbox = sandbox
        self.tmp_path = tmp_path
        database = tmp_path / "corral.db"
        store = Store(f"sqlite:///{database}")
        store.migrate()
        store.close()
        pool = pool_spec(
            ["small"],
            security_groups=["default"],
            key_name="ops",
            availability_zone="nova",
            boot_volume_gb=20,
            boot_volume_type="ssd",
            extra_volumes=[{"name": "cache", "size_gb": 10}],
        )
        self.document = corral_config(sandbox.info, f"sqlite:///{database}", {"small": pool})
        self.document["github"] = app_github(sandbox.info)
        self.path = tmp_path / "corral.yaml"

    @property
    def pool(self) -> dict[str, Any]:
        pool: dict[str, Any] = self.document["pools"]["small"]
        return pool

    def text(self) -> tuple[int, str]:
        self.path.write_text(yaml.safe_dump(self.document))
        out = io.StringIO()
        code = run_doctor(self.path, out=out)
        return code, out.getvalue()

    def json(self) -> tuple[int, dict[str, Any]]:
        self.path.write_text(yaml.safe_dump(self.document))
        out = io.StringIO()
        code = run_doctor(self.path, as_json=True, out=out)
        return code, json.loads(out.getvalue())


def item(report: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [check for check in report["checks"] if check["item"] == name]
    assert len(found) == 1, (name, [check["item"] for check in report["checks"]])
    return found[0]


def failures(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["item"]: check for check in report["checks"] if check["status"] == "fail"}


@pytest.fixture(autouse=True)
def abandoned_sections_finish() -> Iterator[None]:
    """A section past its deadline leaves its thread running (the doctor abandons it, as it should): it must
    not reach the sandbox during the next test on this worker, where it would count in that test's calls."""
    yield
    for thread in threading.enumerate():
        if thread.name.startswith("corral-doctor-"):
            thread.join(timeout=30)
            assert not thread.is_alive(), f"{thread.name} still runs 30 s after its test"


@pytest.fixture
def setup(
    sandbox: Sandbox,
    control: httpx.Client,
    os_conn: openstack.connection.Connection,
    webhook_receiver: WebhookReceiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Setup:
    # The doctor reads the environment as `corral serve` does: the sandbox's clouds.yaml, no OS_* of this shell.
    for name in [name for name in os.environ if name.startswith("OS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", sandbox.info.clouds_yaml)
    os_conn.compute.create_keypair(name="ops")
    control.put("/quota", json=ROOMY_QUOTA).raise_for_status()
    # Setting the URL sends a ping; wait for it, so the delivery log is what the doctor sees.
    wait_until(webhook_receiver.snapshot, what="the ping delivery")
    return Setup(sandbox, tmp_path)


def test_a_healthy_setup_passes_every_item(setup: Setup) -> None:
    code, report = setup.json()
    assert code == 0, failures(report)
    assert report["ok"] is True
    listed = {(check["section"], check["item"]) for check in report["checks"]}
    assert listed == HEALTHY_ITEMS
    assert {check["status"] for check in report["checks"]} == {"pass"}
    assert report["summary"] == {"pass": len(HEALTHY_ITEMS), "warn": 0, "fail": 0, "skipped": 0}
    assert "20 more of this pool's servers" in item(report, "pool small: quota")["detail"]

    code, text = setup.text()
    assert code == 0
    assert "all checks passed" in text and "fix:" not in text


def test_a_wrong_image_names_the_pool_key(setup: Setup) -> None:
    setup.pool["image"] = "ubuntu-99.04"
    code, report = setup.json()
    assert code == 1
    assert set(failures(report)) == {"pool small: image"}
    check = item(report, "pool small: image")
    assert "'ubuntu-99.04' does not exist" in check["detail"]
    assert "pools.small.image" in check["fix"]

    code, text = setup.text()
    assert code == 1
    assert "FAIL  pool small: image" in text and "fix: set pools.small.image" in text


def test_quota_too_low_fails_and_a_partial_fit_warns(setup: Setup, control: httpx.Client) -> None:
    control.put("/quota", json={"cores": 0}).raise_for_status()
    code, report = setup.json()
    assert code == 1
    assert set(failures(report)) == {"pool small: quota"}
    check = item(report, "pool small: quota")
    assert "no headroom left in cores" in check["detail"]
    assert "raise the project's cores quota" in check["fix"]

    control.put("/quota", json={"cores": 3}).raise_for_status()
    code, report = setup.json()
    assert code == 0, "fewer than max_runners fitting is a warning, not a failure"
    check = item(report, "pool small: quota")
    assert check["status"] == "warn"
    assert "3 more of this pool's servers" in check["detail"] and "max_runners is 10" in check["detail"]
    assert "max_runners to 3" in check["fix"]


def test_each_cloud_is_checked_with_the_placements_it_serves(setup: Setup, control: httpx.Client) -> None:
    """A pool placed in two clouds: each cloud has its own section, and a placement's own flavor that the
    second cloud lacks is named there, with the placement's key; the first cloud passes."""
    control.put("/quota", params={"cloud": "two"}, json={"instances": 0}).raise_for_status()
    del setup.document["cloud"]
    info = setup.sandbox.info
    setup.document["clouds"] = {"east": {"cloud": info.cloud_name}, "west": {"cloud": info.second_cloud_name}}
    placements = [{"cloud": "east"}, {"cloud": "west", "flavor": "m1.nowhere"}]
    setup.document["pools"] = {"small": pool_spec(["small"], placements=placements)}
    code, report = setup.json()
    assert code == 1
    assert set(failures(report)) == {"pool small@1: flavor"}, failures(report)
    flavor = item(report, "pool small@1: flavor")
    assert flavor["section"] == "cloud west" and "pools.small.placements.1.flavor" in flavor["fix"]
    assert item(report, "pool small: flavor")["section"] == "cloud east"
    assert item(report, "pool small@1: image")["status"] == "pass", "the pool's image, found in the second cloud"
    sections = {check["section"] for check in report["checks"]}
    assert sections == {"cloud east", "cloud west", "github", "database"}

    placements[1]["flavor"] = "m1.small"
    code, report = setup.json()
    assert code == 1 and set(failures(report)) == {"pool small@1: quota"}, "the second cloud's own quota is read"
    assert item(report, "pool small: quota")["status"] == "pass"


def test_a_missing_permission_names_it_and_where_to_grant_it(setup: Setup, control: httpx.Client) -> None:
    control.put(
        "/installations/octo-org", json={"permissions": {"actions": "read", "metadata": "read"}}
    ).raise_for_status()
    code, report = setup.json()
    assert code == 1
    assert set(failures(report)) == {"permissions org:octo-org"}
    check = item(report, "permissions org:octo-org")
    assert "organization_self_hosted_runners: write (has none)" in check["detail"]
    assert "Self-hosted runners: Read and write" in check["fix"]


def test_an_unsubscribed_workflow_job_event_fails(setup: Setup, control: httpx.Client) -> None:
    control.put("/installations/octo-org", json={"events": ["push"]}).raise_for_status()
    code, report = setup.json()
    assert code == 1
    assert "not subscribed to workflow_job" in failures(report)["permissions org:octo-org"]["detail"]


def test_a_skewed_clock_fails_and_is_named_as_the_cause(setup: Setup, control: httpx.Client) -> None:
    control.put("/clock", json={"github_offset_s": -300}).raise_for_status()  # this machine 5 minutes ahead
    code, report = setup.json()
    assert code == 1
    clock = item(report, "clock")
    assert clock["status"] == "fail"
    assert "ahead of GitHub's" in clock["detail"] and "NTP" in clock["fix"]
    app = item(report, "github app")
    assert app["status"] == "fail" and "fix the clock first" in app["fix"]
    assert item(report, "installation org:octo-org")["status"] == "skipped"

    control.put("/clock", json={"github_offset_s": 20}).raise_for_status()
    code, report = setup.json()
    assert code == 0
    assert item(report, "clock")["status"] == "warn"


def test_an_unreachable_database_fails_within_seconds(setup: Setup) -> None:
    setup.document["database_url"] = f"postgresql+psycopg://corral:db-password-93842@127.0.0.1:{free_port()}/corral"
    started = time.monotonic()
    code, report = setup.json()
    assert time.monotonic() - started < 10
    assert code == 1
    assert set(failures(report)) == {"database connection"}
    assert "cannot connect" in item(report, "database connection")["detail"]
    assert item(report, "database schema")["status"] == "skipped"
    assert "db-password-93842" not in json.dumps(report)


def test_an_unmigrated_database_says_to_migrate(setup: Setup) -> None:
    empty = setup.tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    setup.document["database_url"] = f"sqlite:///{empty}"
    code, report = setup.json()
    assert code == 1
    check = failures(report)["database schema"]
    assert "never migrated" in check["detail"]
    assert f"corral migrate --config {setup.path}" in check["fix"]

    setup.document["database_url"] = f"sqlite:///{setup.tmp_path / 'missing.db'}"
    code, report = setup.json()
    assert "does not exist" in failures(report)["database connection"]["detail"]
    assert not (setup.tmp_path / "missing.db").exists(), "the doctor only reads"


def test_failed_hook_deliveries_are_counted(
    setup: Setup, control: httpx.Client, webhook_receiver: WebhookReceiver
) -> None:
    control.put("/webhook", json={"url": f"http://127.0.0.1:{free_port()}/webhook"}).raise_for_status()
    control.post("/jobs", json={"repo": "octo-org/app", "labels": ["self-hosted", "small"]}).raise_for_status()
    wait_until(
        lambda: [
            d for d in control.get("/deliveries").json() if d["status_code"] == 0 and d["event"] == "workflow_job"
        ],
        what="the job's failed delivery",
    )
    code, report = setup.json()
    assert code == 1
    check = failures(report)["webhook deliveries"]
    # The ping that setting the URL sent failed too, but carries no job: it is not counted as lost.
    assert check["detail"].startswith("1 of the last 3 events were never delivered")
    assert "could not connect to the webhook URL" in check["fix"]


def test_deliveries_corral_refused_point_at_the_secret(
    setup: Setup, control: httpx.Client, webhook_receiver: WebhookReceiver
) -> None:
    webhook_receiver.status = 401
    control.post("/jobs", json={"repo": "octo-org/app", "labels": ["self-hosted", "small"]}).raise_for_status()
    wait_until(lambda: [d for d in control.get("/deliveries").json() if d["status_code"] == 401], what="a 401")
    code, report = setup.json()
    assert code == 1
    assert "Webhook secret the same as github.webhook_secret" in failures(report)["webhook deliveries"]["fix"]


def test_an_unsigned_hook_fails_the_webhook_secret(setup: Setup, control: httpx.Client) -> None:
    control.put("/webhook", json={"url": setup.sandbox.info.github_url + "/nowhere", "secret": None})
    code, report = setup.json()
    assert code == 1
    assert "has no secret" in failures(report)["webhook secret"]["detail"]


def test_a_private_key_that_is_not_the_apps_fails_and_skips_what_needs_it(setup: Setup) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_file = setup.tmp_path / "other.pem"
    key_file.write_bytes(
        other.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    setup.document["github"]["private_key_file"] = str(key_file)
    code, report = setup.json()
    assert code == 1
    assert set(failures(report)) == {"github app"}
    check = item(report, "github app")
    assert "HTTP 401" in check["detail"]
    assert "generate a private key" in check["fix"]
    assert item(report, "installation org:octo-org")["status"] == "skipped"
    assert item(report, "webhook")["status"] == "skipped"


def test_a_token_missing_a_scope_is_named(setup: Setup, control: httpx.Client) -> None:
    setup.document["github"] = {"url": setup.sandbox.info.github_url, "token": setup.sandbox.info.pat}
    code, report = setup.json()
    assert code == 0
    assert item(report, "token scopes org:octo-org")["status"] == "pass"
    assert item(report, "webhook secret")["status"] == "warn"

    control.put("/pat", json={"scopes": ["repo", "workflow"]}).raise_for_status()
    code, report = setup.json()
    assert code == 1
    check = failures(report)["token scopes org:octo-org"]
    assert "lack admin:org" in check["detail"] and "tick admin:org" in check["fix"]


def _clouds_yaml(setup: Setup, monkeypatch: pytest.MonkeyPatch, auth_url: str, password: str) -> None:
    clouds = yaml.safe_load(Path(setup.sandbox.info.clouds_yaml).read_text())
    entry = clouds["clouds"][setup.sandbox.info.cloud_name]
    entry["auth"].update(auth_url=auth_url, password=password)
    path = setup.tmp_path / "clouds.yaml"
    path.write_text(yaml.safe_dump(clouds))
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(path))


def test_an_unreachable_cloud_fails_within_seconds_and_skips_the_pools(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clouds_yaml(setup, monkeypatch, f"http://127.0.0.1:{free_port()}/identity", "irrelevant-password-1")
    started = time.monotonic()
    code, report = setup.json()
    assert time.monotonic() - started < 10
    assert code == 1
    assert set(failures(report)) == {"keystone authentication"}
    assert "reachable" in item(report, "keystone authentication")["fix"]
    assert item(report, "pool small")["status"] == "skipped"


def test_refused_cloud_credentials_are_named(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    _clouds_yaml(setup, monkeypatch, setup.sandbox.info.auth_url, "wrong-password-5550123")
    code, report = setup.json()
    assert code == 1
    assert "username/password" in failures(report)["keystone authentication"]["fix"]
    assert "wrong-password-5550123" not in json.dumps(report)


def test_no_secret_appears_in_any_output(
    setup: Setup, control: httpx.Client, capsys: pytest.CaptureFixture[str]
) -> None:
    info = setup.sandbox.info
    credentials = setup.sandbox.world.credentials
    key_lines = [line for line in Path(info.private_key_path).read_text().splitlines() if "PRIVATE KEY" not in line]
    secrets = [info.pat, info.webhook_secret, credentials.openstack_password, credentials.app_credential_secret]
    secrets += ["db-password-93842", *key_lines]
    outputs = []
    for document in (
        setup.document,
        {
            **setup.document,
            "github": {"url": info.github_url, "token": info.pat, "webhook_secret": info.webhook_secret},
        },
        {**setup.document, "database_url": f"postgresql+psycopg://c:db-password-93842@127.0.0.1:{free_port()}/c"},
    ):
        setup.document = document
        outputs.append(setup.text()[1])
        outputs.append(json.dumps(setup.json()[1]))
    control.put("/clock", json={"github_offset_s": -300}).raise_for_status()
    outputs.append(setup.text()[1])
    setup.path.write_text(yaml.safe_dump({**setup.document, "github": {"token": info.pat, "bogus": info.pat}}))
    assert main(["doctor", "--config", str(setup.path)]) == 2
    captured = capsys.readouterr()
    outputs += [captured.out, captured.err]
    for output in outputs:
        for secret in secrets:
            assert secret not in output


def test_the_cli_prints_json_and_a_bad_config_like_config_check(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    setup.path.write_text(yaml.safe_dump(setup.document))
    assert main(["doctor", "--config", str(setup.path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and len(report["checks"]) == len(HEALTHY_ITEMS)

    setup.document["reconcile_interval"] = "0s"
    setup.path.write_text(yaml.safe_dump(setup.document))
    assert main(["doctor", "--config", str(setup.path)]) == 2
    err = capsys.readouterr().err
    assert f"{setup.path}: 1 problem(s)" in err and "reconcile_interval" in err


def test_a_hanging_cloud_call_gives_up_after_the_timeout(setup: Setup, control: httpx.Client) -> None:
    slow = {"match": "openstack GET /compute/v2.1/limits", "latency_ms": 20_000}
    control.put("/faults", json={"endpoints": [slow]}).raise_for_status()
    setup.document["cloud"]["timeout"] = "2s"
    started = time.monotonic()
    code, report = setup.json()
    assert time.monotonic() - started < 10
    assert code == 1
    assert "Timeout" in failures(report)["quota"]["detail"]
    assert item(report, "pool small: image")["status"] == "pass"
    assert item(report, "pool small: quota")["status"] == "skipped"


def test_a_glance_outage_costs_the_image_check_one_request(setup: Setup, control: httpx.Client) -> None:
    """openstacksdk retries every Glance call 5 times on a 503, pausing 15.5 s in all: the doctor makes one
    request, fails the image check at once with Glance's answer, and goes on."""
    down = {"match": "openstack GET /image/v2/*", "error_rate": 1.0, "status": 503}
    control.put("/faults", json={"endpoints": [down]}).raise_for_status()
    code, report = setup.json()
    assert code == 1
    assert "HTTP 503" in failures(report)["pool small: image"]["detail"]
    injected = control.get("/stats").json()["injected_errors"]["openstack"]
    assert sum(count for endpoint, count in injected.items() if endpoint.startswith("GET /image/v2/")) == 1


def test_a_section_past_its_deadline_reports_what_it_found(setup: Setup, control: httpx.Client) -> None:
    slow = {"match": "openstack GET /compute/v2.1/limits", "latency_ms": 3_000}
    control.put("/faults", json={"endpoints": [slow]}).raise_for_status()
    setup.path.write_text(yaml.safe_dump(setup.document))
    checks = diagnose(load_config(setup.path), setup.path, deadline_s=1.0)
    cloud = [check for check in checks if check.section == "cloud"]
    assert cloud[-1].name == "deadline" and cloud[-1].level is Level.FAIL
    assert "keystone authentication" in [check.name for check in cloud]
    assert {check.name for check in checks if check.section == "database"} == {
        "database connection",
        "database schema",
    }


def test_a_scale_set_pool_is_checked_through_the_actions_service(setup: Setup) -> None:
    setup.document["pools"]["ci"] = pool_spec(["ci"], intake="scale_set")
    code, report = setup.json()
    assert code == 0, failures(report)
    check = item(report, "pool ci: scale set")
    assert check["status"] == "pass" and "creates the scale set 'ci'" in check["detail"]

    setup.document["pools"]["ci"]["runner_group"] = "gpu-runners"
    code, report = setup.json()
    assert code == 1
    assert set(failures(report)) == {"pool ci: scale set"}
    check = item(report, "pool ci: scale set")
    assert "'gpu-runners' does not exist" in check["detail"]
    assert "pools.ci.runner_group" in check["fix"] and "create the runner group 'gpu-runners'" in check["fix"]


def test_a_cache_volume_type_the_cloud_lacks_warns_naming_the_key(setup: Setup) -> None:
    """Cache volumes of a type Cinder lacks are refused one by one, and runners then start without one: the
    doctor warns (exit 0) rather than fails, and names the key. One the cloud has passes."""
    setup.pool["cache_volumes"] = {"size_gb": 10, "max": 2, "type": "nvme"}
    code, report = setup.json()
    assert code == 0, "a missing cache volume type costs speed, not jobs"
    check = item(report, "pool small: cache volume type nvme")
    assert check["status"] == "warn"
    assert "'nvme' does not exist" in check["detail"] and "start without one" in check["detail"]
    assert "pools.small.cache_volumes.type" in check["fix"]

    setup.pool["cache_volumes"] = {"size_gb": 10, "max": 2, "type": "ssd"}
    code, report = setup.json()
    assert (code, item(report, "pool small: cache volume type ssd")["status"]) == (0, "pass")
