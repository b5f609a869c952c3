"""RecoverNodes: the round workflow's "Recover nodes" step."""

from deephealth.handlers.round_step import round_step
from deephealth.settings import RecoverNodesSettings
from deephealth.usecases.recover_nodes import recover_nodes

lambda_handler = round_step(RecoverNodesSettings, recover_nodes)
