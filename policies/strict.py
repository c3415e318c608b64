"""The base of every policy model: strict (unknown keys are errors), frozen, finite."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    # allow_inf_nan=False: "inf", ".nan" or "1e999" (as text) is never a price or a limit
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False
    )


_Model = StrictModel
