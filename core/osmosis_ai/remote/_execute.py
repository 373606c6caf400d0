"""Run one agent loop to a :class:`RolloutResult`, turning every failure into data."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from osmosis_ai.errors import PolicyCallError
from osmosis_ai.remote._loop import (
    ChatFn,
    EventSink,
    RolloutAgentLoop,
    RolloutContext,
    RolloutLimitExceeded,
)
from osmosis_ai.remote._protocol import (
    RolloutRequest,
    RolloutResponse,
    RolloutResult,
    RolloutStatus,
)

__all__ = ["execute_rollout", "to_response"]

logger = logging.getLogger("osmosis")


async def execute_rollout(
    loop: RolloutAgentLoop,
    request: RolloutRequest,
    tools: list[dict[str, Any]],
    chat_fn: ChatFn,
    *,
    timeout_s: float | None = None,
    events: EventSink | None = None,
) -> RolloutResult:
    """Run ``loop.run`` for ``request`` and always return a result (never raises, except
    cancellation).

    - ``RolloutLimitExceeded`` (max_turns / max_tokens_total) → COMPLETED with that finish reason
      and the messages of the refused call;
    - a timeout, a failed LLM call or any exception in the loop → ERROR with the reason;
    - a return value that is not a ``RolloutResult`` → ERROR naming the type.
    """
    ctx = RolloutContext(request, tools, chat_fn, events=events)
    try:
        result: Any = await asyncio.wait_for(loop.run(ctx), timeout_s)
    except RolloutLimitExceeded as exc:
        result = ctx.complete(exc.messages, finish_reason=exc.reason)
    except TimeoutError:
        result = ctx.error(f"agent loop timed out after {timeout_s:g} s")
    except PolicyCallError as exc:
        result = ctx.error(f"LLM call failed: {exc}")
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the user's loop failed: report it, do not crash the server
        logger.debug("agent loop %s failed for rollout %s", loop.name, request.rollout_id, exc_info=True)
        result = ctx.error(f"agent loop raised {type(exc).__name__}: {exc}")
    if not isinstance(result, RolloutResult):
        result = ctx.error(
            f"{type(loop).__name__}.run() returned {type(result).__name__}; "
            "return ctx.complete(messages) or ctx.error(message)"
        )
    if result.metrics is None:
        result = result.model_copy(update={"metrics": ctx.finish_metrics()})
    if (
        ctx.limit_reason
        and result.status is RolloutStatus.COMPLETED
        and result.finish_reason in (None, "stop")
    ):
        # The loop caught the limit itself and finished; the trajectory is still truncated.
        result = result.model_copy(update={"finish_reason": ctx.limit_reason})
    return _ensure_json(result, ctx)


def _ensure_json(result: RolloutResult, ctx: RolloutContext) -> RolloutResult:
    try:
        json.dumps(result.model_dump(mode="json"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        return ctx.error(f"the rollout result is not plain JSON: {exc}", final_messages=[])
    return result


def to_response(rollout_id: str, result: RolloutResult) -> RolloutResponse:
    """The completion-callback body for ``result``."""
    return RolloutResponse(
        rollout_id=rollout_id,
        status=result.status,
        final_messages=result.final_messages,
        finish_reason=result.finish_reason,
        error_message=result.error_message,
        reward=result.reward,
        metrics=result.metrics,
        extra_fields=result.extra_fields,
    )
