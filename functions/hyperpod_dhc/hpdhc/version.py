"""The release this code is: pyproject.toml's ``version``, the one place it is written, read back from the installed
distribution's metadata (``hpdhc --version``; ``make release`` names the bundle with it)."""

from __future__ import annotations

import importlib.metadata

DISTRIBUTION = "hyperpod-dhc"
UNKNOWN = "unknown (not installed: pip install . or make install)"


def version() -> str:
    """The installed ``hyperpod-dhc`` distribution's version; ``UNKNOWN`` when it is not installed (a bare checkout
    on ``PYTHONPATH``)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN
