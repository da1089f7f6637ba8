"""Declared secrets without STATEWISE_ENCRYPTION_KEY fail when the object is built (agent,
team, workflow, or a state_schema with a Secret field), not at a first commit deep in a
run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from statewise import Agent, Secret, Step, Team, Workflow
from statewise.exceptions import SecretsError
from statewise.models import FunctionModel


class Vault(BaseModel):
    token: Annotated[str | None, Secret()] = None


def _model() -> FunctionModel:
    return FunctionModel(lambda messages, info: "ok")


BUILDERS: list[Callable[[], Any]] = [
    lambda: Agent(model=_model(), secret_keys=["api_token"]),
    lambda: Agent(model=_model(), state_schema=Vault),
    lambda: Team(model=_model(), members=[Agent(model=_model())], secret_keys=["api_token"]),
    lambda: Workflow(steps=[Step(name="s", executor=lambda step_input: "x")], secret_keys=["k"]),
]


@pytest.mark.parametrize("build", BUILDERS, ids=["agent", "schema", "team", "workflow"])
def test_secrets_without_a_key_fail_at_build(
    build: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STATEWISE_ENCRYPTION_KEY", raising=False)
    with pytest.raises(SecretsError, match=r"\$STATEWISE_ENCRYPTION_KEY"):
        build()
    from cryptography.fernet import Fernet

    monkeypatch.setenv("STATEWISE_ENCRYPTION_KEY", Fernet.generate_key().decode())
    build()


def test_no_secrets_need_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATEWISE_ENCRYPTION_KEY", raising=False)
    assert Agent(model=_model()).run("hi").content == "ok"
