"""The operator's guide and what ships beside it hold to corral as built.

`docs/operating.md` tells an operator what to run, `deploy/grafana/corral-dashboard.json` what to watch and
`deploy/prometheus/corral-alerts.yaml` what to be woken for. Each names things corral defines elsewhere (CLI
commands and options, metric names, labels, label values), so each is checked here against the real thing:
the CLI's own parser, the metrics registry of `corral.metrics`, and the enums and code that produce label
values. A renamed metric, a dropped label or a removed option then fails here rather than in an operator's
dashboard, silently empty, or in an alert that can never fire.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from corral.api import webhook
from corral.cli import build_parser
from corral.engine.supervisor import ActionKind
from corral.metrics import REGISTRY
from corral.model import JobState, Reason, RunnerState

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "operating.md"
DASHBOARD = ROOT / "deploy" / "grafana" / "corral-dashboard.json"
ALERTS = ROOT / "deploy" / "prometheus" / "corral-alerts.yaml"

SAMPLE_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
}
"""The series prometheus-client exposes for each kind of metric, by suffix of the metric's name."""
TARGET_LABELS = frozenset({"job", "instance"})
"""Labels Prometheus itself attaches to every scraped series."""
METRIC = re.compile(r"\b(corral_[a-z0-9_]+)\b(\{[^}]*\})?")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"')
GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
LABEL_VALUES = re.compile(r"label_values\(\s*(corral_[a-z0-9_]+)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)")
PLAIN_ALTERNATIVES = re.compile(r"^[\w.-]+(\|[\w.-]+)*$")


@dataclass(frozen=True)
class Series:
    """One name corral's /metrics can expose, and the labels its samples carry."""

    family: str
    labels: frozenset[str]


def exposed_series() -> dict[str, Series]:
    """Every series name in corral's registry, as prometheus-client exposes it."""
    series: dict[str, Series] = {}
    for collector in REGISTRY._collector_to_names:
        assert isinstance(collector, MetricWrapperBase), f"{collector!r} is not a prometheus-client metric"
        labels = frozenset(collector._labelnames)
        assert collector._type is not None, f"{collector!r} has no type"
        for suffix in SAMPLE_SUFFIXES[collector._type]:
            extra = {"le"} if suffix == "_bucket" else set()
            series[collector._name + suffix] = Series(collector._name, labels | extra)
    return series


def webhook_outcomes() -> set[str]:
    """The `outcome` values `POST /webhook` counts, read from its code."""
    source = inspect.getsource(webhook)
    outcomes = set(re.findall(r'_answer\(\s*\d+,\s*"(\w+)"', source))
    outcomes |= set(re.findall(r'WEBHOOKS\.labels\("(\w+)"\)', source))
    assert outcomes, "no outcome found in corral/api/webhook.py: has the way it counts deliveries changed?"
    return outcomes


def known_values() -> dict[tuple[str, str], set[str]]:
    """Label values that come from a closed set in corral's code, by (metric family, label)."""
    states = {state.value for state in RunnerState}
    reasons = {reason.value for reason in Reason}
    return {
        ("corral_runners", "state"): states - {RunnerState.DELETED.value},
        ("corral_runner_transitions", "state"): states,
        ("corral_runner_transitions", "reason"): reasons,
        ("corral_runner_failures", "reason"): reasons,
        ("corral_jobs", "status"): {status.value for status in JobState},
        ("corral_action_errors", "kind"): {kind.value for kind in ActionKind},
        ("corral_webhooks", "outcome"): webhook_outcomes(),
    }


SERIES = exposed_series()
KNOWN_VALUES = known_values()


def problems_in(expr: str) -> list[str]:
    """What in a PromQL expression names a corral series, label or label value that does not exist."""
    problems: list[str] = []
    used: list[Series] = []
    for match in METRIC.finditer(expr):
        name, selector = match.group(1), match.group(2) or ""
        series = SERIES.get(name)
        if series is None:
            problems.append(f"{name}: corral exposes no such series")
            continue
        used.append(series)
        for label, _, value in MATCHER.findall(selector):
            if label not in series.labels | TARGET_LABELS:
                problems.append(f"{name}: no label {label!r} (it has {sorted(series.labels)})")
                continue
            allowed = KNOWN_VALUES.get((series.family, label))
            if allowed is not None and PLAIN_ALTERNATIVES.match(value):
                unknown = sorted(set(value.split("|")) - allowed)
                if unknown:
                    problems.append(f"{name}: {label} is never {unknown} (it is one of {sorted(allowed)})")
    for match in LABEL_VALUES.finditer(expr):
        name, label = match.groups()
        if name in SERIES and label not in SERIES[name].labels:
            problems.append(f"label_values({name}, {label}): {name} has no label {label!r}")
    available = TARGET_LABELS.union(*(series.labels for series in used))
    for match in GROUPING.finditer(expr):
        for label in filter(None, (part.strip() for part in match.group(1).split(","))):
            if label not in available:
                problems.append(f"{match.group(0)}: no series in the expression has a label {label!r}")
    return problems


def expressions(document: Any) -> Iterator[str]:
    """Every PromQL expression in a dashboard: panel targets and template variable queries."""
    if isinstance(document, dict):
        for key, value in document.items():
            if key in ("expr", "definition", "query") and isinstance(value, str):
                yield value
            else:
                yield from expressions(value)
    elif isinstance(document, list):
        for item in document:
            yield from expressions(item)


def load_dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def load_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(ALERTS.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def families(exprs: list[str]) -> set[str]:
    return {SERIES[name].family for expr in exprs for name, _ in METRIC.findall(expr) if name in SERIES}


# -- the dashboard ------------------------------------------------------------------------------------


def test_every_series_label_and_value_the_dashboard_queries_exists() -> None:
    found = list(expressions(load_dashboard()))
    assert len(found) >= 20, "the dashboard should query corral on every panel"
    problems = [f"{expr}\n    {problem}" for expr in found for problem in problems_in(expr)]
    assert not problems, "\n".join(problems)


def test_the_dashboard_shows_what_an_operator_watches() -> None:
    shown = families(list(expressions(load_dashboard())))
    wanted = {
        "corral_jobs",
        "corral_queued_to_create_seconds",
        "corral_queued_to_running_seconds",
        "corral_runners",
        "corral_runner_failures",
        "corral_action_errors",
        "corral_cloud_calls",
        "corral_github_errors",
        "corral_github_rate_limit_remaining",
        "corral_reconcile_pass_seconds",
        "corral_webhooks",
    }
    assert wanted <= shown, f"the dashboard does not show {sorted(wanted - shown)}"


def test_the_dashboard_imports_with_a_prometheus_data_source_of_the_users_choice() -> None:
    dashboard = load_dashboard()
    inputs = {item["name"]: item for item in dashboard["__inputs"]}
    assert inputs["DS_PROMETHEUS"]["type"] == "datasource"
    assert inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus"
    assert isinstance(dashboard["schemaVersion"], int)
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels), "panel ids repeat"
    for panel in panels:
        sources = [panel["datasource"], *(target["datasource"] for target in panel["targets"])]
        assert all(source == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"} for source in sources), panel["title"]
        assert panel["targets"] and all(target["expr"].strip() for target in panel["targets"]), panel["title"]
        position = panel["gridPos"]
        assert position["x"] >= 0 and position["x"] + position["w"] <= 24, f"{panel['title']} is wider than the grid"


# -- the alert rules ----------------------------------------------------------------------------------


def test_every_series_label_and_value_the_alerts_query_exists() -> None:
    problems = [f"{rule['alert']}: {problem}" for rule in load_rules() for problem in problems_in(rule["expr"])]
    assert not problems, "\n".join(problems)


def test_the_alert_rules_file_has_prometheus_rule_group_shape_and_says_what_to_do() -> None:
    document = yaml.safe_load(ALERTS.read_text())
    assert set(document) == {"groups"}
    names: list[str] = []
    for group in document["groups"]:
        assert set(group) <= {"name", "interval", "limit", "rules"} and group["name"] and group["rules"]
        for rule in group["rules"]:
            name = rule.get("alert", "?")
            assert set(rule) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}, name
            assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", name), f"{name}: alert names are CamelCase"
            assert isinstance(rule["expr"], str) and rule["expr"].strip(), name
            if "for" in rule:
                assert re.fullmatch(r"\d+[smhdwy]", rule["for"]), f"{name}: for {rule['for']!r} is not a duration"
            assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
            annotations = rule["annotations"]
            assert len(annotations["summary"]) >= 20 and len(annotations["description"]) >= 60, name
            names.append(name)
    assert len(names) == len(set(names)), "alert names repeat"


def test_alert_annotations_name_only_labels_the_alert_carries() -> None:
    problems = []
    for rule in load_rules():
        expr = rule["expr"]
        grouped = [m.group(1) for m in re.finditer(r"\b(?:by)\s*\(([^)]*)\)", expr)]
        if grouped:
            carried = {label.strip() for labels in grouped for label in labels.split(",")}
        else:
            used = [SERIES[name] for name, _ in METRIC.findall(expr) if name in SERIES]
            carried = set(TARGET_LABELS.union(*(series.labels for series in used)))
        for text in rule["annotations"].values():
            for label in re.findall(r"\$labels\.(\w+)", text):
                if label not in carried:
                    problems.append(f"{rule['alert']}: $labels.{label}, but the alert carries {sorted(carried)}")
    assert not problems, "\n".join(problems)


def test_the_alerts_cover_what_an_operator_must_act_on() -> None:
    rules = load_rules()
    watched = families([rule["expr"] for rule in rules])
    wanted = {
        "corral_jobs",
        "corral_queued_to_running_seconds",
        "corral_runner_failures",
        "corral_cloud_calls",
        "corral_github_calls",
        "corral_github_rate_limit_remaining",
        "corral_observe_seconds",
        "corral_reconcile_pass_seconds",
        "corral_reconcile_errors",
        "corral_webhooks",
    }
    assert wanted <= watched, f"no alert watches {sorted(wanted - watched)}"
    exprs = " ".join(rule["expr"] for rule in rules)
    assert 'up{job="corral"}' in exprs and "probe_success" in exprs, "corral down and corral not ready need alerts"
    assert 'outcome="bad_signature"' in exprs


# -- the guide ----------------------------------------------------------------------------------------


def fenced_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", GUIDE.read_text(), flags=re.DOTALL | re.MULTILINE)


def corral_command_lines() -> list[list[str]]:
    """The argument lists of every `corral ...` command in the guide's bash blocks."""
    commands = []
    for block in fenced_blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            segment: list[str] = []
            redirected = False
            for word in [*words, ";"]:
                if word not in ("&&", "||", ";", "|"):
                    redirected = redirected or bool(re.fullmatch(r"\d*[<>]{1,2}.*", word))
                    if not redirected:  # `> file` and what follows it are the shell's, not corral's
                        segment.append(word)
                    continue
                while segment and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", segment[0]):
                    segment.pop(0)  # an environment assignment before the command
                if segment and Path(segment[0]).name == "corral":
                    commands.append(segment[1:])
                segment, redirected = [], False
    return commands


GUIDE_COMMANDS = corral_command_lines()


def test_the_guide_shows_corral_commands() -> None:
    assert len(GUIDE_COMMANDS) >= 10
    assert {"serve", "token", "migrate"} <= {argv[0] for argv in GUIDE_COMMANDS if argv}


@pytest.mark.parametrize("argv", GUIDE_COMMANDS, ids=[" ".join(argv) for argv in GUIDE_COMMANDS])
def test_every_corral_command_in_the_guide_parses_with_corrals_own_cli(argv: list[str]) -> None:
    parser = build_parser()
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            args = parser.parse_args(argv)
    except SystemExit as exc:
        assert exc.code == 0, f"corral {' '.join(argv)}: {errors.getvalue().strip()}"
        return  # --help or --version: argparse printed and stopped, as corral would
    assert hasattr(args, "handler"), f"corral {' '.join(argv)} names no command"


def test_the_guides_yaml_examples_parse() -> None:
    blocks = fenced_blocks("yaml")
    assert blocks
    for block in blocks:
        assert isinstance(yaml.safe_load(block), dict), block


def test_the_guides_links_lead_to_files_in_the_repository() -> None:
    text = GUIDE.read_text()
    targets = [t for t in re.findall(r"\]\(([^)#\s]+)", text) if "://" not in t]
    assert targets
    missing = [target for target in targets if not (GUIDE.parent / target).exists()]
    assert not missing, f"the guide links to files that do not exist: {missing}"
