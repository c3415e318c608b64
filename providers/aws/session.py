"""botocore sessions that share the process's one loader of service models.

Every boto3 session builds its own loader, and a loader parses the JSON of each service model
(EC2's is several megabytes) and of the endpoint list the first time it is asked: about a third
of a second for every adapter, S3 filesystem or secrets client made. Models and endpoints are
read-only data, so one loader serves every session of the process; credentials, regions and
configuration stay each session's own. botocore is imported when a session is made.
"""

from __future__ import annotations

import threading
from typing import Any

_loader: Any = None
_loader_lock = threading.Lock()


def botocore_session() -> Any:
    """A new botocore session reading the service models through the process's one loader
    (made by the first session, with that session's data path)."""
    import botocore.session
    from botocore.loaders import create_loader

    global _loader
    session = botocore.session.Session()
    with _loader_lock:
        if _loader is None:
            _loader = create_loader(session.get_config_variable("data_path"))
        session.register_component("data_loader", _loader)
    return session


def boto3_session(**kwargs: Any) -> Any:
    """``boto3.session.Session(**kwargs)`` over :func:`botocore_session`."""
    import boto3

    return boto3.session.Session(botocore_session=botocore_session(), **kwargs)
