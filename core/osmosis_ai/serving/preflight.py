"""Checks that a hosted model or a server can answer at all, before the first row runs.

Without them, ``osmosis eval run --model openai/gpt-4o-mini`` with no ``OPENAI_API_KEY`` runs
every row to a 502 ("Missing credentials") and reports each one as an agent error. A missing
key or an unreachable server is one clear line instead, before anything is written.
"""

from __future__ import annotations

import os

import httpx

from osmosis_ai.config import redact_url, redact_urls
from osmosis_ai.errors import ConfigError

__all__ = ["check_model_reachable"]


def _is_local(spec: str) -> bool:
    from osmosis_ai.serving._factory import EMBEDDED_ALIASES

    return spec in EMBEDDED_ALIASES or os.path.isdir(os.path.expanduser(spec))


def _missing_keys(model: str) -> list[str]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch at import
    try:
        import litellm
    except ImportError:  # the engine itself reports the missing extra with its pip command
        return []
    try:
        report = litellm.validate_environment(model=model)
    except Exception:  # an id LiteLLM cannot map: let the first call say what is wrong
        return []
    missing = report.get("missing_keys") or []
    return [str(key) for key in missing]


def _check_server(url: str, timeout: float) -> None:
    base = url.rstrip("/")
    try:
        # Any HTTP answer (even 401/404) means something listens there.
        httpx.get(f"{base}/models", timeout=timeout)
    except httpx.HTTPError as exc:
        reason = redact_urls(str(exc)) or type(exc).__name__
        raise ConfigError(
            f"cannot reach the model server {redact_url(url)}: {reason}. Start the server, or "
            "fix the URL "
            "in --model / model_path."
        ) from None


def check_model_reachable(model: str, *, timeout: float = 5.0) -> None:
    """Raise :class:`~osmosis_ai.errors.ConfigError` when ``model`` cannot possibly answer.

    - a local model (``embedded`` or a folder): nothing to check here;
    - an ``http(s)://`` server: it must accept a connection;
    - a LiteLLM id: the provider's credentials must be in the environment (LiteLLM says which).
    """
    spec = model.strip()
    if _is_local(spec):
        return
    if spec.startswith(("http://", "https://")):
        _check_server(spec, timeout)
        return
    missing = _missing_keys(spec)
    if missing:
        names = " and ".join(missing)
        raise ConfigError(
            f"model {spec!r} needs {names} in the environment, and it is not set. "
            f"Export it (export {missing[0]}=...) or use a local model (--model embedded)."
        )
