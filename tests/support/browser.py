"""The browser the console tests drive: Debian's Chromium, found on the PATH."""

from __future__ import annotations

import shutil


def chromium_binary() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found is not None, "Debian's chromium is required (.ci/run installs it); this test never skips"
    return found
