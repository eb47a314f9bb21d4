"""`corral init` from start to finish: refuse to clobber, discover, choose, write, validate, check.

Nothing is written until every question is answered and every flag checked; the config is then written
to a temporary file beside the target (0600), loaded back with corral's own loader, and only then moved
into place. A failure at any step leaves the target as it was (absent, or the old file untouched).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from pydantic import SecretStr, ValidationError

from corral.config import POOL_NAME_PATTERN, ConfigError, GitHubConfig, load_config
from corral.files import PRIVATE_MODE
from corral.init import choose
from corral.init.choose import Picked
from corral.init.cloud import CloudInventory, discover, pick_cloud
from corral.init.errors import InitError
from corral.init.github import app_installations
from corral.init.prompt import Prompter
from corral.init.render import StarterConfig, config_relative, render
from corral.init.webhook import WebhookSecret, webhook_secret

GITHUB_FLAGS = {
    "url": "--github-url",
    "app_id": "--app-id",
    "private_key": "--private-key-file",
    "token": "--token-file",
}


@dataclass(frozen=True)
class InitOptions:
    """Everything `corral init` can be told; None means "find it out (or ask)"."""

    output: Path
    force: bool = False
    check: bool = True
    cloud: str | None = None
    region: str | None = None
    image: str | None = None
    flavor: str | None = None
    networks: list[str] = field(default_factory=list)
    security_groups: list[str] = field(default_factory=list)
    key_name: str | None = None
    availability_zone: str | None = None
    github_url: str = "https://api.github.com"
    app_id: int | None = None
    private_key_file: Path | None = None
    token_file: Path | None = None
    scope: str | None = None
    webhook_secret_file: Path | None = None
    pool: str = "runners"
    labels: list[str] = field(default_factory=lambda: ["corral"])
    min_idle: int = 0
    max_runners: int = 10
    database_url: str | None = None
    github_timeout: float = 15.0


def _refuse_clobbering(options: InitOptions) -> None:
    output = options.output
    if output.is_dir():
        raise InitError(
            f"--output {str(output)!r} is a directory; name the file to write, such as {output / 'corral.yaml'}"
        )
    if not output.parent.is_dir():
        raise InitError(f"--output {str(output)!r}: the folder {str(output.parent)!r} does not exist; create it first")
    if output.exists() and not options.force:
        raise InitError(f"{output} already exists and was left untouched; pass --force to replace it")


def _check_pool_settings(options: InitOptions) -> None:
    if not POOL_NAME_PATTERN.match(options.pool):
        raise InitError(
            f"--pool {options.pool!r}: use 1-24 lowercase letters, digits and dashes, starting and ending with a "
            "letter or digit (it becomes part of server names)"
        )
    if not options.labels or any(not label.strip() for label in options.labels):
        raise InitError("--labels: give at least one label, comma-separated, such as --labels linux,small")
    if options.min_idle < 0 or options.max_runners < 1 or options.min_idle > options.max_runners:
        raise InitError(
            f"--min-idle {options.min_idle} / --max-runners {options.max_runners}: need 0 <= min-idle <= max-runners "
            "and max-runners >= 1"
        )


def _read_secret_file(path: Path, flag: str) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise InitError(f"{flag} {str(path)!r}: cannot read it ({exc.strerror or exc})") from None


def _github_config(options: InitOptions) -> GitHubConfig:
    """The credentials, checked by the config's own rules before anything calls GitHub."""
    has_app = options.app_id is not None or options.private_key_file is not None
    if has_app and options.token_file is not None:
        raise InitError("give either --app-id with --private-key-file (a GitHub App) or --token-file, not both")
    if not has_app and options.token_file is None:
        raise InitError(
            "no GitHub credentials: pass --app-id and --private-key-file (a GitHub App, recommended) or --token-file "
            "(a file holding a personal access token)"
        )
    if has_app and (options.app_id is None or options.private_key_file is None):
        raise InitError("a GitHub App needs both --app-id and --private-key-file")
    fields: dict[str, object] = {"url": options.github_url, "timeout": options.github_timeout}
    if options.private_key_file is not None:
        fields.update(
            app_id=options.app_id,
            private_key=SecretStr(_read_secret_file(options.private_key_file, "--private-key-file")),
        )
    if options.token_file is not None:
        fields["token"] = SecretStr(_read_secret_file(options.token_file, "--token-file"))
    try:
        return GitHubConfig.model_validate(fields)
    except ValidationError as exc:
        # Only pydantic's messages: its str() would repeat the input, which here is a key or a token.
        problems = [
            f"{GITHUB_FLAGS.get(str(error['loc'][0]), 'GitHub') if error['loc'] else 'GitHub'}: "
            f"{str(error['msg']).removeprefix('Value error, ')}"
            for error in exc.errors()
        ]
        raise InitError("; ".join(problems)) from None


@dataclass(frozen=True)
class Choices:
    image: Picked
    flavor: Picked
    networks: list[Picked]
    security_groups: list[Picked]
    key_name: Picked | None
    availability_zone: Picked | None


def _choose_in_cloud(options: InitOptions, cloud: CloudInventory, prompter: Prompter) -> Choices:
    return Choices(
        image=choose.pick_one("image", "--image", options.image, cloud.images, prompter, prefer_runner=True),
        flavor=choose.pick_one("flavor", "--flavor", options.flavor, cloud.flavors, prompter),
        networks=choose.pick_networks(options.networks, cloud.networks, prompter),
        security_groups=choose.pick_security_groups(options.security_groups, cloud.security_groups),
        key_name=choose.pick_optional("key pair", "--key-name", options.key_name, cloud.keypairs),
        availability_zone=choose.pick_optional(
            "availability zone", "--availability-zone", options.availability_zone, cloud.zones
        ),
    )


def _choose_scope(options: InitOptions, github: GitHubConfig, prompter: Prompter, out: TextIO) -> Picked:
    if not github.uses_app:
        return choose.pick_scope_for_token(options.scope, prompter)
    assert github.app_id is not None and github.private_key is not None
    found = app_installations(github.url, github.app_id, github.private_key.get_secret_value(), github.timeout)
    print(f"GitHub App {github.app_id}: {found.count} installation(s)", file=out, flush=True)
    for note in found.notes:
        print(f"  ({note})", file=out)
    return choose.pick_scope_from_app(options.scope, found, prompter)


def _found(cloud: CloudInventory, out: TextIO) -> None:
    counts = [
        (len(cloud.images), "active image"),
        (len(cloud.flavors), "flavor"),
        (len(cloud.networks), "network"),
        (len(cloud.security_groups), "security group"),
        (len(cloud.keypairs), "key pair"),
        (len(cloud.zones), "availability zone"),
    ]
    found = ", ".join(f"{n} {what}{'' if n == 1 else 's'}" for n, what in counts)
    print(f"cloud {cloud.label}: {found}", file=out, flush=True)


def _picked(choices: Choices, out: TextIO) -> None:
    rows: list[tuple[str, Picked | None]] = [("image", choices.image), ("flavor", choices.flavor)]
    rows += [("network", picked) for picked in choices.networks]
    rows += [("security group", picked) for picked in choices.security_groups]
    rows += [("key pair", choices.key_name), ("availability zone", choices.availability_zone)]
    for what, picked in rows:
        if picked is not None:
            print(f"  {what:<18} {picked.value}  ({picked.why})", file=out)
    if not choices.networks:
        print(f"  {'network':<18} none: Nova's automatic allocation (pass --network to name one)", file=out)
    if not choices.security_groups:
        print(f"  {'security group':<18} none: the project's default group (pass --security-group)", file=out)


def _build(
    options: InitOptions,
    github: GitHubConfig,
    cloud: CloudInventory,
    choices: Choices,
    scope: Picked,
    secret: WebhookSecret,
) -> StarterConfig:
    config_dir = options.output.parent
    database = options.database_url or f"sqlite:///{(config_dir / 'corral.db').resolve()}"
    return StarterConfig(
        github_url=github.url,
        app_id=github.app_id,
        private_key_file=config_relative(options.private_key_file, config_dir) if options.private_key_file else None,
        token_file=config_relative(options.token_file, config_dir) if options.token_file else None,
        webhook_secret_file=config_relative(secret.path, config_dir),
        cloud_name=cloud.cloud_name,
        region=options.region,
        database_url=database,
        pool=options.pool,
        scope=choose.parse_scope(scope.value),
        labels=list(options.labels),
        image=choices.image.value,
        flavor=choices.flavor.value,
        networks=[picked.value for picked in choices.networks],
        security_groups=[picked.value for picked in choices.security_groups],
        key_name=choices.key_name.value if choices.key_name else None,
        availability_zone=choices.availability_zone.value if choices.availability_zone else None,
        min_idle=options.min_idle,
        max_runners=options.max_runners,
    )


def _write_validated(output: Path, text: str) -> None:
    """Write `text` beside `output` (0600), load it with corral's loader, then move it into place."""
    fd, name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
    temporary = Path(name)
    try:
        with os.fdopen(fd, "w") as file:
            os.fchmod(file.fileno(), PRIVATE_MODE)
            file.write(text)
        try:
            load_config(temporary)
        except ConfigError as exc:
            problems = "\n".join(f"  - {problem}" for problem in exc.problems)
            raise InitError(
                f"the config init would write does not validate, so nothing was written:\n{problems}"
            ) from None
        os.replace(temporary, output)
    finally:
        temporary.unlink(missing_ok=True)


def _tell_about_secret(secret: WebhookSecret, out: TextIO) -> None:
    if secret.origin == "given":
        print(f"webhook secret: read from {secret.path} (the App's webhook settings must hold the same)", file=out)
        return
    what = "generated a new one into" if secret.origin == "generated" else "kept the one an earlier run generated in"
    print(
        f"webhook secret: {what} {secret.path} (0600). Paste that file's content into the GitHub App's settings "
        "(Webhook > Secret) and set its webhook URL to https://<where corral listens>/webhook.",
        file=out,
    )


def _run_doctor(config_path: Path, out: TextIO) -> int:
    """`corral doctor`'s checks on the written file. Imported here, when they run: doctor is its own
    package (and heavier), and `--no-check` must work without loading it."""
    from corral.doctor import run_doctor

    return run_doctor(config_path, as_json=False, out=out)


def run_init(options: InitOptions, prompter: Prompter, out: TextIO) -> int:
    """Write the starter config; the exit code is doctor's (0 when `check` is off). InitError when it can't."""
    _refuse_clobbering(options)
    _check_pool_settings(options)
    github = _github_config(options)
    cloud = discover(pick_cloud(options.cloud, prompter), options.region)
    _found(cloud, out)
    choices = _choose_in_cloud(options, cloud, prompter)
    _picked(choices, out)
    scope = _choose_scope(options, github, prompter, out)
    print(f"  {'scope':<18} {scope.value}  ({scope.why})", file=out)
    secret = webhook_secret(options.output.parent, options.webhook_secret_file)
    try:
        _write_validated(options.output, render(_build(options, github, cloud, choices, scope, secret)))
    except BaseException:
        if secret.origin == "generated":
            secret.path.unlink(missing_ok=True)
        raise
    print(f"wrote {options.output} (0600): pool {options.pool!r}, labels {options.labels}", file=out)
    _tell_about_secret(secret, out)
    if not options.check:
        print("checks skipped (--no-check); run `corral doctor` on it before `corral serve`", file=out)
        return 0
    code = _run_doctor(options.output, out)
    if code != 0:
        print(
            f"doctor found problems (exit {code}); {options.output} stays written: fix them, then run "
            f"`corral doctor --config {options.output}` again",
            file=out,
        )
    return code
