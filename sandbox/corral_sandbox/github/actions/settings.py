"""The scale-set side's timings and switches, settable per sandbox and through `/_sandbox/scalesets/settings`."""

from __future__ import annotations

from dataclasses import dataclass

MAX_REQUEUES = 3
"""A job whose assigned runner never picks it up is canceled for that attempt and requeued this many times at
most; when the next assignment is not picked up either, the job fails (the protocol reference: "requeued, up to
three times")."""

MESSAGE_BATCH = 50
"""Job messages one queue message carries at most (the reference: "an array of up to 50 job messages")."""

REGISTRATION_TOKEN_TTL_S = 3600
"""A registration token (`.../actions/runners/registration-token`) is valid for an hour, as its `expires_at` says."""


@dataclass
class ActionsSettings:
    """How the Actions service behaves; every field can be changed at run time.

    GitHub documents none of these durations. The defaults are chosen so a client written against them also
    copes with GitHub: the admin token lives an hour (the Go client reads its `exp` and renews a minute
    early); the message long poll is held about 50 s, as GitHub holds it; a session whose owner stops polling
    is dropped after two minutes, inside the window in which GitHub's own clients retry a 409 (the Go
    listener 10 x 30 s, the runner 240 s) and so short enough that a restarted listener gets in.
    """

    requires_acquire: bool = False
    """GitHub Enterprise Server's behaviour: a job is announced (`JobAvailable`) and assigned to a scale set
    only once the set acquires it. Off, as on github.com: jobs are assigned (`JobAssigned`) without it."""
    admin_token_ttl_s: float = 3600.0
    """Lifetime of the admin JWT the registration exchange hands out (its `exp`)."""
    queue_token_ttl_s: float = 3600.0
    """Lifetime of a session's `messageQueueAccessToken`; `PATCH .../sessions/{id}` issues a fresh one."""
    session_expiry_s: float = 120.0
    """A session nobody has polled for this long is dropped (until then a second session gets 409)."""
    long_poll_s: float = 50.0
    """How long a message poll is held before it answers 202 (nothing arrived)."""
    reassign_after_s: float = 120.0
    """How long GitHub waits for a runner it assigned a job to before canceling that attempt and requeuing."""
