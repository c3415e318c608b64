"""The running provisioner's wheel in the job's checkpoint store, and the link a launch carries.

:func:`ensure_stored` puts the wheel at ``<checkpoint_uri>/.provisioner/wheels/<sha256>/
<filename>`` unless an object of its size is there already (``up`` and then the daemon at
each launch call it: the second call costs one look). :func:`link_for` makes the
:class:`WheelLink` of one launch: a fresh short-lived URL of that object
(:func:`provisioner.agentwheel.sign.signed_url`), its digest and its name. The boot script
gets nothing else: no credential, no name of the store beyond that one object.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from provisioner.agentwheel import WHEELS_DIR, WheelError, WheelLink
from provisioner.agentwheel.build import Wheel, running_wheel

#: how long a launch's URL reads the wheel: the boot script fetches it in its first minutes
#: (after Python is found or installed); an agent already installed fetches nothing again
URL_LIFETIME = timedelta(hours=2)


def wheel_uri(checkpoint_uri: str, wheel: Wheel) -> str:
    return f"{checkpoint_uri.rstrip('/')}/{WHEELS_DIR}/{wheel.sha256}/{wheel.filename}"


def ensure_stored(wheel: Wheel, checkpoint_uri: str) -> tuple[str, bool]:
    """Put ``wheel`` in the store unless it is there; (its URI, whether it was sent)."""
    from provisioner.objstore.fs import filesystem

    uri = wheel_uri(checkpoint_uri, wheel)
    try:
        fs, path = filesystem(uri)
        try:
            if int(fs.size(path)) == wheel.size:
                return uri, False
        except FileNotFoundError:
            pass
        parent = path.rsplit("/", 1)[0]
        fs.makedirs(parent, exist_ok=True)
        if uri.startswith("file://") or "://" not in uri:  # a rename: whole or not at all
            tmp = f"{parent}/.{uuid.uuid4().hex[:8]}.part"
            fs.put_file(str(wheel.path), tmp)
            os.replace(tmp, path)
        else:  # one PUT (or a multipart upload completed at once): whole or not at all
            fs.put_file(str(wheel.path), path)
    except WheelError:
        raise
    except Exception as exc:
        from providers.base import redact

        raise WheelError(
            f"cannot put the agent's wheel in {checkpoint_uri}: {type(exc).__name__}: "
            f"{redact(str(exc))}"
        ) from None
    return uri, True


def link_for(
    checkpoint_uri: str,
    now: datetime,
    *,
    wheel: Wheel | None = None,
    lifetime: timedelta = URL_LIFETIME,
    sign: Callable[[str, datetime, timedelta], str] | None = None,
) -> WheelLink:
    """The running version's wheel stored (if it was not) and a fresh URL to it, valid from
    ``now`` (the caller's clock) for ``lifetime``. Raises :class:`WheelError`."""
    from provisioner.agentwheel.sign import signed_url

    wheel = wheel or running_wheel()
    uri, _sent = ensure_stored(wheel, checkpoint_uri)
    url = (sign or signed_url)(uri, now, lifetime)
    return WheelLink(url, wheel.sha256, wheel.filename, now + lifetime)


def wanted(provider: str, options: Mapping[str, Any]) -> bool:
    """Whether a launch on ``provider`` with these options carries the running wheel: a
    cloud with our boot script, no ``package_spec`` and no ``agent_preinstalled``."""
    if provider == "sim" or options.get("agent_preinstalled") or options.get("package_spec"):
        return False
    from providers.facts import cloud_facts

    try:
        cloud_facts(provider)
    except (ValueError, TypeError):
        return False
    return True
