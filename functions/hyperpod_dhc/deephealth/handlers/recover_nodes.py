"""RecoverNodes: the round workflow's "Recover nodes" step (and "Recover decided nodes", "Recover before check")."""

from hyperpod_dhc.deephealth.handlers.round_step import round_step
from hyperpod_dhc.deephealth.settings import RecoverNodesSettings
from hyperpod_dhc.deephealth.usecases.recover_nodes import recover_nodes

lambda_handler = round_step(RecoverNodesSettings, recover_nodes)
