"""What installs corral agrees with itself: pyproject's pins, the hashed locks, the sandbox's distribution, the
container and the systemd unit.

The locks in requirements/ are generated (scripts/lock.sh); these checks catch the drift a hand edit or a
forgotten regeneration leaves: a pin changed in pyproject.toml but not in its lock, a lock entry without a
hash (pip's --require-hashes would refuse the whole file), the development lock disagreeing with the runtime
one. The deploy/ examples are checked against corral's own config validation and command line, so that the
files an operator copies start.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import setuptools
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from sqlalchemy.engine import make_url

import corral
from corral import cli
from corral.cli import build_parser
from corral.config import load_config

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SANDBOX_PYPROJECT = tomllib.loads((ROOT / "sandbox" / "pyproject.toml").read_text())
LOCKS = ROOT / "requirements"
CREDENTIALS = "/run/credentials/corral.service/"
"""Where systemd's LoadCredential= puts the unit's secrets ($CREDENTIALS_DIRECTORY of corral.service)."""
DEV_ONLY = {"pytest", "pytest-timeout", "pytest-cov", "coverage", "ruff", "mypy", "jsonschema", "types-pyyaml"}
"""Tools that must never reach a runtime install (psutil is a dev pin too, but openstacksdk needs it at run time)."""


def normalize(name: str) -> str:
    """PEP 503: `PyYAML`, `pyyaml` and `py_yaml` are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    name: str
    extras: frozenset[str]
    version: str


def parse_pin(text: str) -> Pin:
    match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?\s*==\s*([^\s;]+)\s*", text)
    assert match, f"{text!r} is not an exact pin (name[extras]==version)"
    extras = frozenset(normalize(e.strip()) for e in (match.group(2) or "").split(",") if e.strip())
    return Pin(normalize(match.group(1)), extras, match.group(3))


@dataclass(frozen=True)
class Locked:
    pin: Pin
    hashes: frozenset[str]


def read_lock(name: str) -> dict[str, Locked]:
    """A lock's entries by project name; each entry's continuation lines (`\\`) joined, comments dropped."""
    text = (LOCKS / name).read_text()
    entries: dict[str, Locked] = {}
    for logical in re.sub(r"\\\n", " ", text).splitlines():
        line = logical.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = line.split(" --", 1)[0]
        assert not requirement.startswith("-"), f"{name}: {line!r} is an option, not a locked requirement"
        pin = parse_pin(requirement)
        hashes = frozenset(re.findall(r"--hash=(\S+)", line))
        assert pin.name not in entries, f"{name}: {pin.name} is locked twice"
        entries[pin.name] = Locked(pin, hashes)
    return entries


RUNTIME = read_lock("runtime.txt")
BUILD = read_lock("build.txt")
DEV = read_lock("dev.txt")


def assert_locked(pins: list[str], lock: dict[str, Locked], lock_name: str) -> None:
    for pin in map(parse_pin, pins):
        assert pin.name in lock, f"{pin.name} is pinned in pyproject.toml but missing from {lock_name}"
        locked = lock[pin.name].pin
        assert locked.version == pin.version, (
            f"{pin.name}: pyproject.toml pins {pin.version}, {lock_name} has {locked.version}; run bash scripts/lock.sh"
        )
        assert pin.extras <= locked.extras, f"{pin.name}: {lock_name} lacks the extras {sorted(pin.extras)}"


def test_every_runtime_pin_is_in_the_runtime_and_dev_locks_at_its_version() -> None:
    dependencies = PYPROJECT["project"]["dependencies"]
    assert dependencies, "pyproject.toml lists no runtime dependencies"
    assert_locked(dependencies, RUNTIME, "requirements/runtime.txt")
    assert_locked(dependencies, DEV, "requirements/dev.txt")


def test_every_dev_pin_is_in_the_dev_lock_and_no_dev_tool_in_the_runtime_lock() -> None:
    group = PYPROJECT["dependency-groups"]["dev"]
    assert_locked(group, DEV, "requirements/dev.txt")
    assert {parse_pin(p).name for p in group} >= DEV_ONLY - {"coverage"}
    leaked = sorted(DEV_ONLY & set(RUNTIME))
    assert not leaked, f"requirements/runtime.txt carries development tools {leaked}: they belong to the dev group"
    assert "dev" not in PYPROJECT["project"].get("optional-dependencies", {}), "dev tools are a group, not an extra"


def test_build_requirements_are_pinned_and_locked() -> None:
    requires = PYPROJECT["build-system"]["requires"]
    build_in = [line for line in (LOCKS / "build.in").read_text().splitlines() if line and not line.startswith("#")]
    assert sorted(map(parse_pin, requires), key=str) == sorted(map(parse_pin, build_in), key=str), (
        "requirements/build.in and pyproject's [build-system] requires differ; make them the same"
    )
    assert_locked(requires, BUILD, "requirements/build.txt")
    assert_locked(requires, DEV, "requirements/dev.txt")


@pytest.mark.parametrize("name", ["runtime.txt", "build.txt", "dev.txt"])
def test_every_lock_entry_has_a_hash(name: str) -> None:
    lock = read_lock(name)
    assert lock, f"requirements/{name} locks nothing"
    unhashed = sorted(entry for entry, locked in lock.items() if not locked.hashes)
    assert not unhashed, f"requirements/{name}: {unhashed} have no --hash, so pip --require-hashes refuses the file"
    for entry, locked in lock.items():
        for digest in locked.hashes:
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), f"requirements/{name}: {entry} has hash {digest!r}"


def test_the_dev_lock_installs_the_same_files_as_the_runtime_and_build_locks() -> None:
    for lock_name, lock in (("runtime.txt", RUNTIME), ("build.txt", BUILD)):
        for name, locked in lock.items():
            assert name in DEV, f"{name} is in requirements/{lock_name} but not in requirements/dev.txt"
            assert DEV[name] == locked, f"{name}: requirements/dev.txt and requirements/{lock_name} disagree"


# -- the sandbox's distribution (sandbox/): never in the runtime wheel --------------------------------------------


def test_the_runtime_wheel_packages_corral_alone_and_the_sandbox_wheel_corral_sandbox() -> None:
    def packages(project: dict[str, object], where: Path) -> set[str]:
        """What setuptools puts in the wheel, found as pyproject.toml tells it to."""
        find = project["tool"]["setuptools"]["packages"]["find"]  # type: ignore[index]
        return set(setuptools.find_packages(str(where), include=find["include"]))

    runtime = packages(PYPROJECT, ROOT)
    sandbox = packages(SANDBOX_PYPROJECT, ROOT / "sandbox")

    assert "corral" in runtime and all(name == "corral" or name.startswith("corral.") for name in runtime)
    assert "corral_sandbox" in sandbox and "corral_sandbox.github.actions" in sandbox
    assert all(name == "corral_sandbox" or name.startswith("corral_sandbox.") for name in sandbox)
    assert not (ROOT / "corral" / "sandbox").exists(), "the sandbox lives in sandbox/corral_sandbox/"


def test_the_sandbox_requires_this_corral_and_pins_what_it_imports_at_corrals_versions() -> None:
    project = SANDBOX_PYPROJECT["project"]
    pins = {pin.name: pin for pin in map(parse_pin, project["dependencies"])}
    runtime = {pin.name: pin for pin in map(parse_pin, PYPROJECT["project"]["dependencies"])}

    assert pins.pop("corral") == Pin("corral", frozenset(), corral.__version__)
    assert project["version"] == PYPROJECT["project"]["version"] == corral.__version__
    different = sorted(name for name, pin in pins.items() if runtime.get(name) != pin)
    assert not different, f"sandbox/pyproject.toml pins {different} otherwise than corral: use corral's pins"
    assert SANDBOX_PYPROJECT["build-system"] == PYPROJECT["build-system"]
    assert "optional-dependencies" not in project, "the sandbox is a distribution of its own, not an extra"


def test_corrals_one_extra_is_opentelemetry_locked_for_the_tests_and_kept_out_of_the_runtime_lock() -> None:
    """`pip install 'corral[otel]'` for traces (corral.tracing); the tests install it, production may not."""
    extras = PYPROJECT["project"].get("optional-dependencies", {})
    assert set(extras) == {"otel"}
    assert_locked(extras["otel"], DEV, "requirements/dev.txt")
    assert not {parse_pin(pin).name for pin in extras["otel"]} & set(RUNTIME)


def test_the_container_builds_from_corral_alone() -> None:
    copied = [arguments.split()[:-1] for word, arguments in containerfile_instructions() if word == "COPY"]
    sources = {source for arguments in copied for source in arguments if not source.startswith("--")}
    ignored = set((ROOT / ".containerignore").read_text().split())

    assert sources == {"requirements/", "pyproject.toml", "README.md", "corral/", "/opt/corral"}
    assert "sandbox" in ignored, "the sandbox's distribution is not even sent to the builder"


# -- deploy/: the example config and the systemd unit -----------------------------------------------------------


def unit_settings(path: Path) -> dict[str, list[str]]:
    """A systemd unit's `Key=value` lines, every value of a key in order (keys may repeat)."""
    settings: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


UNIT = unit_settings(ROOT / "deploy" / "corral.service")


def write_stand_in_secrets(folder: Path) -> None:
    """What the unit's LoadCredential= would put in its credentials directory, with made-up values."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (folder / "github-app.pem").write_bytes(pem)
    (folder / "webhook-secret").write_text("0" * 64)
    (folder / "pgpass").write_text("db.example.internal:5432:corral:corral:not-a-real-password\n")
    (folder / "clouds.yaml").write_text("clouds: {}\n")


def test_the_example_config_passes_validation_with_the_units_credentials(tmp_path: Path) -> None:
    text = (ROOT / "deploy" / "corral.yaml").read_text()
    referenced = set(re.findall(re.escape(CREDENTIALS) + r"([\w.-]+)", text))
    provided = {value.split(":", 1)[0] for value in UNIT["LoadCredential"]}
    assert referenced, "deploy/corral.yaml reads no secret from the unit's credentials"
    assert referenced <= provided, (
        f"deploy/corral.yaml reads {sorted(referenced - provided)}, which no LoadCredential= provides"
    )
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    write_stand_in_secrets(credentials)
    config_file = tmp_path / "corral.yaml"
    config_file.write_text(text.replace(CREDENTIALS, f"{credentials}/"))

    config = load_config(config_file)

    assert len(config.pools) == 2
    assert config.github.uses_app and config.github.webhook_secret is not None
    database = make_url(config.database_url)
    assert database.get_backend_name() == "postgresql" and database.password is None, "no password in the URL"
    assert database.query["passfile"] == f"{credentials}/pgpass"
    assert database.query["sslmode"] == "verify-full"


def test_the_units_command_is_corral_serve_on_the_example_config() -> None:
    (exec_start,) = UNIT["ExecStart"]
    program, *arguments = shlex.split(exec_start)
    assert Path(program).name == "corral"

    args = build_parser().parse_args(arguments)

    assert args.handler is cli._serve
    assert args.config == Path("/etc/corral/corral.yaml")
    assert args.listen.startswith("127.0.0.1:"), "behind a TLS proxy on the same host, corral listens on loopback"
    assert "OS_CLIENT_CONFIG_FILE=%d/clouds.yaml" in UNIT["Environment"], "openstacksdk reads the credential's file"
    assert any(value.startswith("clouds.yaml:") for value in UNIT["LoadCredential"])


def test_the_unit_runs_unprivileged_and_restarts_on_failure() -> None:
    def one(key: str) -> str:
        (value,) = UNIT[key]
        return value

    assert one("DynamicUser") == "yes" and one("User") != "root"
    assert one("CapabilityBoundingSet") == "" and one("NoNewPrivileges") == "yes"
    assert one("ProtectSystem") == "strict" and one("ProtectHome") == "yes"
    assert one("SystemCallFilter") == "@system-service" and one("MemoryDenyWriteExecute") == "yes"
    assert one("Restart") == "on-failure" and one("RestartSec") != "0"


# -- the Containerfile -----------------------------------------------------------------------------------------


def containerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Containerfile").read_text())
    instructions = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            instructions.append((word.upper(), rest.strip()))
    return instructions


def test_the_image_runs_corral_serve_as_a_non_root_user_with_a_health_check() -> None:
    instructions = containerfile_instructions()
    final_stage = instructions[max(i for i, (word, _) in enumerate(instructions) if word == "FROM") :]
    values = {word: rest for word, rest in final_stage}
    entrypoint, command = json.loads(values["ENTRYPOINT"]), json.loads(values["CMD"])
    assert entrypoint == ["corral"]

    args = build_parser().parse_args(command)

    assert args.handler is cli._serve
    assert args.listen == f"0.0.0.0:{values['EXPOSE']}"
    user = values["USER"].split(":")[0]
    assert user.isdigit() and int(user) != 0, "a fixed numeric uid, so a runtime can check it is not root"
    assert "/healthz" in values["HEALTHCHECK"] and f":{values['EXPOSE']}/" in values["HEALTHCHECK"]
