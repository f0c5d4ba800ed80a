"""Headless Chromium for the retrieval browser's tests (Debian's ``chromium``, driven
by Playwright; Playwright never downloads a browser of its own here).

A test that needs it is skipped, with its reason, where Playwright or Chromium is
missing; in CI (``NDIR_CI=1``, set by ``.ci/run``, which installs both) it fails instead.
"""

import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

from .conftest import import_or_skip

CHROMIUM = "/usr/bin/chromium"
#: Chromium without a sandbox (tests run as root in CI), a GPU or any network of its own.
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALL = "apt-get install -y chromium (Debian's package; .ci/run installs it)"


def chromium_path():
    """Chromium's executable: ``$NDIR_CHROMIUM``, :data:`CHROMIUM` or ``chromium`` on PATH."""
    for candidate in (os.environ.get("NDIR_CHROMIUM"), CHROMIUM, shutil.which("chromium")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


@contextmanager
def chromium():
    """A headless Chromium (a Playwright ``Browser``); skips (fails in CI) without one."""
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    sync_api = import_or_skip("playwright.sync_api", "Playwright drives the browser (pip install playwright)")
    path = chromium_path()
    if path is None:
        reason = f"no Chromium at {CHROMIUM}: {INSTALL}"
        if os.environ.get("NDIR_CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Opened:
    """A page of the browser opened from a folder, with what went wrong on it: console
    errors, uncaught exceptions, failed loads and every request that was not a file."""

    def __init__(self, browser, folder, hash="", viewport=(1280, 900)):
        self.errors, self.requests = [], []
        self.page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
        self.page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" else None)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("requestfailed", lambda request: self.errors.append(f"failed: {request.url}"))
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.url = (Path(folder).resolve() / "index.html").as_uri() + (f"#{hash}" if hash else "")
        self.page.goto(self.url)
        self.page.wait_for_function("window.NDIR_BROWSER && (window.NDIR_BROWSER.ready || window.NDIR_BROWSER.error)")

    def not_files(self):
        return [url for url in self.requests if not url.startswith("file://")]

    def state(self):
        """view|method|order|a|b, as the page last drew it."""
        return self.page.get_attribute("body", "data-state")

    def close(self):
        self.page.close()
