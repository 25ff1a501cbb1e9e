"""The judge interface and registry. A judge sees the full case (gold included) and a response."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from agents.gateway import Gateway
from agents.response import SystemResponse
from benchmarks.case import Case
from benchmarks.named_registry import NamedRegistry


class JudgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str


class JudgeResult(BaseModel):
    judge: str
    score: float | None = Field(default=None, description="The judge's headline score on its own scale.")
    scale: str = Field(default="0-1", description="The range of `score`, e.g. 0-1 or 0-100.")
    details: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None


class Judge(ABC):
    name: ClassVar[str]
    config_model: ClassVar[type[JudgeConfig]]
    role: ClassVar[str] = "judge"

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config

    @abstractmethod
    async def judge(self, case: Case, response: SystemResponse, gateway: Gateway) -> JudgeResult:
        """Score `response` for `case`. A case the judge cannot score returns a result with `error`."""


JUDGES: NamedRegistry[type[Judge]] = NamedRegistry("judge", modules=("agents.judges.lampqa",))


def register_judge(cls: type[Judge]) -> type[Judge]:
    return JUDGES.register(cls.name, cls)


def create_judge(config: JudgeConfig | dict[str, Any]) -> Judge:
    if isinstance(config, dict):
        config = JUDGES.get(str(config.get("name"))).config_model.model_validate(config)
    return JUDGES.get(config.name)(config)
