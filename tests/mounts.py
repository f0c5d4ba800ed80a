"""Small file systems mounted by tests: read-only or nearly full, as a user meets them.

As root, file permissions stop nothing, so a read-only folder is a read-only mount;
a full disk is a small tmpfs. Mounting needs root (CI runs as root); elsewhere the
tests that use these skip and say why.
"""

import subprocess
from contextlib import contextmanager

import pytest


@contextmanager
def tmpfs(folder, size="1m"):
    """Mount a tmpfs of ``size`` at ``folder`` (created) for the block, or skip the
    test if this process may not mount. Yields a function that remounts it
    read-only, for a test that first writes files there."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        yield lambda: subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)
