"""One typed settings model per Lambda, read from the environment once at cold start.

A missing or empty variable fails the cold start with a message naming it, instead of a KeyError
halfway through a round.
"""

from __future__ import annotations

import functools
import os

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    TABLE_NAME: str = Field(min_length=1)
    CONFIG_PARAMETER_NAME: str = Field(min_length=1)
    NOTIFICATIONS_TOPIC_ARN: str | None = Field(default=None, pattern=r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:.+$")


class _StartsRounds(_Settings):
    ROUND_STATE_MACHINE_ARN: str = Field(pattern=r"^arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}:stateMachine:.+$")


class IntakeSettings(_StartsRounds):
    pass


class ReconcileSettings(_StartsRounds):
    pass


class FinishRoundSettings(_StartsRounds):
    pass


class ApiSettings(_StartsRounds):
    pass


class ClaimRoundSettings(_Settings):
    pass


class StartCheckSettings(_Settings):
    pass


class PollCheckSettings(_Settings):
    pass


class RecoverNodesSettings(_Settings):
    pass


class SettingsError(RuntimeError):
    pass


@functools.cache
def load(model: type[_Settings]) -> _Settings:
    try:
        return model.model_validate(dict(os.environ))
    except ValidationError as err:
        names = ", ".join(".".join(str(p) for p in e["loc"]) for e in err.errors())
        raise SettingsError(f"{model.__name__}: missing or invalid environment variables: {names}") from None
