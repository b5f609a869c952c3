"""CDK (Python) infrastructure of hyperpod-dhc: the ``HyperPodDhc`` construct (``infra.hyperpod_dhc``) and its example
app (``infra.app``; ``python -m infra.app`` from the repository root, see ``cdk.json``).

One module per concern, kept flat on purpose: a sub-package named ``constructs`` here would shadow the ``constructs``
library. Installed from the wheel (``hyperpod-dhc[cdk]``) this is a top-level ``infra`` package: an app with an
``infra`` package of its own shadows it (the first on ``sys.path`` wins), so such an app imports neither cleanly.
"""

import sys

# The wheel also installs on 3.10, for its operator CLI; the construct needs 3.11 (tomllib, StrEnum).
if sys.version_info < (3, 11):  # noqa: UP036 (ruff assumes 3.11 for infra; the wheel allows 3.10)
    raise ImportError("infra (the HyperPodDhc construct) needs Python 3.11 or newer; the wheel's hpdhc runs on 3.10")
