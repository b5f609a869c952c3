"""CDK (Python) infrastructure of hyperpod-dhc: the ``HyperPodDhc`` construct and its props, importable from here
(``from hyperpod_dhc.infra import HyperPodDhc, HyperPodDhcProps, parse_config``, defined in its ``construct``), and
the example app (``python -m hyperpod_dhc.infra.app``, see ``cdk.json``). One module per concern, kept flat.

The construct is imported on first use, not here, so a module of this package that needs no aws-cdk-lib does not
load it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

# The wheel also installs on 3.10, for its operator CLI; the construct needs 3.11 (tomllib, StrEnum).
if sys.version_info < (3, 11):  # noqa: UP036 (ruff assumes 3.11 for infra; the wheel allows 3.10)
    raise ImportError("hyperpod_dhc.infra (the HyperPodDhc construct) needs Python 3.11 or newer; hpdhc runs on 3.10")

if TYPE_CHECKING:
    from hyperpod_dhc.infra.construct import ConfigError, HyperPodDhc, HyperPodDhcProps, parse_config

__all__ = ["ConfigError", "HyperPodDhc", "HyperPodDhcProps", "parse_config"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from hyperpod_dhc.infra import construct

        return getattr(construct, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
