"""Every name of osmosis-ai 0.3's (and 0.2's) public surface imports from its canonical path.

Issue 39 §1. Framework paths are checked in tests/integrations/test_original03_integrations.py.
"""

from __future__ import annotations

import importlib

import pytest

NAMES: dict[str, list[str]] = {
    "osmosis_ai.rollout.agent_workflow": ["AgentWorkflow"],
    "osmosis_ai.rollout.context": [
        "AgentWorkflowContext",
        "GraderContext",
        "RolloutContext",
        "SampleSource",
        "get_rollout_context",
    ],
    "osmosis_ai.rollout.grader": ["Grader"],
    "osmosis_ai.rollout.types": [
        "AgentWorkflowConfig",
        "AgentWorkflowOutput",
        "BaseConfig",
        "ConcurrencyConfig",
        "ExecutionRequest",
        "ExecutionResult",
        "GraderConfig",
        "MessageDict",
        "Messages",
        "RolloutErrorCategory",
        "RolloutSample",
        "RolloutStatus",
        "SampleSource",
    ],
    "osmosis_ai.rollout.backend": ["ExecutionBackend", "LocalBackend", "ResultCallback"],
    "osmosis_ai.rollout.backend.local": ["LocalBackend"],
    "osmosis_ai.rollout.server": ["ControllerAuth", "create_rollout_server"],
    "osmosis_ai.rollout": [
        "AgentWorkflow",
        "AgentWorkflowConfig",
        "AgentWorkflowContext",
        "AgentWorkflowOutput",
        "BaseConfig",
        "ConcurrencyConfig",
        "ExecutionBackend",
        "ExecutionRequest",
        "ExecutionResult",
        "Grader",
        "GraderConfig",
        "GraderContext",
        "LocalBackend",
        "MessageDict",
        "RolloutErrorCategory",
        "RolloutSample",
        "RolloutStatus",
        "get_rollout_context",
    ],
    "osmosis_ai": [
        "evaluate_rubric",
        "RubricResult",
        "MissingAPIKeyError",
        "ModelNotFoundError",
        "ProviderRequestError",
        "osmosis_reward",
        "osmosis_rubric",
    ],
    "osmosis_ai.rollout.core": [
        "RolloutAgentLoop",
        "RolloutContext",
        "RolloutRequest",
        "RolloutResult",
        "RolloutMetrics",
        "InitResponse",
        "CompletionsResult",
    ],
    "osmosis_ai.rollout.tools": [
        "create_tool_result",
        "serialize_tool_result",
        "parse_tool_arguments",
        "get_tool_call_info",
        "execute_tool_calls",
        "create_tool_error_result",
    ],
    "osmosis_ai.remote": ["create_app"],
}


@pytest.mark.parametrize(
    ("module", "name"), [(m, n) for m, names in NAMES.items() for n in names]
)
def test_name_imports_from_its_0_3_path(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is not None


def test_faces_are_the_core_objects_not_copies() -> None:
    import osmosis_ai.rollout as rollout
    from osmosis_ai.rollout import agent_workflow, context, grader, types

    assert agent_workflow.AgentWorkflow is rollout.AgentWorkflow
    assert grader.Grader is rollout.Grader
    assert context.AgentWorkflowContext is rollout.AgentWorkflowContext
    assert context.GraderContext is rollout.GraderContext
    assert types.RolloutSample is rollout.RolloutSample
    assert types.AgentWorkflowConfig is rollout.AgentWorkflowConfig
    assert types.RolloutErrorCategory is rollout.ErrorCategory


def test_the_seeds_rollout_context_keeps_its_meaning() -> None:
    """osmosis_ai.rollout.RolloutContext stays the remote agent loop's context (seed 002)."""
    import osmosis_ai.remote
    import osmosis_ai.rollout
    import osmosis_ai.rollout.context

    assert osmosis_ai.rollout.RolloutContext is osmosis_ai.remote.RolloutContext
    assert osmosis_ai.rollout.context.RolloutContext is not osmosis_ai.rollout.RolloutContext


@pytest.mark.parametrize(
    ("module", "name", "says"),
    [
        ("osmosis_ai.rollout.types", "GraderInitRequest", "hosted-controller wire protocol"),
        ("osmosis_ai.rollout", "RolloutInitRequest", "osmosis eval run"),
        ("osmosis_ai.rollout.core", "OpenAIFunctionToolSchema", "plain OpenAI function-tool"),
        ("osmosis_ai.rollout.core", "OsmosisLLMClient", "RolloutContext.chat"),
    ],
)
def test_a_0_3_name_we_do_not_have_says_where_its_job_is_done(
    module: str, name: str, says: str
) -> None:
    with pytest.raises(ImportError, match=says):
        exec(f"from {module} import {name}", {})  # noqa: S102 - the import statement itself


def test_an_unknown_name_is_a_plain_attribute_error() -> None:
    import osmosis_ai.rollout

    assert not hasattr(osmosis_ai.rollout, "NoSuchThing")
