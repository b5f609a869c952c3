"""CDK (Python) infrastructure of hyperpod-dhc.

Run as ``python -m infra.app`` from the repository root (see ``cdk.json``). One module per concern,
kept flat on purpose: a sub-package named ``constructs`` here would shadow the ``constructs`` library.
"""
