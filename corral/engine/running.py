"""What every part of the engine reads and a reload swaps: the configuration in force, its generation and
user-data template, and the pools operators drained.

One object, shared by reference and handed to each part that needs it (no closures over it). A reload
(`Reconfigurer.apply`) swaps config, generation and template in one step with no await between them. A pool's
pass takes `running.read()` once and decides from that frozen view to the end, so it never sees a reload
half-way; the other parts read `running.config` for the one value they need at the moment they act.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from string import Template

from corral.config import CorralConfig


@dataclass(frozen=True)
class RunningView:
    """The running configuration as one operation reads it: nothing in it changes under the reader."""

    config: CorralConfig
    template: Template
    generation: int
    drained: frozenset[str]


@dataclass
class Running:
    config: CorralConfig
    template: Template = field(default_factory=lambda: Template(""))
    generation: int = 1
    """Bumped by each reload; a pool's status says which generation its last pass applied."""
    drained: set[str] = field(default_factory=set)
    """Pools operators drained, as the store last said (on any replica)."""

    def set_drained(self, pool: str, drained: bool) -> None:
        """An operator's drain (or undrain) of the pool, heard here or from another replica."""
        (self.drained.add if drained else self.drained.discard)(pool)

    def read(self) -> RunningView:
        """A frozen view for one operation (read with no await, so it is one generation's whole)."""
        return RunningView(self.config, self.template, self.generation, frozenset(self.drained))
