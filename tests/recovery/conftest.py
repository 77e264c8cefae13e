"""Real ``openai`` and ``anthropic`` clients pointed at the wire-format server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest

from otel_errcompact.wire_server import ModelWireServer, serve


@pytest.fixture
def wire() -> Iterator[tuple[ModelWireServer, str]]:
    with serve() as pair:
        yield pair


@pytest.fixture
def openai_client(wire: tuple[ModelWireServer, str]) -> openai.OpenAI:
    # max_retries=0: the recovery under test decides about retries, not the SDK (see the README).
    return openai.OpenAI(api_key="sk-test", base_url=wire[1] + "/v1", max_retries=0)


@pytest.fixture
def anthropic_client(wire: tuple[ModelWireServer, str]) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="sk-ant-test", base_url=wire[1], max_retries=0)
