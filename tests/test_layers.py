"""The layering contracts (`[tool.importlinter]` in pyproject.toml) hold, and each catches the leak it guards.

`lint-imports` runs in-process on the real tree, reading the configuration a developer's run reads. Then each
leak this repository once had (or, for contracts that always held, the leak they exist to stop) is added back to
the import graph, and exactly the contracts that should refuse it do: a contract that could never fail would pass
the first test too.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import grimp
import pytest
from importlinter.api import read_configuration
from importlinter.application.use_cases import lint_imports
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.independence import IndependenceContract
from importlinter.domain.contract import Contract

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
CONTRACT_TYPES: dict[str, type[Contract]] = {"forbidden": ForbiddenContract, "independence": IndependenceContract}

LEAKS: dict[tuple[str, str], set[str]] = {
    # the store recorded scale-set messages as the GitHub client's type (now `corral.model.JobMessage`)
    ("corral.store.scaleset_jobs", "corral.github.scaleset"): {"store", "ends"},
    # the configuration took image filters and the default cloud's name from the cloud layer (now
    # `corral.images` and `corral.config.DEFAULT_CLOUD`): everything that reads a config imported openstacksdk
    ("corral.config", "corral.cloud.images"): {"config", "pure", "ends"},
    # `corral token create` took its scopes from the API's FastAPI dependency (now `corral.store.tokens`)
    ("corral.commands.tokens", "corral.api.auth"): {"commands"},
    # the doctor asked the engine for a scale set's name (now `corral.config.scale_set_name`); `corral init`
    # runs the doctor, so the commands imported the engine too
    ("corral.doctor.scalesets", "corral.engine.scalesets"): {"doctor", "commands"},
    # the judge read a server's fault through the cloud layer (now `corral.policy.is_quota_fault`)
    ("corral.policy", "corral.cloud.provider"): {"pure"},
    # the API's pool views took the whole `Engine` and read its parts (now `corral.engine.operator.Operator`)
    ("corral.api.views", "corral.engine.coordinator"): {"api"},
    # leaks that never happened, and that these contracts keep out
    ("corral.engine.coordinator", "corral.api.app"): {"engine"},
    ("corral.service", "corral_sandbox"): {"sandbox"},
}


def test_every_contract_holds(capsys: pytest.CaptureFixture[str]) -> None:
    """What `lint-imports` runs, less its command-line wrapper: that one puts the working directory on
    `sys.path` and reconfigures logging (`dictConfig`), which would silence corral's loggers for the tests
    that run after this one in the same process."""
    passed = lint_imports(config_filename=str(PYPROJECT), cache_dir=None, is_debug_mode=True, no_logo=True)
    report = capsys.readouterr().out
    assert passed, report
    assert "Contracts: 9 kept, 0 broken." in report


@pytest.fixture(scope="module")
def configuration() -> dict[str, Any]:
    return read_configuration(str(PYPROJECT))


@pytest.fixture(scope="module")
def graph(configuration: dict[str, Any]) -> grimp.ImportGraph:
    (package,) = configuration["session_options"]["root_packages"]
    return grimp.build_graph(package, include_external_packages=True, cache_dir=None)


def broken_by(graph: grimp.ImportGraph, configuration: dict[str, Any]) -> set[str]:
    """The ids of the contracts that `graph` breaks."""
    broken = set()
    for options in configuration["contracts_options"]:
        contract = CONTRACT_TYPES[options["type"]](
            name=options["name"], session_options=configuration["session_options"], contract_options=options
        )
        if not contract.check(copy.deepcopy(graph), verbose=False).kept:
            broken.add(options["id"])
    return broken


def test_each_contract_has_a_leak_it_refuses(configuration: dict[str, Any]) -> None:
    ids = {options["id"] for options in configuration["contracts_options"]}
    assert set().union(*LEAKS.values()) == ids


@pytest.mark.parametrize(("leak", "contracts"), LEAKS.items(), ids=[f"{a}->{b}" for a, b in LEAKS])
def test_a_leak_breaks_exactly_its_contracts(
    graph: grimp.ImportGraph, configuration: dict[str, Any], leak: tuple[str, str], contracts: set[str]
) -> None:
    importer, imported = leak
    leaky = copy.deepcopy(graph)
    leaky.add_import(importer=importer, imported=imported, line_number=1, line_contents=f"import {imported}")
    assert broken_by(leaky, configuration) == contracts
