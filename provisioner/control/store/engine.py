"""The store's engine and sessions: the URL, the connection setup, the migrations.

SQLite (WAL) in the XDG state directory by default, for one controller; PostgreSQL for several
daemon replicas (``postgresql+psycopg://...``). The schema is created and upgraded by Alembic.

Opening a store whose schema is already at :data:`SCHEMA_HEAD` runs one query and never
loads Alembic (every CLI command opens the store: Alembic and its revision files cost some
0.15 s of a command's start). A new SQLite file is migrated by Alembic the first time in a
process; later new files in that process get the schema those migrations left, copied
statement by statement from ``sqlite_master`` (the same SQL, a tenth of the time).
"""

from __future__ import annotations

import os
import re
import secrets
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.attributes import set_committed_value

from provisioner.core.states import JobState

#: the job states the store filters by, as stored (the transition table's, provisioner.core.states)
ACTIVE_STATES = tuple(s.value for s in JobState if not s.final)
FINAL_STATES = tuple(s.value for s in JobState if s.final)


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "provisioner"


def default_url() -> str:
    url = os.environ.get("PROVISIONER_STORE")
    if url:
        return url
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{d / 'provisioner.db'}"


def as_aware(dt: datetime | None) -> datetime | None:
    """SQLite hands datetimes back naive; they were stored in UTC."""
    if dt is not None and dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt


def new_job_id(name: str) -> str:
    safe = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")[:32] or "job"
    return f"{safe}-{secrets.token_hex(3)}"


def redacted_url(url: str) -> str:
    """The URL with any password replaced, for messages and logs (a text that is no URL is
    shown as given, a ``user:password@`` in it masked)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return re.sub(r"(://[^/:@\s]+):[^@/\s]+@", r"\1:***@", url)


def sqlite_file(url: str) -> str | None:
    """The path of the SQLite file ``url`` names, or None (another database, an in-memory
    or ``file:`` URI store, or a URL that does not parse: opening it says what is wrong)."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:
        return None
    if parsed.get_backend_name() != "sqlite":
        return None
    path = parsed.database or ""
    return None if path in ("", ":memory:") or path.startswith("file:") else path


def store_missing(url: str) -> str | None:
    """Why ``url`` names no store yet (a SQLite file that is not there), or None. Read-only
    commands ask before they open one, so that a typo never creates an empty store."""
    path = sqlite_file(url)
    if path is not None and not os.path.exists(path):
        return f"no store at {path}: nothing was submitted there"
    return None


def chunked(items: Sequence[Any], size: int = 5000) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


#: the newest revision in provisioner/control/migrations/versions (tests/control/store keeps it
#: Alembic's head): a store already there opens without Alembic
SCHEMA_HEAD = "0012_attempt_reservation"


class _SqliteSchema:
    """The schema Alembic's migrations left in a new SQLite file, read back once a process:
    the ``CREATE`` statements (tables, then indexes, triggers and views, each in the order
    made) and the version rows. A later new SQLite file gets the same statements."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._statements: list[str] | None = None
        self._versions: list[str] = []

    @staticmethod
    def is_empty(conn: Any) -> bool:
        """No table of ours in the SQLite database on ``conn``."""
        found = conn.exec_driver_sql(
            "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite%'"
        ).scalar()
        return not found

    def keep(self, conn: Any) -> None:
        """Read the schema of the database on ``conn`` (just migrated from empty to head)."""
        rows = conn.exec_driver_sql(
            "SELECT type, sql FROM sqlite_master WHERE sql IS NOT NULL"
            " AND name NOT LIKE 'sqlite%' ORDER BY rowid"
        ).all()
        order = {"table": 0, "index": 1, "trigger": 2, "view": 3}
        statements = [sql for kind, sql in sorted(rows, key=lambda r: order.get(r[0], 4))]
        versions = [v for (v,) in conn.exec_driver_sql("SELECT version_num FROM alembic_version")]
        with self._lock:
            if self._statements is None and versions == [SCHEMA_HEAD]:
                self._statements, self._versions = statements, versions

    def apply(self, conn: Any) -> bool:
        """Make the kept schema on ``conn``'s empty database; False when none is kept yet."""
        with self._lock:
            statements, versions = self._statements, self._versions
        if statements is None:
            return False
        for sql in statements:
            conn.exec_driver_sql(sql)
        for version in versions:
            conn.exec_driver_sql("INSERT INTO alembic_version (version_num) VALUES (?)", (version,))
        return True


_sqlite_schema = _SqliteSchema()


@contextmanager
def _migration_lock(url: str) -> Iterator[None]:
    """For a SQLite file: one process at a time creates or upgrades its schema. SQLite runs
    Alembic's DDL outside a transaction, so two processes opening a new store together (``up``
    and the daemon, two CLI calls) would both create the tables and one would fail; the second
    waits here and then finds the schema at head. PostgreSQL takes an advisory lock instead.
    Where no lock file can be made beside the store, SQLite's own error says what is wrong."""
    path = sqlite_file(url)
    if path is None:
        yield
        return
    import fcntl

    try:
        fd = os.open(f"{path}.migrate-lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


class StoreBase:
    """The engine, the session factory and the row fix-up that every table's queries use."""

    def __init__(self, url: str | None = None, *, migrate: bool = True) -> None:
        self.url = url or default_url()
        self.engine: Engine = self._engine(self.url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        if migrate:
            self.migrate()

    @property
    def is_postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    @staticmethod
    def _engine(url: str) -> Engine:
        if url.startswith("sqlite"):
            engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

            @event.listens_for(engine, "connect")
            def _pragmas(dbapi_conn: Any, _record: Any) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.execute("PRAGMA busy_timeout=30000")
                cur.close()

            return engine
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)

    def migrate(self, revision: str = "head") -> None:
        """Create or upgrade the schema to ``revision`` (the newest by default; safe to run
        concurrently). At head already: one query, and Alembic is not loaded."""
        if revision == "head" and self.schema_revision() == SCHEMA_HEAD:
            return
        with _migration_lock(self.url), self.engine.begin() as conn:
            if self.is_postgres:
                from sqlalchemy import text

                conn.execute(text("SELECT pg_advisory_xact_lock(727001)"))
            new_sqlite = (
                revision == "head"
                and self.engine.dialect.name == "sqlite"
                and _sqlite_schema.is_empty(conn)
            )
            if new_sqlite and _sqlite_schema.apply(conn):
                return
            self._alembic_upgrade(conn, revision)
            if new_sqlite:
                _sqlite_schema.keep(conn)

    @staticmethod
    def _alembic_upgrade(conn: Any, revision: str) -> None:
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option(
            "script_location", str(Path(__file__).resolve().parents[1] / "migrations")
        )
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)

    def schema_revision(self) -> str | None:
        """The schema's revision as the store records it, or None (a new database, or one
        that cannot be read: the migration then says what is wrong)."""
        from sqlalchemy.exc import DBAPIError

        try:
            with self.engine.connect() as conn:
                rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
        except DBAPIError:
            return None
        return rows[0][0] if len(rows) == 1 else None

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions.begin() as s:
            yield s

    @staticmethod
    def _fix(row: Any) -> Any:
        if row is None:
            return None
        for attr in (
            "submitted_at",
            "updated_at",
            "deadline",
            "lease_until",
            "created_at",
            "launched_at",
            "ended_at",
            "last_seen_at",
            "at",
            "changed_at",
            "until",
        ):
            if hasattr(row, attr):
                # as loaded, not as a change: the row must not be written back on commit
                set_committed_value(row, attr, as_aware(getattr(row, attr)))
        return row
