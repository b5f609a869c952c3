"""RecoverNodes: the round workflow's "Recover nodes" step."""

from deephealth.controller import Controller
from deephealth.handlers.round_step import round_step
from deephealth.settings import RecoverNodesSettings

lambda_handler = round_step(RecoverNodesSettings, Controller.recover_nodes)
