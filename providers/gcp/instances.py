"""GCP instances: describe, get, list by label, terminate, preemptions and their operations.

Compute Engine records a ``compute.instances.preempted`` system operation and stops (``STOP``)
or deletes (``DELETE``) the VM. ``interruptions`` reads those operations; ``get``/``list``
report a stopped VM with such an operation as PREEMPTED, and ``get`` of a VM deleted by
preemption answers a PREEMPTED instance built from the operation. Operations are polled with
our own ``ZoneOperationsClient.wait`` (``op.result()`` polls the public endpoint).
Instance ids are ``<zone>/<name>``; ``get``/``terminate`` also take a bare name.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from providers._common import (
    has_tags,
    normalise_state,
    now_utc,
    parse_time,
    unless_gone,
    utc,
    wanted_tags,
)
from providers.base import ErrorKind, ProviderError
from providers.gcp.client import NAME_PREFIX, PREEMPTED_OP, TAGS_METADATA_KEY, GCPClient
from providers.gcp.errors import ERRORS
from providers.gcp.labels import label, label_key
from providers.gcp.offers import GCPOffers
from provisioner.core.models import Instance, InstanceState, Interruption, Market

STATES: dict[str, InstanceState] = {
    "provisioning": InstanceState.PENDING,
    "staging": InstanceState.PENDING,
    "repairing": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "suspending": InstanceState.STOPPING,
    "stopped": InstanceState.TERMINATED,
    "suspended": InstanceState.TERMINATED,
    "terminated": InstanceState.TERMINATED,
}


def _enum_name(value: Any) -> str:
    return str(getattr(value, "name", value) or "")


class GCPInstances:
    """The instance operations of the GCP adapter, but launch (:mod:`providers.gcp.launch`)."""

    def __init__(self, client: GCPClient, offers: GCPOffers) -> None:
        self.client = client
        self.offers = offers

    def wait(self, zone: str, operation: str) -> None:
        """Poll ``operation`` with our own ZoneOperationsClient until DONE; raise its error."""
        c = self.client.clients()
        self.wait_on(
            operation,
            lambda: c.zone_operations.wait(
                project=self.client.project,
                zone=zone,
                operation=operation,
                retry=None,
                timeout=self.client.request_timeout,
            ),
        )

    def wait_on(self, operation: str, poll: Callable[[], Any]) -> None:
        """Call ``poll`` (an operations client's ``wait``) until the operation is DONE; raise
        the operation's error (``error.errors[0].code``) if it failed."""
        from google.cloud import compute_v1

        deadline = time.monotonic() + self.client.operation_timeout
        while True:
            op = self.client.call("wait", poll)
            if op.status == compute_v1.Operation.Status.DONE:
                break
            if time.monotonic() > deadline:
                raise ProviderError(
                    ErrorKind.TRANSIENT,
                    "OperationTimeout",
                    f"operation {operation} still {_enum_name(op.status)}",
                    provider="gcp",
                )
        errors = list(op.error.errors) if op.error else []
        if errors:
            first = errors[0]
            status = op.http_error_status_code or None
            raise ERRORS.error(first.code, first.message, status)

    # -- describe -----------------------------------------------------------------------------------

    def instance(self, inst: Any, preempted: bool = False) -> Instance:
        zone = inst.zone.rsplit("/", 1)[-1]
        items = {i.key: i.value for i in inst.metadata.items} if inst.metadata else {}
        tags: dict[str, str] = dict(inst.labels)
        if TAGS_METADATA_KEY in items:
            with contextlib.suppress(ValueError, AttributeError):
                tags = {str(k): str(v) for k, v in json.loads(items[TAGS_METADATA_KEY]).items()}
        nic = inst.network_interfaces[0] if inst.network_interfaces else None
        public = nic.access_configs[0].nat_i_p if nic is not None and nic.access_configs else ""
        raw = _enum_name(inst.status)
        spot = _enum_name(inst.scheduling.provisioning_model) == "SPOT" or bool(
            inst.scheduling.preemptible
        )
        reserved = _enum_name(inst.scheduling.provisioning_model) == "RESERVATION_BOUND" or (
            _enum_name(inst.reservation_affinity.consume_reservation_type) == "SPECIFIC_RESERVATION"
        )
        market = Market.SPOT if spot else Market.RESERVED if reserved else Market.ON_DEMAND
        return Instance(
            id=f"{zone}/{inst.name}",
            provider="gcp",
            region=zone.rsplit("-", 1)[0],
            zone=zone,
            instance_type=inst.machine_type.rsplit("/", 1)[-1],
            market=market,
            state=normalise_state(raw, STATES, preempted=preempted),
            raw_state=raw,
            state_reason=PREEMPTED_OP if preempted else inst.status_message,
            tags=tags,
            launched_at=parse_time(inst.creation_timestamp),
            price_per_hour=self.offers.known_price_of(
                zone.rsplit("-", 1)[0], inst.machine_type.rsplit("/", 1)[-1], spot
            ),
            public_ip=public or None,
            private_ip=(nic.network_i_p if nic is not None else "") or None,
        )

    @staticmethod
    def _split(instance_id: str) -> tuple[str, str]:
        zone, _, name = instance_id.rpartition("/")
        return zone.rsplit("/", 1)[-1], name

    def get(self, instance_id: str) -> Instance:
        zone, name = self._split(instance_id)
        if not zone:
            found = [i for i in self._list_raw(f'name = "{name}"')]
            if not found:
                raise ProviderError(
                    ErrorKind.NOT_FOUND,
                    "notFound",
                    f"no instance {name} in {self.client.project}",
                    provider="gcp",
                )
            zone = found[0].zone.rsplit("/", 1)[-1]
        inst = self.get_raw(zone, name)
        if inst is None:
            # gone: deleted by a preemption (DELETE action), unless deleted since by a user
            ops = self._preemptions(zone=zone, target=name, deletes=True)
            if not ops or ops[-1].operation_type != PREEMPTED_OP:
                raise ProviderError(
                    ErrorKind.NOT_FOUND,
                    "notFound",
                    f"no instance {name} in {self.client.project}/{zone}",
                    provider="gcp",
                )
            return self._deleted_by_preemption(ops[-1], zone, name)
        preempted = False
        if _enum_name(inst.status) in ("TERMINATED", "STOPPED", "STOPPING"):
            preempted = bool(self._preemptions(zone=zone, target=name))
        return self.instance(inst, preempted)

    def get_raw(self, zone: str, name: str) -> Any | None:
        """The Instance resource, or None when Compute Engine has no such instance."""
        c = self.client.clients()
        return unless_gone(
            lambda: self.client.call(
                "get",
                lambda: c.instances.get(
                    project=self.client.project,
                    zone=zone,
                    instance=name,
                    retry=None,
                    timeout=self.client.request_timeout,
                ),
            )
        )

    def _deleted_by_preemption(self, op: Any, zone: str, name: str) -> Instance:
        return Instance(
            id=f"{zone}/{name}",
            provider="gcp",
            region=zone.rsplit("-", 1)[0],
            zone=zone,
            instance_type="",
            market=Market.SPOT,
            state=InstanceState.PREEMPTED,
            raw_state="DELETED",
            state_reason=f"{PREEMPTED_OP}: {op.status_message}".rstrip(": "),
        )

    def _list_raw(self, expr: str) -> builtins.list[Any]:
        from google.cloud import compute_v1

        request = compute_v1.AggregatedListInstancesRequest(
            project=self.client.project, filter=expr
        )
        return [
            inst
            for _, scoped in self.client.aggregated(self.client.clients().instances, request)
            for inst in scoped.instances
        ]

    def list(self, tags: Mapping[str, str] | None = None) -> builtins.list[Instance]:
        """Instances carrying ``tags`` in every zone of the project (one aggregated list).

        The filter uses the label form of each tag; the exact tags (kept in metadata) are then
        compared, so a sanitised label never matches a different job.
        """
        wanted = wanted_tags(tags)
        expr = " AND ".join(f'(labels.{label_key(k)} = "{label(v)}")' for k, v in wanted.items())
        raw = [i for i in self._list_raw(expr)]
        stopped = [i for i in raw if _enum_name(i.status) in ("TERMINATED", "STOPPED", "STOPPING")]
        preempted_targets = (
            {op.target_link.rsplit("/", 1)[-1] for op in self._preemptions()} if stopped else set()
        )
        out = []
        for inst in raw:
            instance = self.instance(
                inst, preempted=inst.name in preempted_targets and inst in stopped
            )
            if has_tags(instance.tags, wanted):
                out.append(instance)
        return out

    # -- terminate ------------------------------------------------------------------------------

    def terminate(self, instance_ids: Iterable[str]) -> None:
        c = self.client.clients()
        pending: list[tuple[str, str]] = []
        for iid in dict.fromkeys(instance_ids):
            zone, name = self._split(iid)
            if not zone:
                found = self._list_raw(f'name = "{name}"')
                if not found:
                    continue
                zone = found[0].zone.rsplit("/", 1)[-1]
            delete = functools.partial(
                c.instances.delete,
                project=self.client.project,
                zone=zone,
                instance=name,
                retry=None,
                timeout=self.client.request_timeout,
            )
            op = unless_gone(functools.partial(self.client.call, "delete", delete))
            if op is not None:
                pending.append((zone, op.name))
        for zone, op_name in pending:
            unless_gone(functools.partial(self.wait, zone, op_name))

    # -- interruptions ----------------------------------------------------------------------------

    def _preemptions(
        self, zone: str | None = None, target: str | None = None, *, deletes: bool = False
    ) -> builtins.list[Any]:
        """``compute.instances.preempted`` operations (of one zone/instance, or the project),
        oldest first; with ``deletes``, the ``delete`` operations too."""
        from google.cloud import compute_v1

        if deletes:
            expr = f'operationType eq "({re.escape(PREEMPTED_OP)}|delete)"'
        else:
            expr = f'(operationType = "{PREEMPTED_OP}")'
        c = self.client.clients()
        if zone:
            request = compute_v1.ListZoneOperationsRequest(
                project=self.client.project, zone=zone, filter=expr
            )
            ops = self.client.call(
                "operations",
                lambda: builtins.list(
                    c.zone_operations.list(
                        request=request, retry=None, timeout=self.client.request_timeout
                    )
                ),
            )
        else:
            request = compute_v1.AggregatedListGlobalOperationsRequest(
                project=self.client.project, filter=expr
            )
            ops = [
                op
                for _, scoped in self.client.aggregated(c.global_operations, request)
                for op in scoped.operations
            ]
        if target:
            ops = [op for op in ops if op.target_link.rsplit("/", 1)[-1] == target]
        return sorted(ops, key=lambda op: op.insert_time)

    def interruptions(self, since: datetime) -> builtins.list[Interruption]:
        """Preemptions Compute Engine recorded since ``since`` (its system operations).

        These are the project's ``compute.instances.preempted`` operations; the time is the
        operation's. Instances of other tools in the project are included only if they carry
        this tool's tags, which a deleted instance no longer shows; so every preemption of an
        instance whose name this tool gives (``prov-...``) is reported.
        """
        since = utc(since)
        out = []
        for op in self._preemptions():
            at = parse_time(op.end_time or op.insert_time) or now_utc()
            name = op.target_link.rsplit("/", 1)[-1]
            zone = op.zone.rsplit("/", 1)[-1]
            if at < since or not name.startswith(NAME_PREFIX):
                continue
            out.append(
                Interruption(
                    instance_id=f"{zone}/{name}",
                    provider="gcp",
                    zone=zone,
                    kind="preempted",
                    at=at,
                    raw=f"{PREEMPTED_OP}: {op.status_message}".rstrip(": "),
                )
            )
        return out
