"""The base of every config section: unknown keys are errors, assignments are validated."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Section"]


class Section(BaseModel):
    """A TOML section. Unknown keys are rejected; TOML types are taken as they are (strict)."""

    model_config = ConfigDict(
        extra="forbid", strict=True, validate_assignment=True, use_attribute_docstrings=True
    )
