"""The rules that pick from what init found, and the checks that a flag names something that exists.

A choice is made without asking only when it is unambiguous:
- image: the only active image, else the only one whose name says "runner" (corral's images are built to
  carry the runner; a stock distribution image must download it on every boot);
- flavor: the only flavor (sizes are a decision: several always ask);
- networks: the only network that is not external; none at all leaves the key out (Nova's "auto");
- security groups: the only group whose name says "runner", else none (Nova then applies "default");
- key pair and availability zone: only from their flags (an ephemeral runner needs no SSH key, and Nova
  places servers in a zone by itself);
- scope: the only one the App's installations give.
Everything else is asked (or, with nobody to ask, an error naming the flag). A flag's value must exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from corral.config import ScopeConfig
from corral.init.cloud import Resource
from corral.init.errors import InitError
from corral.init.github import Installations
from corral.init.prompt import Prompter, listing

RUNNER_WORD = "runner"
SCOPE_FORMS = "org:NAME, repo:OWNER/NAME or enterprise:SLUG"


@dataclass(frozen=True)
class Picked:
    """A value for the config and why it was taken, for the summary init prints."""

    value: str
    why: str


def _says_runner(resources: Sequence[Resource]) -> list[Resource]:
    return [resource for resource in resources if RUNNER_WORD in resource.name.lower()]


def _existing(kind: str, flag: str, given: str, resources: Sequence[Resource]) -> Picked:
    if any(given in (resource.name, resource.id) for resource in resources):
        return Picked(given, flag)
    have = listing([resource.choice() for resource in resources]) or "    (none)"
    raise InitError(f"{flag} {given!r}: no {kind} by that name or id in this cloud; it has:\n{have}")


def pick_one(
    kind: str,
    flag: str,
    given: str | None,
    resources: Sequence[Resource],
    prompter: Prompter,
    *,
    prefer_runner: bool = False,
) -> Picked:
    """A required single value (image, flavor): the flag's, the only one, the rule's, or the person's."""
    if given is not None:
        return _existing(kind, flag, given, resources)
    if not resources:
        raise InitError(f"this cloud offers no {kind} to this project; ask its operators for one, then run init again")
    if len(resources) == 1:
        return Picked(resources[0].name, f"the only {kind}")
    if prefer_runner and len(preferred := _says_runner(resources)) == 1:
        return Picked(preferred[0].name, f'the only {kind} whose name says "{RUNNER_WORD}"')
    return Picked(prompter.choose(kind, flag, [r.choice() for r in resources]), "chosen")


def pick_networks(given: Sequence[str], networks: Sequence[Resource], prompter: Prompter) -> list[Picked]:
    if given:
        return [_existing("network", "--network", name, networks) for name in given]
    internal = [network for network in networks if not network.external]
    if not internal:
        return []
    if len(internal) == 1:
        return [Picked(internal[0].name, "the only network that is not external")]
    return [Picked(prompter.choose("network", "--network", [n.choice() for n in internal]), "chosen")]


def pick_security_groups(given: Sequence[str], groups: Sequence[Resource]) -> list[Picked]:
    if given:
        return [_existing("security group", "--security-group", name, groups) for name in given]
    preferred = _says_runner(groups)
    if len(preferred) == 1:
        return [Picked(preferred[0].name, f'the only security group whose name says "{RUNNER_WORD}"')]
    return []


def pick_optional(kind: str, flag: str, given: str | None, resources: Sequence[Resource]) -> Picked | None:
    return None if given is None else _existing(kind, flag, given, resources)


def parse_scope(given: str, flag: str = "--scope") -> ScopeConfig:
    kind, separator, target = given.partition(":")
    if separator and kind in ("org", "repo", "enterprise") and target:
        try:
            return ScopeConfig.model_validate({kind: target})
        except ValidationError:
            pass
    raise InitError(f"{flag} {given!r}: write it as {SCOPE_FORMS}")


def pick_scope_from_app(given: str | None, found: Installations, prompter: Prompter) -> Picked:
    """A scope the App's installations give; a flag's scope must belong to an account the App is on."""
    notes = "".join(f"\n  ({note})" for note in found.notes)
    if given is not None:
        scope = parse_scope(given)
        if not found.allows(scope.key):
            have = listing(found.scopes) or "    (none)"
            raise InitError(
                f"--scope {given!r}: no installation of the GitHub App reaches it; install the App there (on the "
                f"organisation, or on the repository), or use one of the scopes its installations give:\n{have}{notes}"
            )
        return Picked(scope.key, "--scope")
    if not found.scopes:
        raise InitError(
            "the GitHub App's installations give no scope: install the App on an organisation (or on repositories "
            f"of your account) in its settings, then run init again, or pass --scope ({SCOPE_FORMS}){notes}"
        )
    if len(found.scopes) == 1:
        return Picked(found.scopes[0].value, "the only scope the App's installations give")
    return Picked(prompter.choose("scope", "--scope", found.scopes), "chosen")


def pick_scope_for_token(given: str | None, prompter: Prompter) -> Picked:
    """With a token nothing lists where it reaches: the flag's scope, or the person's answer."""
    if given is not None:
        return Picked(parse_scope(given).key, "--scope")

    def check(answer: str) -> str | None:
        try:
            return parse_scope(answer).key
        except InitError:
            return None

    hint = f"a token cannot list what it reaches; write {SCOPE_FORMS}"
    return Picked(prompter.ask("scope", "--scope", hint, check), "typed")
