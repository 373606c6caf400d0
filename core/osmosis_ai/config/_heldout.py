"""``[heldout]`` of a training config: compare the trained adapter with its base model at the end."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from osmosis_ai.config._base import Section

__all__ = ["HeldOutConfig"]

_SET_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
RESERVED_SET_NAMES = frozenset({"baseline", "warm", "traces"})
"""Folder names the eval runs use inside ``heldout/``; a held-out set cannot take them."""


class HeldOutConfig(Section):
    """``[heldout]``: after the last step, evaluate the final checkpoint and its base model on
    rows left out of training (``osmosis eval run --model RUN --baseline``), and show the paired
    difference with its 95% confidence interval on the run's end screen and in ``train info``.
    Each model runs as many rollouts at once as one training step did (the eval config's
    ``[evaluation] concurrency``, when set, instead).

    One file of held-out rows (``dataset``), or several named ones (``[heldout.datasets]``),
    each held out along its own axis (new phrasings, new orders, longer questions) and each
    reported on its own."""

    eval_config: str
    """The eval config that runs both models (``configs/eval/<name>.toml``: rollout, grader,
    timeouts, sampling), relative to the workspace root."""
    dataset: str | None = None
    """The held-out rows (relative to the workspace root; ``None``: the eval config's
    ``dataset``). They must not be rows the run trained on, or the comparison says nothing about
    generalisation."""
    datasets: dict[str, str] | None = None
    """Several held-out files, each evaluated and reported on its own, in this order: a table
    of name = file (``phrasings = "data/calc_heldout_phrasings.jsonl"``). Names are lowercase
    letters, digits, ``-`` and ``_``. Use instead of ``dataset``."""
    n: int = Field(default=1, ge=1, le=64)
    """Samples per row for each model (more narrows the interval; the eval takes ``n`` times
    as long)."""

    @field_validator("datasets")
    @classmethod
    def _names(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError('name at least one held-out file (name = "data/<file>.jsonl")')
        for name in value:
            if not _SET_NAME.match(name):
                raise ValueError(
                    f"{name!r} is not a held-out set name: use lowercase letters, digits, '-' "
                    "and '_' (at most 40)"
                )
            if name in RESERVED_SET_NAMES:
                raise ValueError(
                    f"{name!r} is the name of an eval folder inside heldout/; choose another name"
                )
        return value

    @model_validator(mode="after")
    def _one_form(self) -> HeldOutConfig:
        if self.dataset is not None and self.datasets is not None:
            raise ValueError(
                "give either dataset (one held-out file) or [heldout.datasets] (several), not both"
            )
        return self

    def named_datasets(self) -> list[tuple[str | None, str | None]]:
        """The held-out files in order, as (name, file): one unnamed entry for the ``dataset``
        form (``None`` for the file: the eval config's own dataset)."""
        if self.datasets is not None:
            return [(name, path) for name, path in self.datasets.items()]
        return [(None, self.dataset)]
