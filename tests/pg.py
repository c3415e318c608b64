"""A fresh PostgreSQL database per test on the machine's server (127.0.0.1:5432)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

PG_ADMIN = os.environ.get(
    "PROVISIONER_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def pg_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(
            "host=127.0.0.1 port=5432 user=postgres dbname=postgres", connect_timeout=3
        ):
            return True
    except Exception:
        return False


@contextmanager
def fresh_database() -> Iterator[str]:
    import psycopg

    if not pg_available():
        pytest.skip("PostgreSQL is not running on 127.0.0.1:5432 (.ci/run starts it)")
    name = f"prov_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(
        "host=127.0.0.1 port=5432 user=postgres dbname=postgres", autocommit=True
    ) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(
            "host=127.0.0.1 port=5432 user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
