"""Rows as an older schema had them, for the migration tests (the ORM writes today's columns)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import text


def insert_legacy_job(
    conn: Any,
    job_id: str,
    at: datetime,
    *,
    policy_yaml: str = "name: x\n",
    workdir: str | None = None,
    provider: str = "aws",
    state: str = "pending",
) -> str:
    """A job row with the columns of migration 0001 only (every revision before 0005)."""
    conn.execute(
        text(
            "INSERT INTO jobs (id, name, policy_yaml, workdir, provider, provider_options, "
            "state, submitted_at, updated_at, attempt, restarts, spent_usd, work_done_h, "
            "progress, result, reason, cancel_requested, version) VALUES (:id, 'old', :p, "
            ":w, :prov, '{}', :s, :t, :t, 0, 0, 0, 0, '{}', '{}', '', false, 0)"
        ),
        {"id": job_id, "p": policy_yaml, "w": workdir, "prov": provider, "s": state, "t": at},
    )
    return job_id
