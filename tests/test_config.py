"""Configuration: what an operator writing corral.yaml sees when it is right and when it is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from corral.config import ConfigError, load_config, parse_config, parse_duration


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


def test_several_pools_need_a_default() -> None:
    problems = problems_of(document(pools={"a": pool(), "b": pool(labels=["gpu"])}))
    assert problems == ["default_pool: required with several pools; name one of ['a', 'b']"]


@pytest.mark.parametrize("name", ["UPPER", "under_score", "-dash", "x" * 25, "dot.ted"])
def test_pool_names_must_fit_in_server_names(name: str) -> None:
    (problem,) = problems_of(document(pools={name: pool()}))
    assert problem.startswith("pools: pool name") and "lowercase" in problem


def test_credentials_must_be_one_kind() -> None:
    assert "no credentials" in problems_of(document(github={}))[0]
    assert "not both" in problems_of(document(github={"token": "t", "app_id": 1, "private_key": "k"}))[0]
    assert "no private key" in problems_of(document(github={"app_id": 1}))[0]


def test_secrets_come_from_files_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "app.pem").write_text("-----BEGIN KEY-----\n")
    (tmp_path / "hook.secret").write_text("s3cret\n")
    raw = document(github={"app_id": 7, "private_key_file": "app.pem", "webhook_secret_file": "hook.secret"})
    path = tmp_path / "corral.yaml"
    path.write_text(yaml.safe_dump(raw))
    config = load_config(path)
    assert config.github.webhook_secret is not None
    assert config.github.webhook_secret.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(config) and "BEGIN KEY" not in repr(config)


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


def test_bad_yaml_and_non_mapping_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "corral.yaml"
    path.write_text("pools: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
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
