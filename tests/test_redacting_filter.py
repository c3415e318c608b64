"""The redacting log filter scrubs a registered secret from every record, whatever the
arguments are (strings, mappings for ``%(key)s``, exceptions), and never breaks formatting."""

from __future__ import annotations

import io
import logging

import pytest

from providers.base import RedactingFilter, register_secret

SECRET = "redact-me-7f3a9c"


@pytest.fixture
def logged() -> tuple[logging.Logger, io.StringIO]:
    register_secret(SECRET)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("test.redacting_filter")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield logger, stream
    logger.removeHandler(handler)
    logger.propagate = True


@pytest.mark.parametrize(
    ("msg", "args", "expected"),
    [
        ("token %s", (SECRET,), "token ***"),
        ("key %(k)s in %(where)s", ({"k": SECRET, "where": "env"},), "key *** in env"),
        ("failed: %s", (ValueError(f"bad {SECRET}"),), "failed: bad ***"),
        (f"inline {SECRET} %d", (3,), "inline *** 3"),
        ("no secret %s %d", ("here", 7), "no secret here 7"),
    ],
)
def test_every_kind_of_argument_is_scrubbed_and_still_formats(
    logged: tuple[logging.Logger, io.StringIO], msg: str, args: tuple[object, ...], expected: str
) -> None:
    logger, stream = logged
    logger.warning(msg, *args)
    out = stream.getvalue()
    assert out == expected + "\n"
    assert SECRET not in out
