"""Headless Chromium driven with Playwright (its sync API), to use the dashboard as a person does.

`--dump-dom` can only load a URL, and the dashboard takes no token from a URL: a test has to type the token
into the sign-in form and submit it. Playwright drives the Chromium on PATH (Debian's `chromium`, through
`executable_path`): it never downloads a browser of its own, and its driver comes in its wheel. Tests wait on
the page's own state with Playwright's auto-waiting actions and `expect`, never on time.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import BrowserContext, sync_playwright
from playwright.sync_api import expect as expect

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM = next((path for path in map(shutil.which, CHROMIUM_NAMES) if path), None)
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
WAIT_MS = 20_000
"""How long an action or an `expect` waits on the page before the test fails. Playwright's own default for
`expect` is 5 s: short for a page that fetches from a corral on two busy cores."""

expect.set_options(timeout=WAIT_MS)


@contextlib.contextmanager
def browser(profile: Path) -> Iterator[BrowserContext]:
    """A headless Chromium with its own profile for the block, closed after it whatever happened (stopping
    Playwright's driver kills a browser that did not close)."""
    if CHROMIUM is None:
        raise RuntimeError("headless Chromium is not installed (bash scripts/chromium.sh)")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=list(CHROMIUM_FLAGS)
        )
        context.set_default_timeout(WAIT_MS)
        try:
            yield context
        finally:
            context.close()
