#!/usr/bin/env bash
# Install the agent frameworks and OpenTelemetry instrumentations the integration tests
# (tests/integrations) run offline: LangGraph and langchain's create_agent with OpenInference's LangChain
# instrumentation, and the OpenAI Agents SDK with OpenInference's openai-agents instrumentation; the
# Anthropic SDK's message types check that compacted plain-loop histories are still valid requests.
# langchain-core stays below 1.8: 1.8.x requires a certifi release newer than the index offers.
set -euo pipefail
exec bash "$(dirname "$0")/pip-install-pinned.sh" integrations-install \
    "langgraph==1.2.22" \
    "langgraph-prebuilt==1.1.2" \
    "langchain-core==1.7.2" \
    "openinference-instrumentation-langchain==0.1.80" \
    "openai-agents==0.24.0" \
    "openinference-instrumentation-openai-agents==2.6.0" \
    "anthropic==1.17.0" \
    "langchain==1.4.7"
