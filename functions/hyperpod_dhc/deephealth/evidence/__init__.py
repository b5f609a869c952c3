"""Evidence: what a cluster's `DeepHealthCheckResults/*` log events prove about each node's deep health check.

One pipeline, used by the controller (`domain/observe.py`) and offline by `hpdhc readings classify`:
events (`records.Event`) -> records (`records.assemble`: a multi-line record rebuilt from the events of one
stream) -> findings (`classify.classify`: pass, failure, neutral or unrecognised, and the rule that said so) ->
one node's evidence (`attribute`: only the node's own stream speaks for it, within its check window) -> a proof
(`judge.prove`). `capture` holds one node's judge inputs as a JSON document.

Standard library only (and `google-re2` for the patterns operators add), Python 3.10: the operator CLI imports it
on the cluster's Python, without pydantic.
"""
