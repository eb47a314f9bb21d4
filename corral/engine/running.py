"""What every part of the engine reads and a reload swaps: the configuration in force, its generation and
user-data template, and the pools operators drained.

One object, shared by reference: the parts read `running.config` when they act, never a copy taken when they
were built, so a reload (`Reconfigurer.apply`) that swaps config, generation and template in one step with no
await between them is seen whole by every part at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from string import Template

from corral.config import CorralConfig


@dataclass
class Running:
    config: CorralConfig
    template: Template
    generation: int = 1
    """Bumped by each reload; a pool's status says which generation its last pass applied."""
    drained: set[str] = field(default_factory=set)
    """Pools operators drained, as the store last said (on any replica)."""
