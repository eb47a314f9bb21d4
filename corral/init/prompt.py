"""Asking what init could not find out: a numbered menu on a terminal, or, when nobody is there to answer
(`--non-interactive`, or stdin is not a terminal), an error naming the flag that answers it and listing
the choices, so a script can be fixed by reading one message.

The streams are parameters so a test (or a pseudo-terminal) can drive the menu through what it types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from corral.init.errors import InitError

MAX_ATTEMPTS = 5
"""Wrong answers tolerated before init gives up (a runaway pipe must not loop for ever)."""


@dataclass(frozen=True)
class Choice:
    """One candidate: `value` is what goes into the config, `detail` helps a person tell them apart."""

    value: str
    detail: str = ""


def listing(choices: Sequence[Choice]) -> str:
    """The choices one a line, values aligned, for menus and error messages alike."""
    width = max((len(choice.value) for choice in choices), default=0)
    return "\n".join(f"    {choice.value:<{width}}  {choice.detail}".rstrip() for choice in choices)


class Prompter:
    """Asks through `stdin`/`stdout` when `interactive`; otherwise every question is an InitError."""

    def __init__(self, *, interactive: bool, stdin: TextIO, stdout: TextIO) -> None:
        self.interactive = interactive
        self._stdin = stdin
        self._stdout = stdout

    def choose(self, what: str, flag: str, choices: Sequence[Choice]) -> str:
        """One of `choices` (by its number or its value), or InitError naming `flag` when nobody can answer."""
        if not self.interactive:
            raise InitError(
                f"{len(choices)} {what}s to choose from and no rule picks one: pass {flag} with one of\n"
                f"{listing(choices)}"
            )
        width = len(str(len(choices)))
        menu = "\n".join(
            f"  {number:>{width}}) {line.strip()}" for number, line in enumerate(listing(choices).splitlines(), start=1)
        )
        self._say(f"Which {what}? (next time, {flag} answers this)\n{menu}")
        values = [choice.value for choice in choices]

        def check(answer: str) -> str | None:
            if answer.isdigit() and 1 <= int(answer) <= len(choices):
                return values[int(answer) - 1]
            return answer if answer in values else None

        return self._ask_until(f"{what} [1-{len(choices)}]: ", flag, what, check, f"a number from 1 to {len(choices)}")

    def ask(self, what: str, flag: str, hint: str, check: Callable[[str], str | None]) -> str:
        """Free text that `check` accepts (it returns the value to use, or None to ask again)."""
        if not self.interactive:
            raise InitError(f"no {what} could be found: pass {flag} ({hint})")
        return self._ask_until(f"{what} ({hint}): ", flag, what, check, hint)

    def _ask_until(self, question: str, flag: str, what: str, check: Callable[[str], str | None], hint: str) -> str:
        for _ in range(MAX_ATTEMPTS):
            self._stdout.write(question)
            self._stdout.flush()
            line = self._stdin.readline()
            if not line:
                raise InitError(f"no answer for the {what} (end of input); pass {flag}")
            value = check(line.strip())
            if value is not None:
                return value
            self._say(f"  {line.strip()!r} is not one of the choices; answer with {hint}")
        raise InitError(f"no usable answer for the {what} after {MAX_ATTEMPTS} tries; pass {flag}")

    def _say(self, text: str) -> None:
        self._stdout.write(text + "\n")
        self._stdout.flush()
