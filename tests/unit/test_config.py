"""Configuration: what an operator writing corral.yaml sees when it is right and when it is wrong."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from corral import secrets
from corral.config import ConfigError, load_config, parse_config, parse_duration
from corral.userdata import SAMPLE_JIT_CONFIG_LENGTH
from corral.warmth import AutoWarm

PAT = "ghp_" + "Zq7" * 12
WEBHOOK_SECRET = "a-webhook-secret-long-enough"


def pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, password: bytes | None = None) -> str:
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption).decode()


@pytest.fixture(scope="module")
def rsa_pem() -> str:
    return pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))


def pool(**overrides: Any) -> dict[str, Any]:
    spec = {"scope": {"org": "octo-org"}, "labels": ["linux", "small"], "image": "ubuntu", "flavor": "m1.small"}
    spec.update(overrides)
    return spec


def document(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"github": {"token": "ghp_x"}, "pools": {"small": pool()}}
    doc.update(overrides)
    return doc


def problems_of(raw: object) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw)
    return caught.value.problems


def test_a_single_pool_becomes_the_default_and_defaults_apply() -> None:
    config = parse_config(document())
    assert config.default_pool == "small"
    small = config.pools["small"]
    assert (small.min_idle, small.max_runners, small.bootstrap_timeout) == (0, 10, 600.0)
    assert config.database_url == "sqlite:///corral.db"


def test_every_problem_is_listed_with_its_key_and_a_fix() -> None:
    raw = document(
        pools={
            "Small_Pool": pool(min_idle=5, max_runners=2),
            "big": pool(flavr="m1.large", boot_volume_gb=0),
        },
        default_pool="huge",
    )
    problems = problems_of(raw)
    text = "\n".join(problems)
    assert "pools.Small_Pool: min_idle (5) is larger than max_runners (2)" in text
    assert "pools.big.flavr: unknown key" in text
    assert "pools.big.boot_volume_gb" in text
    assert len(problems) >= 3


def test_cross_pool_rules_are_all_reported() -> None:
    raw = document(
        pools={"a": pool(), "b": pool(labels=["SMALL", "linux"]), "c": pool(labels=["gpu"])},
        default_pool="huge",
        extra_volumes=[{"name": "docker", "size_gb": 20, "propagation": ["a", "nope"]}],
    )
    problems = problems_of(raw)
    assert any(p.startswith("default_pool: 'huge' names no pool") for p in problems)
    assert any(p.startswith("pools.b: same scope and labels as pool 'a'") for p in problems)
    assert any(p.startswith("extra_volumes.0.propagation: no pool named ['nope']") for p in problems)


def test_a_placement_naming_no_cloud_hides_no_other_rule_across_sections() -> None:
    problems = problems_of(document(default_pool="huge", pools={"small": pool(placements=[{"cloud": "nowhere"}])}))
    assert problems == [
        "pools.small.placements.0.cloud: 'nowhere' names no cloud (known: ['default']); declare your clouds in "
        "`clouds` by name",
        "default_pool: 'huge' names no pool; use one of ['small']",
    ]


def test_several_pools_need_a_default() -> None:
    problems = problems_of(document(pools={"a": pool(), "b": pool(labels=["gpu"])}))
    assert problems == ["default_pool: required with several pools; name one of ['a', 'b']"]


@pytest.mark.parametrize("name", ["UPPER", "under_score", "-dash", "x" * 25, "dot.ted"])
def test_pool_names_must_fit_in_server_names(name: str) -> None:
    (problem,) = problems_of(document(pools={name: pool()}))
    assert problem.startswith("pools: pool name") and "lowercase" in problem


def test_credentials_must_be_one_kind(rsa_pem: str) -> None:
    assert "no credentials" in problems_of(document(github={}))[0]
    assert "not both" in problems_of(document(github={"token": "t", "app_id": 1, "private_key": rsa_pem}))[0]
    assert "no private key" in problems_of(document(github={"app_id": 1}))[0]


def test_secrets_come_from_files_relative_to_the_config(tmp_path: Path, rsa_pem: str) -> None:
    (tmp_path / "app.pem").write_text(rsa_pem)
    (tmp_path / "hook.secret").write_text(f"{WEBHOOK_SECRET}\n")
    raw = document(github={"app_id": 7, "private_key_file": "app.pem", "webhook_secret_file": "hook.secret"})
    path = tmp_path / "corral.yaml"
    path.write_text(yaml.safe_dump(raw))
    config = load_config(path)
    assert config.github.webhook_secret is not None
    assert config.github.webhook_secret.get_secret_value() == WEBHOOK_SECRET
    assert WEBHOOK_SECRET not in repr(config) and "PRIVATE KEY" not in repr(config)


def test_loaded_secrets_are_blanked_from_any_text_bound_for_a_log(tmp_path: Path, rsa_pem: str) -> None:
    raw = document(
        github={"app_id": 7, "private_key": rsa_pem, "webhook_secret": WEBHOOK_SECRET},
        database_url="postgresql+psycopg://corral:db-password-123@db.example/corral",
    )
    parse_config(raw)
    key_line = rsa_pem.splitlines()[5]
    text = secrets.redact(f"a {WEBHOOK_SECRET} b {key_line} c db-password-123 d")
    assert text == "a *** b *** c *** d"


@pytest.mark.parametrize(
    ("github", "key", "what"),
    [
        ({"token": "ghp_x", "webhook_secret": ""}, "github.webhook_secret", "empty"),
        ({"token": "ghp_x", "webhook_secret": "   "}, "github.webhook_secret", "empty"),
        ({"token": "ghp_x", "webhook_secret": "hunter2hunter2"}, "github.webhook_secret", "too short"),
        ({"token": "ghp_x", "webhook_secret_file": "empty.secret"}, "github.webhook_secret_file", "empty"),
    ],
)
def test_an_empty_or_guessable_webhook_secret_is_refused(
    tmp_path: Path, github: dict[str, str], key: str, what: str
) -> None:
    (tmp_path / "empty.secret").write_text("\n")
    with pytest.raises(ConfigError) as caught:
        parse_config(document(github=github), base=tmp_path)
    (problem,) = caught.value.problems
    assert problem.startswith(f"{key}: {what} (at least 16 characters)")
    assert "openssl rand -hex 32" in problem


def test_a_long_enough_webhook_secret_from_the_environment_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_WEBHOOK_SECRET", "short")
    (problem,) = problems_of(document())
    assert problem.startswith("CORRAL_WEBHOOK_SECRET: too short")
    monkeypatch.setenv("CORRAL_WEBHOOK_SECRET", WEBHOOK_SECRET)
    secret = parse_config(document()).github.webhook_secret
    assert secret is not None and secret.get_secret_value() == WEBHOOK_SECRET


def test_an_empty_token_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty.token").write_text("")
    assert problems_of(document(github={"token": ""})) == [
        "github.token: empty; put the token (a PAT, ghp_...) in it, or use a GitHub App"
    ]
    with pytest.raises(ConfigError) as caught:
        parse_config(document(github={"token_file": "empty.token"}), base=tmp_path)
    assert caught.value.problems[0].startswith("github.token_file: empty")


def test_a_private_key_must_load_as_an_rsa_key(rsa_pem: str) -> None:
    ec_key = ec.generate_private_key(ec.SECP256R1())
    rsa_key = serialization.load_pem_private_key(rsa_pem.encode(), password=None)
    assert isinstance(rsa_key, rsa.RSAPrivateKey)
    for bad in ["not a key", pem(ec_key), pem(rsa_key, password=b"passphrase"), rsa_pem[:200]]:
        (problem,) = problems_of(document(github={"app_id": 7, "private_key": bad}))
        assert problem.startswith("github.private_key: not an unencrypted PEM RSA private key")
        assert "BEGIN" not in problem
    assert parse_config(document(github={"app_id": 7, "private_key": rsa_pem})).github.uses_app


@pytest.mark.parametrize("key", ["token", "private_key", "webhook_secret"])
def test_a_secret_given_both_inline_and_as_a_file_is_refused(tmp_path: Path, key: str) -> None:
    (tmp_path / "secret").write_text("from-the-file-0123456789")
    github = {"token": "ghp_x", key: "inline-0123456789", f"{key}_file": "secret"}
    with pytest.raises(ConfigError) as caught:
        parse_config(document(github=github), base=tmp_path)
    assert f"github.{key}: given both inline and as {key}_file" in caught.value.problems[0]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("garbage", "not a database URL; write it as sqlite:///corral.db or postgresql+psycopg://"),
        ("postgresql://corral:db-password-123@db/corral", "postgresql:// is not supported"),
        ("mysql+pymysql://corral:db-password-123@db/corral", "mysql+pymysql:// is not supported"),
        ("sqlite://", "names no database"),
        ("sqlite:///:memory:", "names no database"),
    ],
)
def test_a_database_url_must_name_a_database_corral_can_open(url: str, expected: str) -> None:
    (problem,) = problems_of(document(database_url=url))
    assert problem.startswith("database_url: ") and expected in problem
    assert "db-password-123" not in problem


@pytest.mark.parametrize(
    "url", ["sqlite:///corral.db", "sqlite+pysqlite:////var/lib/corral.db", "postgresql+psycopg://u:p@db:5432/corral"]
)
def test_supported_database_urls_are_accepted(url: str) -> None:
    assert parse_config(document(database_url=url)).database_url == url


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("reconcile_interval", "1ms"),
        ("missed_job_scan", "500ms"),
        ("stale_job_check", "10ms"),
        ("github.timeout", "100ms"),
        ("cloud.quota_retry", "1ms"),
        ("cloud.call_retry_time", "500ms"),
        ("pools.small.bootstrap_timeout", "1ms"),
        ("pools.small.idle_grace", "1ms"),
    ],
)
def test_durations_below_their_minimum_are_refused_naming_the_key_and_the_minimum(key: str, value: str) -> None:
    raw = document(github={"token": "ghp_x"}, cloud={}, pools={"small": pool()})
    *parents, name = key.split(".")
    target = raw
    for parent in parents:
        target = target[parent]
    target[name] = value
    (problem,) = problems_of(raw)
    assert problem.startswith(f"{key}: {value} is below the minimum of 1s")
    assert problem.endswith("set it to 1s or more")


def test_each_clouds_call_retries_are_bounded_in_number_and_time() -> None:
    """openstacksdk's own retries held a worker about 48 s for one Glance 503: corral's are the only ones, and
    each cloud says how many and for how long (`corral.cloud.openstack`)."""
    config = parse_config(document(clouds={"east": {"call_retries": 0, "call_retry_time": "3s"}, "west": {}}))
    settings = config.cloud_settings()
    assert (settings["east"].call_retries, settings["east"].call_retry_time) == (0, 3.0)
    assert (settings["west"].call_retries, settings["west"].call_retry_time) == (2, 10.0), "the defaults"
    assert problems_of(document(cloud={"call_retries": 11})) == [
        "cloud.call_retries: 11 is above the maximum of 10; set it to 10 or less"
    ]


def with_key(key: str, value: object) -> dict[str, Any]:
    """The document with `key` (dotted, such as `pools.small.max_runners`) set to `value`."""
    raw = document(github={"token": "ghp_x"}, cloud={}, tuning={}, pools={"small": pool()})
    *parents, name = key.split(".")
    target = raw
    for parent in parents:
        target = target[parent]
    target[name] = value
    return raw


RUNNERS = "more than any cloud project holds"
OUT_OF_RANGE = {
    "pools.small.max_runners": (
        1_000_000_000,
        f"1,000,000,000 is outside 1 to 10,000 ({RUNNERS}); set it within that range",
    ),
    "pools.small.min_idle": (20_000, f"20,000 is outside 0 to 10,000 ({RUNNERS}); set it within that range"),
    "pools.small.max_runners_per_repo": (0, "0 is outside 1 to 10,000; set it within that range"),
    "reconcile_interval": (
        1_000_000_000,
        "1,000,000,000s is above the maximum of 1d (rounds further apart would leave what they catch waiting "
        "for days); set it to 1d or less",
    ),
    "pools.small.bootstrap_timeout": (
        "2d",
        "2d is above the maximum of 1d (nothing corral waits for takes longer: a longer one is a slip of unit); "
        "set it to 1d or less",
    ),
    "github.timeout": (
        "1h",
        "1h is above the maximum of 10m (a call unanswered that long has hung; the next pass tries again); "
        "set it to 10m or less",
    ),
    "cloud.timeout": (
        "11m",
        "11m is above the maximum of 10m (a call unanswered that long has hung; the next pass tries again); "
        "set it to 10m or less",
    ),
    "lease_time": (
        "1h",
        "1h is above the maximum of 10m (a replica that stops holds its pools that long before another takes "
        "them); set it to 10m or less",
    ),
    "retention": (
        "3651d",
        "3651d is above the maximum of 3650d (older history belongs in a backup, not in the database every pass "
        "reads); set it to 3650d or less",
    ),
    "tuning.news_delay": (
        "2m",
        "2m is above the maximum of 1m (longer holds a pool's pass back from news that came); set it to 1m or less",
    ),
    "tuning.confirm_after": (
        "1h",
        "1h is above the maximum of 10m (longer leaves a job nobody took waiting that long); set it to 10m or less",
    ),
    "max_runners_per_job": (1000, "1,000 is above the maximum of 20; set it to 20 or less"),
}


@pytest.mark.parametrize("key", OUT_OF_RANGE)
def test_counts_and_durations_outside_a_sane_range_are_refused_naming_the_key_and_the_range(key: str) -> None:
    value, says = OUT_OF_RANGE[key]
    assert problems_of(with_key(key, value)) == [f"{key}: {says}"]


def test_a_call_timeout_far_too_long_names_its_own_maximum() -> None:
    """A call timeout is also a wait (at most a day): above that, the message once named the day, a value that
    is still refused."""
    assert problems_of(with_key("github.timeout", "2d")) == [
        "github.timeout: 2d is above the maximum of 10m (a call unanswered that long has hung; the next pass tries "
        "again); set it to 10m or less"
    ]


def test_a_schedules_counts_and_windows_are_bounded_too() -> None:
    window = {"cron": "0 8 * * 1-5", "duration": "32d", "min_idle": 10_001}
    problems = problems_of(with_key("pools.small.min_idle", {"default": -1, "schedules": [window]}))
    assert problems == [
        "pools.small.min_idle.default: -1 is outside 0 to 10,000; set it within that range",
        "pools.small.min_idle.schedules.0.duration: 32d is above the maximum of 31d (a window open longer is a "
        "new `default`; change that); set it to 31d or less",
        "pools.small.min_idle.schedules.0.min_idle: 10,001 is outside 0 to 10,000 (more than any cloud project "
        "holds); set it within that range",
    ]


def test_auto_warm_takes_its_defaults_and_max_runners_as_its_max() -> None:
    config = parse_config(with_key("pools.small.min_idle", {"auto": {}}))
    small = config.pools["small"]
    assert small.auto_warm == AutoWarm(target_wait_s=30.0, percentile=95.0, minimum=0, maximum=10)
    assert small.min_idle_at(datetime(2026, 12, 2, 9, tzinfo=UTC)).min_idle == 0  # no schedule: a floor of 0


@pytest.mark.parametrize(
    ("min_idle", "problem"),
    [
        ({"auto": {"min": 5, "max": 2}}, "pools.small.min_idle.auto: min (5) is larger than max (2); lower min or "
         "raise max"),
        ({"auto": {"max": 40}}, "pools.small: min_idle (40 at its peak) is larger than max_runners (10); lower "
         "min_idle or raise max_runners"),
        ({"auto": {"percentile": 0}}, "pools.small.min_idle.auto.percentile: 0 is not above 0.0; set it above 0.0"),
        ({"auto": {"target_wait": "0s"}}, "pools.small.min_idle.auto.target_wait: must be a positive duration"),
        ({"auto": {"target": "30s"}}, "pools.small.min_idle.auto.target: unknown key; remove it or check its "
         "spelling"),
        ({"timezone": "UTC"}, "pools.small.min_idle: give `schedules` (windows of warm runners, such as [{cron: "
         "'0 8 * * 1-5', duration: 10h, min_idle: 20}]) or `auto` (such as {auto: {target_wait: 30s}}), or make "
         "min_idle a number"),
    ],
)  # fmt: skip
def test_a_bad_auto_warm_names_its_key_and_the_fix(min_idle: dict[str, Any], problem: str) -> None:
    problems = problems_of(with_key("pools.small.min_idle", min_idle))
    assert len(problems) == 1 and problems[0].startswith(problem)


def test_a_scale_set_pool_is_refused_auto_warm_with_the_fix() -> None:
    raw = with_key("pools.small.min_idle", {"auto": {}})
    raw["pools"]["small"]["intake"] = "scale_set"
    assert problems_of(raw) == [
        "pools.small: min_idle.auto forecasts from the webhook intake's job history, which a scale-set pool does "
        "not keep; give a number or a schedule, or set `intake: webhook`"
    ]


HOLDS_SECRETS = "the runner's home /opt/actions-runner holds its work directory and credentials"


@pytest.mark.parametrize(
    ("mount", "problem"),
    [
        ("/opt/actions-runner/_work/cache", HOLDS_SECRETS),
        ("/opt", HOLDS_SECRETS),
        ("/etc", "/etc is part of the system: mount the cache on a path of its own"),
        ("cache", "give an absolute path of letters, digits, '.', '_' and '-'"),
        ("/var/lib/../../etc", "give an absolute path of letters, digits, '.', '_' and '-'"),
        ("/var/lib/ci cache; rm -rf /", "give an absolute path of letters, digits, '.', '_' and '-'"),
    ],
)  # fmt: skip
def test_a_cache_mount_that_could_hold_a_jobs_secrets_or_the_system_is_refused(mount: str, problem: str) -> None:
    problems = problems_of(with_key("pools.small.cache_volumes", {"size_gb": 10, "max": 2, "mount": mount}))
    assert len(problems) == 1 and problems[0].startswith(f"pools.small.cache_volumes.mount: {problem}")


def test_cache_volumes_default_to_their_own_mount_and_count_as_volumes() -> None:
    config = parse_config(with_key("pools.small.cache_volumes", {"size_gb": 10, "max": 2}))
    cache = config.pools["small"].cache_volumes
    assert cache is not None and (cache.size_gb, cache.max, cache.mount, cache.type) == (
        10,
        2,
        "/var/lib/corral-cache",
        None,
    )
    assert config.uses_volumes()  # Cinder's quota is read for it


@pytest.mark.parametrize("key", ["stale_job_check", "retention", "tuning.news_delay"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_duration_that_is_not_finite_is_refused(key: str, value: float) -> None:
    assert problems_of(with_key(key, value)) == [f"{key}: must be a finite duration, such as 30s, 10m or 1h"]


def test_the_ends_of_each_range_are_accepted() -> None:
    raw = with_key("pools.small.max_runners", 10_000)
    raw["pools"]["small"].update(min_idle=10_000, max_runners_per_repo=10_000, bootstrap_timeout="1d")
    raw.update(reconcile_interval="1d", lease_time="10m", retention="3650d", max_runners_per_job=20)
    raw["github"]["timeout"] = "10m"
    config = parse_config(raw)
    assert (config.pools["small"].max_runners, config.reconcile_interval, config.retention) == (
        10_000,
        86400.0,
        3650 * 86400.0,
    )


def test_a_key_given_twice_is_refused_naming_the_key_and_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "corral.yaml"
    path.write_text(
        "github:\n  token: ghp_first\n  url: https://api.github.com\n  token: ghp_second\n"
        "pools:\n  small: {scope: {org: o}, labels: [a], image: i, flavor: f}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.problems == [
        "github.token: given twice (lines 2 and 4); YAML would silently keep the last, "
        "so delete the one you do not mean"
    ]


def test_yaml_merge_keys_may_still_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "corral.yaml"
    path.write_text(
        "github: {token: ghp_x}\n"
        "base: &base {scope: {org: o}, labels: [a], image: i, flavor: f, max_runners: 2}\n"
        "pools:\n  small:\n    <<: *base\n    max_runners: 5\n"
    )
    with pytest.raises(ConfigError) as caught:  # `base` is not a key corral knows; the merge itself is fine
        load_config(path)
    assert caught.value.problems == ["base: unknown key; remove it or check its spelling"]


@pytest.mark.parametrize(
    "broken_line",
    [
        f"  token: {PAT}: [\n",  # a colon too many
        f'  token: "{PAT}\n',  # an unclosed quote
        f"  token: {PAT}\n\ttimeout: 15s\n",  # a tab
        f"  token: !!python/object:{PAT} x\n",  # a tag
    ],
)
def test_a_yaml_syntax_error_says_where_but_never_shows_the_line(tmp_path: Path, broken_line: str) -> None:
    path = tmp_path / "corral.yaml"
    path.write_text(f"github:\n{broken_line}pools: {{}}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    (problem,) = caught.value.problems
    assert problem.startswith(f"{path}: not valid YAML at line ") and problem.endswith("; fix the syntax there")
    for fragment in (PAT[i : i + 8] for i in range(0, len(PAT) - 8)):
        assert fragment not in str(caught.value)


def test_a_missing_secret_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "corral.yaml"
    path.write_text(yaml.safe_dump(document(github={"token_file": "missing.token"})))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert any(p.startswith("github.token_file: cannot read") for p in caught.value.problems)


def test_secrets_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_GITHUB_TOKEN", "ghp_from_env")
    config = parse_config(document(github={}))
    assert config.github.token is not None and config.github.token.get_secret_value() == "ghp_from_env"


def test_shared_volumes_propagate_and_a_pools_own_volume_wins() -> None:
    raw = document(
        pools={
            "a": pool(extra_volumes=[{"name": "docker", "size_gb": 50}]),
            "b": pool(labels=["gpu"]),
            "c": pool(labels=["arm"]),
        },
        default_pool="a",
        extra_volumes=[
            {"name": "docker", "size_gb": 20, "type": "ssd", "propagation": ["all"]},
            {"name": "cache", "size_gb": 5, "propagation": ["b"]},
        ],
    )
    config = parse_config(raw)
    assert [(v.name, v.size_gb) for v in config.volumes_for("a")] == [("docker", 50)]
    assert [(v.name, v.size_gb) for v in config.volumes_for("b")] == [("docker", 20), ("cache", 5)]
    assert [v.name for v in config.volumes_for("c")] == ["docker"]


@pytest.mark.parametrize(("text", "seconds"), [(90, 90.0), ("90s", 90.0), ("10m", 600.0), ("1h", 3600.0)])
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_token_pasted_where_a_key_belongs_is_not_repeated() -> None:
    (problem,) = problems_of(document(github={"token": "ghp_x", PAT: "oops"}))
    assert problem == "github.***: unknown key; remove it or check its spelling"


def test_bad_yaml_and_non_mapping_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "corral.yaml"
    path.write_text("pools: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML at line 2, column 1"):
        load_config(path)
    assert "must be a YAML mapping" in problems_of(["a list"])[0]


def test_a_user_data_template_must_exist_and_parse(tmp_path: Path) -> None:
    (tmp_path / "good.sh").write_text("#!/bin/sh\nexec ./run.sh --jitconfig ${jit_config}  # $$HOME\n")
    (tmp_path / "bad.sh").write_text("#!/bin/sh\necho ${unclosed\n")
    base = document()
    path = tmp_path / "corral.yaml"
    path.write_text(yaml.safe_dump({**base, "user_data_template": "good.sh"}))
    assert load_config(path).user_data_template == tmp_path / "good.sh"
    for name, expected in [("bad.sh", "invalid placeholder"), ("missing.sh", "No such file")]:
        path.write_text(yaml.safe_dump({**base, "user_data_template": name}))
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        (problem,) = caught.value.problems
        assert problem.startswith("user_data_template:") and expected in problem


def test_a_template_with_an_unknown_placeholder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "typo.sh").write_text("#!/bin/sh\nexec ./run.sh --jitconfig ${jit_config} --name ${runer_name}\n")
    path = tmp_path / "corral.yaml"
    path.write_text(yaml.safe_dump({**document(), "user_data_template": "typo.sh"}))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    (problem,) = caught.value.problems
    assert problem.startswith("user_data_template:")
    assert "unknown placeholder ${runer_name}; use ${jit_config}, ${runner_name}, " in problem


def test_a_template_too_big_for_nova_with_a_real_jit_config_is_refused(tmp_path: Path) -> None:
    """Nova's limit is on the base64 form: 65,535 characters, so 49,149 bytes of user data at most."""
    header = "#!/bin/sh\nexport JIT='${jit_config}'\n# "
    fits = 49_149 - SAMPLE_JIT_CONFIG_LENGTH - len(header.replace("${jit_config}", "")) - 1
    path = tmp_path / "corral.yaml"
    for padding, ok in [(fits, True), (fits + 1, False)]:
        (tmp_path / "big.sh").write_text(header + "x" * padding + "\n")
        path.write_text(yaml.safe_dump({**document(), "user_data_template": "big.sh"}))
        if ok:
            load_config(path)
            continue
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        (problem,) = caught.value.problems
        assert problem == (
            "user_data_template: for pool small with a 4,096-character JIT config, rendered user data is 49,150 "
            "bytes, 65,536 in base64, over Nova's limit of 65,535; shorten the template"
        )


def test_a_scale_set_pool_is_named_after_the_pool_unless_told_and_is_never_the_default() -> None:
    config = parse_config(
        document(
            pools={
                "small": pool(),
                "ci": pool(intake="scale_set"),
                "gpu": pool(intake="scale_set", scale_set_name="gpu-set"),
            }
        )
    )
    assert config.default_pool == "small", "the only webhook pool is the default"
    assert (config.pools["ci"].intake, config.pools["ci"].scale_set_name) == ("scale_set", None)
    assert config.pools["gpu"].scale_set_name == "gpu-set"
    only_scale_sets = parse_config(document(pools={"a": pool(intake="scale_set"), "b": pool(intake="scale_set")}))
    assert only_scale_sets.default_pool is None, "no default is needed when no pool takes webhooks"


def test_scale_set_settings_that_cannot_work_are_refused_by_key() -> None:
    assert problems_of(document(pools={"small": pool(intake="queue")}))[0].startswith("pools.small.intake:")
    (named,) = problems_of(document(pools={"small": pool(scale_set_name="x")}))
    assert named.startswith("pools.small:") and "only for a pool with `intake: scale_set`" in named
    (spaced,) = problems_of(document(pools={"small": pool(intake="scale_set", scale_set_name="two words")}))
    assert spaced.startswith("pools.small.scale_set_name:")
    default = problems_of(
        document(default_pool="ci", pools={"small": pool(), "ci": pool(intake="scale_set", labels=["ci"])})
    )
    assert default == [
        "default_pool: 'ci' takes its jobs from a scale set, which GitHub routes by name only; name a webhook "
        "pool (['small']) or leave it out"
    ]
    twins = problems_of(
        document(pools={"a": pool(intake="scale_set", scale_set_name="ci"), "ci": pool(intake="scale_set")})
    )
    assert twins == [
        "pools.ci: same scale set as pool 'a' (scope, runner group and name); give one of them its own scale_set_name"
    ]


def test_a_per_repository_cap_is_refused_where_runners_cannot_register_per_repository() -> None:
    """A cap needs runners registered at each job's repository: an organisation's webhook pool can do that; a
    scale set (GitHub hands its jobs out) or a repository-scoped pool (one repository already) cannot."""
    problems = problems_of(
        document(
            pools={
                "matrix": pool(max_runners_per_repo=5),
                "listener": pool(labels=["scale"], max_runners_per_repo=5, intake="scale_set"),
                "single": pool(labels=["one"], scope={"repo": "octo-org/app"}, max_runners_per_repo=5),
            }
        )
    )
    text = "\n".join(problems)
    assert "pools.listener: max_runners_per_repo needs an organisation-scoped pool" in text
    assert "pools.single: max_runners_per_repo needs an organisation-scoped pool" in text
    assert "pools.matrix" not in text


def test_a_canary_share_is_a_percentage() -> None:
    config = parse_config(document(pools={"small": pool(rollout={"canary": "10%", "canary_jobs": 2})}))
    assert (config.pools["small"].rollout.canary, config.pools["small"].rollout.canary_jobs) == (0.1, 2)
    assert parse_config(document()).pools["small"].rollout.canary is None, "no canary unless asked"


@pytest.mark.parametrize(
    ("share", "says"),
    [
        (0.1, "as a percentage, such as '10%'"),
        ("ten%", "is not a percentage"),
        ("0%", "more than 0%"),
        ("150%", "at most 100%"),
    ],
)
def test_a_canary_share_that_is_not_one_is_refused_naming_the_key(share: object, says: str) -> None:
    (problem,) = problems_of(document(pools={"small": pool(rollout={"canary": share})}))
    assert problem.startswith("pools.small.rollout.canary: ") and says in problem, problem


def test_a_runners_pool_is_read_from_the_name_corral_gave_it() -> None:
    pool = {"scope": {"org": "octo-org"}, "labels": ["linux"], "image": "ubuntu", "flavor": "m1.small"}
    pools = {"small": pool, "gpu-a100": {**pool, "labels": ["gpu"]}}
    github = {"token": "ghp_" + "Zq7" * 12}
    config = parse_config({"github": github, "name_prefix": "ci", "pools": pools, "default_pool": "small"})
    assert config.pool_of_runner("ci-small-0123456789") == "small"
    assert config.pool_of_runner("ci-gpu-a100-abcdef0123") == "gpu-a100"  # a dash in the pool's name
    assert config.pool_of_runner("ci-removed-0123456789") is None  # no such pool now: the store is asked
    assert config.pool_of_runner("corral-small-0123456789") is None  # another prefix
    assert config.pool_of_runner("ci-small-runner") is None  # not an id corral gives
    assert config.pool_of_runner("someone-elses-runner") is None
