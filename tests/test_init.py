"""`corral init` against the sandbox: the starter config it writes validates, keeps secrets in files, names
what the cloud and the App's installations hold, asks (or names the flag) only where it cannot choose, and
really runs a job; it never writes over a file unasked, nor writes anything when a flag names nothing."""

from __future__ import annotations

import io
import os
import pty
import re
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import openstack.connection
import pytest
import yaml

from corral.cli import main
from corral.config import ScopeConfig, load_config
from corral.init import InitError, InitOptions, run_init
from corral.init.prompt import Choice, Prompter
from corral.init.render import StarterConfig, render
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.waiting import wait_until


@pytest.fixture
def clouds(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    """openstacksdk finds the sandbox's clouds.yaml (two entries), and no OS_* variable of this machine."""
    for name in list(os.environ):
        if name.startswith("OS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", sandbox.info.clouds_yaml)
    return sandbox


@pytest.fixture
def octo_org(control: httpx.Client) -> str:
    """The App installed on one organisation (the sandbox also has it on its owner's account, with no repository)."""
    control.post("/accounts", json={"login": "octo-org"}).raise_for_status()
    return "octo-org"


@pytest.fixture
def hook_secret(sandbox: Sandbox, tmp_path: Path) -> Path:
    """The secret the sandbox's GitHub signs deliveries with, as the operator would have it in a file."""
    path = tmp_path / "hook.secret"
    path.write_text(sandbox.info.webhook_secret + "\n")
    path.chmod(0o600)
    return path


def app_flags(sandbox: Sandbox) -> list[str]:
    info = sandbox.info
    return ["--github-url", info.github_url, "--app-id", str(info.app_id), "--private-key-file", info.private_key_path]


def init(output: Path, sandbox: Sandbox, *extra: str) -> int:
    """`corral init` as a script runs it: every answer a flag, the checks skipped (doctor is not here)."""
    return main(
        [
            "init",
            "--output",
            str(output),
            "--cloud",
            "sandbox",
            *app_flags(sandbox),
            "--non-interactive",
            "--no-check",
            *extra,
        ]
    )


def flavor_names(os_conn: openstack.connection.Connection) -> list[str]:
    return [flavor.name for flavor in os_conn.compute.flavors()]


def test_a_non_interactive_run_writes_a_starter_config_that_runs_a_job(
    clouds: Sandbox,
    octo_org: str,
    hook_secret: Path,
    control: httpx.Client,
    start_corral: StartCorral,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    output = tmp_path / "corral.yaml"
    assert init(output, clouds, "--flavor", "m1.small", "--webhook-secret-file", str(hook_secret)) == 0
    printed = capsys.readouterr()

    assert stat.S_IMODE(output.stat().st_mode) == 0o600
    config = load_config(output)
    pool = config.pools["runners"]
    assert (pool.image, pool.flavor, pool.networks) == ("ubuntu-24.04-runner", "m1.small", ["private"])
    assert pool.scope.key == f"org:{octo_org}" and config.default_pool == "runners"
    assert config.github.app_id == clouds.info.app_id and config.cloud.name == "sandbox"
    text = output.read_text()
    raw = yaml.safe_load(text)
    assert set(raw["github"]) == {"url", "app_id", "private_key_file", "webhook_secret_file"}
    key_lines = Path(clouds.info.private_key_path).read_text().strip().splitlines()
    for secret in [clouds.info.webhook_secret, clouds.info.pat, *key_lines[1:-1]]:
        assert secret not in text and secret not in printed.out + printed.err
    for key in ("labels", "min_idle", "max_runners"):
        lines = text.splitlines()
        index = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:"))
        assert lines[index - 1].strip().startswith("#"), f"{key} has no comment explaining it"
    for line in ("image              ubuntu-24.04-runner", "flavor             m1.small  (--flavor)"):
        assert line in printed.out

    corral = start_corral(document=raw)
    job = control.post("/jobs", json={"repo": f"{octo_org}/app", "labels": ["self-hosted", "corral"]}).json()
    done = wait_until(
        lambda: (view := control.get(f"/jobs/{job['id']}").json())["status"] == "completed" and view,
        timeout=30,
        what="the job completed on a runner of the starter pool",
    )
    assert done["runner_name"].startswith("corral-runners-")
    assert done["runner_name"] in {runner.name for runner in corral.runners(pool="runners")}


def test_without_a_secret_file_one_is_generated_beside_the_config_and_kept_on_a_second_run(
    clouds: Sandbox, octo_org: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "corral.yaml"
    assert init(output, clouds, "--flavor", "m1.small") == 0
    secret_file = tmp_path / "webhook.secret"
    secret = secret_file.read_text().strip()
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert re.fullmatch(r"[0-9a-f]{64}", secret)
    assert yaml.safe_load(output.read_text())["github"]["webhook_secret_file"] == "webhook.secret"
    loaded = load_config(output).github.webhook_secret
    assert loaded is not None and loaded.get_secret_value() == secret
    printed = capsys.readouterr()
    assert secret not in printed.out + printed.err
    assert f"generated a new one into {secret_file}" in printed.out and "Paste that file's content" in printed.out

    assert init(output, clouds, "--flavor", "m1.small", "--force") == 0
    assert secret_file.read_text().strip() == secret
    assert f"kept the one an earlier run generated in {secret_file}" in capsys.readouterr().out


def test_several_flavors_and_no_flag_fail_naming_the_flag_and_every_choice(
    clouds: Sandbox,
    octo_org: str,
    os_conn: openstack.connection.Connection,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert init(tmp_path / "corral.yaml", clouds) == 1
    err = capsys.readouterr().err
    assert "pass --flavor with one of" in err
    names = flavor_names(os_conn)
    assert len(names) > 1
    for name in names:
        assert re.search(rf"^\s+{re.escape(name)}\s", err, re.MULTILINE), f"{name} not listed"
    assert list(tmp_path.iterdir()) == [], "nothing written, not even a webhook secret"


def interactive(answers: str) -> tuple[Prompter, io.StringIO]:
    shown = io.StringIO()
    return Prompter(interactive=True, stdin=io.StringIO(answers), stdout=shown), shown


def options(sandbox: Sandbox, output: Path, **overrides: Any) -> InitOptions:
    settings: dict[str, Any] = {
        "output": output,
        "check": False,
        "cloud": "sandbox",
        "github_url": sandbox.info.github_url,
        "app_id": sandbox.info.app_id,
        "private_key_file": Path(sandbox.info.private_key_path),
    }
    return InitOptions(**{**settings, **overrides})


def test_the_menu_takes_the_number_or_the_name_typed_and_asks_again_after_a_wrong_answer(
    clouds: Sandbox, octo_org: str, os_conn: openstack.connection.Connection, tmp_path: Path
) -> None:
    names = flavor_names(os_conn)
    prompter, shown = interactive("3\n")
    assert run_init(options(clouds, tmp_path / "a.yaml"), prompter, io.StringIO()) == 0
    assert load_config(tmp_path / "a.yaml").pools["runners"].flavor == names[2]
    assert f"  3) {names[2]}" in shown.getvalue() and "--flavor answers this" in shown.getvalue()

    prompter, shown = interactive(f"0\nnope\n{names[-1]}\n")
    assert run_init(options(clouds, tmp_path / "b.yaml"), prompter, io.StringIO()) == 0
    assert load_config(tmp_path / "b.yaml").pools["runners"].flavor == names[-1]
    assert "'nope' is not one of the choices" in shown.getvalue()

    prompter, _ = interactive("")
    with pytest.raises(InitError, match=r"end of input.*--flavor"):
        run_init(options(clouds, tmp_path / "c.yaml"), prompter, io.StringIO())
    assert not (tmp_path / "c.yaml").exists()


def test_on_a_terminal_corral_init_asks_and_uses_the_answer(
    clouds: Sandbox, octo_org: str, os_conn: openstack.connection.Connection, tmp_path: Path
) -> None:
    """The real command on a pseudo-terminal: it sees a TTY, shows the menu, reads the typed number."""
    output = tmp_path / "corral.yaml"
    command = [
        sys.executable,
        "-m",
        "corral.cli",
        "init",
        "--output",
        str(output),
        "--cloud",
        "sandbox",
        *app_flags(clouds),
        "--no-check",
    ]
    controller, terminal = pty.openpty()
    process = subprocess.Popen(command, stdin=terminal, stdout=terminal, stderr=terminal, close_fds=True)
    os.close(terminal)
    seen = bytearray()

    def read() -> None:
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal closes when the process exits
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(lambda: b"flavor [1-" in seen, timeout=60, what="the flavor menu on the terminal")
        os.write(controller, b"2\n")
        assert process.wait(timeout=60) == 0, seen.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
        reader.join(timeout=5)
        os.close(controller)
    assert load_config(output).pools["runners"].flavor == flavor_names(os_conn)[1]


@pytest.mark.parametrize(
    ("flag", "kind"),
    [
        ("--image", "image"),
        ("--flavor", "flavor"),
        ("--network", "network"),
        ("--security-group", "security group"),
        ("--key-name", "key pair"),
        ("--availability-zone", "availability zone"),
    ],
)
def test_a_flag_naming_nothing_in_the_cloud_is_refused_and_nothing_is_written(
    clouds: Sandbox, octo_org: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, kind: str
) -> None:
    flavor = [] if flag == "--flavor" else ["--flavor", "m1.small"]
    assert init(tmp_path / "corral.yaml", clouds, *flavor, flag, "no-such-thing") == 1
    assert f"{flag} 'no-such-thing': no {kind} by that name or id in this cloud" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_flag_naming_an_existing_key_pair_and_zone_is_written(
    clouds: Sandbox, octo_org: str, os_conn: openstack.connection.Connection, tmp_path: Path
) -> None:
    os_conn.compute.create_keypair(name="ops")
    zone = next(iter(os_conn.compute.availability_zones())).name
    extra = ["--flavor", "m1.small", "--key-name", "ops", "--availability-zone", zone, "--security-group", "default"]
    assert init(tmp_path / "corral.yaml", clouds, *extra) == 0
    pool = load_config(tmp_path / "corral.yaml").pools["runners"]
    assert (pool.key_name, pool.availability_zone, pool.security_groups) == ("ops", zone, ["default"])


def test_an_unknown_cloud_and_an_unreached_scope_are_refused(
    clouds: Sandbox, octo_org: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "corral.yaml"
    assert main(["init", "--output", str(output), "--cloud", "nowhere", *app_flags(clouds), "--non-interactive"]) == 1
    assert "--cloud 'nowhere': no such entry in clouds.yaml" in capsys.readouterr().err
    assert init(output, clouds, "--flavor", "m1.small", "--scope", "org:somebody-else") == 1
    err = capsys.readouterr().err
    assert "--scope 'org:somebody-else': no installation of the GitHub App reaches it" in err
    assert f"org:{octo_org}" in err
    assert list(tmp_path.iterdir()) == []


def test_an_existing_file_is_left_untouched_without_force_and_replaced_0600_with_it(
    clouds: Sandbox, octo_org: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "corral.yaml"
    output.write_text("# mine\n")
    output.chmod(0o644)
    before = output.stat()
    assert init(output, clouds, "--flavor", "m1.small") == 1
    assert "already exists and was left untouched; pass --force" in capsys.readouterr().err
    assert output.read_text() == "# mine\n" and output.stat().st_mtime_ns == before.st_mtime_ns
    assert not (tmp_path / "webhook.secret").exists()

    assert init(output, clouds, "--flavor", "m1.small", "--force") == 0
    assert stat.S_IMODE(output.stat().st_mode) == 0o600
    assert load_config(output).pools["runners"].flavor == "m1.small"


def test_a_user_account_installation_offers_its_repositories_as_scopes(
    clouds: Sandbox, control: httpx.Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    control.post("/accounts", json={"login": "octocat", "type": "User", "repositories": ["hello", "world"]})
    output = tmp_path / "corral.yaml"
    assert init(output, clouds, "--flavor", "m1.small") == 1
    err = capsys.readouterr().err
    assert "pass --scope with one of" in err and "repo:octocat/hello" in err and "repo:octocat/world" in err
    assert init(output, clouds, "--flavor", "m1.small", "--scope", "org:octocat") == 1
    assert "no installation of the GitHub App reaches it" in capsys.readouterr().err
    assert init(output, clouds, "--flavor", "m1.small", "--scope", "repo:octocat/world") == 0
    assert load_config(output).pools["runners"].scope == ScopeConfig(repo="octocat/world")


def test_a_token_cannot_list_scopes_so_the_scope_is_a_flag(
    clouds: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "github.token"
    token.write_text(clouds.info.pat)
    output = tmp_path / "corral.yaml"
    base = [
        "init",
        "--output",
        str(output),
        "--cloud",
        "sandbox",
        "--github-url",
        clouds.info.github_url,
        "--token-file",
        str(token),
        "--flavor",
        "m1.small",
        "--non-interactive",
        "--no-check",
    ]
    assert main(base) == 1
    assert "pass --scope" in capsys.readouterr().err
    assert main([*base, "--scope", "repo:octo-org/app"]) == 0
    raw = yaml.safe_load(output.read_text())
    assert raw["github"]["token_file"] == "github.token" and "app_id" not in raw["github"]
    assert clouds.info.pat not in output.read_text() + capsys.readouterr().out


def test_a_private_key_file_that_holds_no_key_is_refused_without_repeating_it(
    clouds: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = tmp_path / "app.pem"
    wrong.write_text(clouds.info.pat)
    output = tmp_path / "corral.yaml"
    args = [
        "init",
        "--output",
        str(output),
        "--github-url",
        clouds.info.github_url,
        "--app-id",
        "1",
        "--private-key-file",
        str(wrong),
        "--non-interactive",
        "--no-check",
    ]
    assert main(args) == 1
    printed = capsys.readouterr()
    assert "--private-key-file: not an unencrypted PEM RSA private key" in printed.err
    assert clouds.info.pat not in printed.out + printed.err
    assert not output.exists()


def test_the_written_yaml_keeps_names_yaml_would_misread() -> None:
    odd = ["*runner: x", "yes", "#1", "on", "null", "a, b", "[x]"]
    starter = StarterConfig(
        github_url="https://api.github.com",
        app_id=1,
        private_key_file="key: file.pem",
        token_file=None,
        webhook_secret_file="#hook",
        cloud_name="on",
        region="no",
        database_url="sqlite:///corral.db",
        pool="runners",
        scope=ScopeConfig(org="true"),
        labels=odd,
        image=odd[0],
        flavor=odd[1],
        networks=odd[2:4],
        security_groups=odd[4:],
        key_name="~",
        availability_zone="0",
        min_idle=1,
        max_runners=2,
    )
    raw = yaml.safe_load(render(starter))
    pool = raw["pools"]["runners"]
    assert pool["labels"] == odd and pool["image"] == odd[0] and pool["flavor"] == "yes"
    assert pool["networks"] == odd[2:4] and pool["security_groups"] == odd[4:]
    assert (pool["key_name"], pool["availability_zone"], pool["scope"]) == ("~", "0", {"org": "true"})
    assert raw["cloud"] == {"name": "on", "region": "no"}
    assert raw["github"]["private_key_file"] == "key: file.pem" and raw["github"]["webhook_secret_file"] == "#hook"


def test_init_runs_doctor(
    clouds: Sandbox, octo_org: str, hook_secret: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doctor = pytest.importorskip("corral.doctor")
    for name, secret in (("given", ["--webhook-secret-file", str(hook_secret)]), ("generated", [])):
        output = tmp_path / f"{name}.yaml"
        args = [
            "init",
            "--output",
            str(output),
            "--cloud",
            "sandbox",
            *app_flags(clouds),
            "--flavor",
            "m1.small",
            "--non-interactive",
            *secret,
        ]
        code = main(args)
        out = capsys.readouterr().out
        assert output.exists(), "the file stays written whatever doctor says"
        assert code == doctor.run_doctor(output, out=io.StringIO()), "init's exit code is doctor's"
        assert "checks skipped" not in out
        assert out.split(f"wrote {output}", 1)[1].count("\n") > 2, "doctor's report follows what init wrote"
        if code != 0:
            assert "stays written" in out


def test_the_prompt_lists_choices_in_the_error_when_nobody_can_answer() -> None:
    prompter = Prompter(interactive=False, stdin=io.StringIO("1\n"), stdout=io.StringIO())
    with pytest.raises(InitError) as refused:
        prompter.choose("flavor", "--flavor", [Choice("a", "small"), Choice("bb", "large")])
    assert str(refused.value).splitlines()[1:] == ["    a   small", "    bb  large"]
    assert "pass --flavor" in str(refused.value)


def test_credentials_the_cloud_or_github_refuse_are_reported_without_repeating_them(
    clouds: Sandbox, octo_org: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    document = yaml.safe_load(Path(clouds.info.clouds_yaml).read_text())
    entry = document["clouds"]["sandbox"]
    password = entry["auth"]["password"]
    entry["auth"]["password"] = wrong = "not-the-password-" + password[::-1]
    (tmp_path / "clouds.yaml").write_text(yaml.safe_dump({"clouds": {"sandbox": entry}}))
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(tmp_path / "clouds.yaml"))
    output = tmp_path / "corral.yaml"
    args = ["init", "--output", str(output), "--github-url", clouds.info.github_url, "--non-interactive"]
    assert main([*args, "--app-id", str(clouds.info.app_id), "--private-key-file", clouds.info.private_key_path]) == 1
    err = capsys.readouterr().err
    assert "cannot list the images of cloud sandbox: 401" in err
    assert wrong not in err and password not in err

    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", clouds.info.clouds_yaml)
    other_app = ["--app-id", str(clouds.info.app_id + 1), "--private-key-file", clouds.info.private_key_path]
    assert main([*args, "--cloud", "sandbox", "--flavor", "m1.small", *other_app]) == 1
    err = capsys.readouterr().err
    assert "GitHub refused to list the App's installations (401" in err and "check --app-id" in err
    assert not output.exists() and not (tmp_path / "webhook.secret").exists()
