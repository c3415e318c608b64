"""EC2 placement groups for moto's server, which has none (moto 5.2 answers
``CreatePlacementGroup`` with "not implemented").

:func:`install` adds to moto's ``EC2Response``, in this process (the contract suite's
``ThreadedMotoServer`` runs here), the three actions as the EC2 API Reference defines them:

- ``CreatePlacementGroup``: ``GroupName`` (unique in the region:
  ``InvalidPlacementGroup.Duplicate`` otherwise), ``Strategy`` (``cluster`` | ``spread`` |
  ``partition`` | ``precision-time``), ``TagSpecification.N`` with
  ``ResourceType=placement-group`` (any other type is refused); answers ``placementGroup``.
- ``DescribePlacementGroups``: ``GroupName.N`` (an unknown one is
  ``InvalidPlacementGroup.Unknown``), ``GroupId.N``, ``Filter.N`` with ``group-name``,
  ``group-arn``, ``state``, ``strategy``, ``tag:<key>`` and ``tag-key`` (values may hold the
  ``*``/``?`` wildcards); no pages (the action has no ``MaxResults``); answers
  ``placementGroupSet``.
- ``DeletePlacementGroup``: ``GroupName``; ``InvalidPlacementGroup.Unknown`` for a group that is
  not there, ``InvalidPlacementGroup.InUse`` while an instance that is not ``terminated`` is in it.

And ``RunInstances`` honours ``Placement.GroupName`` (or ``Placement.GroupId``, not both): an
unknown group is ``InvalidPlacementGroup.Unknown``; the instance is put in the group, which
``DescribeInstances`` then shows as its ``Placement.GroupName`` (moto keeps that field, empty).
It also checks and keeps each ``NetworkInterface.N.InterfaceType`` asked for (``interface`` |
``efa`` | ``efa-only``), which moto drops (it reports every interface as ``interface``).

The groups live on moto's per-region EC2 backend object, so ``POST /moto-api/reset`` (which
builds every backend anew) removes them with everything else. Answers are serialised by moto
from botocore's EC2 model, errors as EC2's XML error document: the adapter reads them through
boto3 over HTTP as it would EC2's. This touches moto internals (pinned < 5.3).
"""

from __future__ import annotations

import fnmatch
import functools
import threading
from dataclasses import dataclass, field
from typing import Any

STRATEGIES = ("cluster", "spread", "partition", "precision-time")
INTERFACE_TYPES = ("interface", "efa", "efa-only")
_BACKEND_KEY = "_provisioner_placement_groups"
_installed = threading.Lock()
_done = False


@dataclass
class _Group:
    name: str
    group_id: str
    strategy: str
    arn: str
    tags: dict[str, str] = field(default_factory=dict)
    state: str = "available"
    partition_count: int | None = None

    def shape(self) -> dict[str, Any]:
        """The ``PlacementGroup`` structure of the EC2 model."""
        out: dict[str, Any] = {
            "GroupName": self.name,
            "State": self.state,
            "Strategy": self.strategy,
            "GroupId": self.group_id,
            "GroupArn": self.arn,
            "Tags": [{"Key": k, "Value": v} for k, v in self.tags.items()],
        }
        if self.partition_count is not None:
            out["PartitionCount"] = self.partition_count
        return out


def _groups(backend: Any) -> dict[str, _Group]:
    """The region's groups by name, kept on moto's backend object (a reset drops them)."""
    found: dict[str, _Group] | None = backend.__dict__.get(_BACKEND_KEY)
    if found is None:
        found = backend.__dict__[_BACKEND_KEY] = {}
    return found


def _unknown(name: str) -> Exception:
    from moto.ec2.exceptions import EC2ClientError

    return EC2ClientError(
        "InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown."
    )


def _matches(group: _Group, filters: dict[str, list[str]]) -> bool:
    from moto.ec2.exceptions import EC2ClientError

    for name, values in filters.items():
        if name.startswith("tag:"):
            actual: list[str] = [v for k, v in group.tags.items() if k == name[4:]]
        elif name == "tag-key":
            actual = list(group.tags)
        elif name in ("group-name", "group-arn", "state", "strategy"):
            actual = [
                {
                    "group-name": group.name,
                    "group-arn": group.arn,
                    "state": group.state,
                    "strategy": group.strategy,
                }[name]
            ]
        elif name == "spread-level":
            actual = []
        else:
            raise EC2ClientError("InvalidParameterValue", f"The filter '{name}' is invalid")
        if not any(fnmatch.fnmatchcase(a, v) for a in actual for v in values):
            return False
    return True


def create_placement_group(self: Any) -> Any:
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.utils import random_id

    name = self._get_param("GroupName")
    strategy = self._get_param("Strategy")
    if not name:
        raise EC2ClientError("MissingParameter", "The request must contain the parameter GroupName")
    if strategy not in STRATEGIES:
        raise EC2ClientError(
            "InvalidParameterValue", f"Value ({strategy}) for parameter strategy is invalid."
        )
    tags = self._parse_tag_specification("placement-group").get("placement-group", {})
    self.error_on_dryrun()
    groups = _groups(self.ec2_backend)
    if name in groups:
        raise EC2ClientError(
            "InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' already exists."
        )
    count = self._get_int_param("PartitionCount")
    group = _Group(
        name=name,
        group_id=random_id("pg"),
        strategy=strategy,
        arn=f"arn:aws:ec2:{self.region}:{self.current_account}:placement-group/{name}",
        tags=dict(tags),
        partition_count=count if strategy == "partition" else None,
    )
    groups[name] = group
    return ActionResult({"PlacementGroup": group.shape()})


def describe_placement_groups(self: Any) -> Any:
    from moto.core.responses import ActionResult

    names = self._get_param("GroupNames", [])
    ids = self._get_param("GroupIds", [])
    filters = self._filters_from_querystring()
    self.error_on_dryrun()
    groups = _groups(self.ec2_backend)
    for name in names:
        if name not in groups:
            raise _unknown(name)
    found = [
        g
        for g in groups.values()
        if (not names or g.name in names)
        and (not ids or g.group_id in ids)
        and _matches(g, filters)
    ]
    return ActionResult({"PlacementGroups": [g.shape() for g in found]})


def _members(backend: Any, name: str) -> list[str]:
    """The instances in group ``name`` that are not terminated (EC2 counts shutting-down)."""
    return [
        i.id
        for i in backend.all_instances()
        if i.placement.group_name == name and i.state != "terminated"
    ]


def delete_placement_group(self: Any) -> Any:
    from moto.core.responses import EmptyResult
    from moto.ec2.exceptions import EC2ClientError

    name = self._get_param("GroupName")
    self.error_on_dryrun()
    groups = _groups(self.ec2_backend)
    if name not in groups:
        raise _unknown(name)
    if _members(self.ec2_backend, name):
        raise EC2ClientError(
            "InvalidPlacementGroup.InUse",
            f"The placement group '{name}' is in use and may not be deleted.",
        )
    del groups[name]
    return EmptyResult()


def _placed_run_instances(original: Any) -> Any:
    @functools.wraps(original)
    def run_instances(self: Any) -> Any:
        from moto.ec2.exceptions import EC2ClientError

        name = self._get_param("Placement.GroupName")
        group_id = self._get_param("Placement.GroupId")
        if name and group_id:
            raise EC2ClientError(
                "InvalidParameterCombination",
                "Placement GroupId and GroupName may not be specified on the same request",
            )
        for spec in self._get_param("NetworkInterfaces", []):
            if spec.get("InterfaceType", "interface") not in INTERFACE_TYPES:
                raise EC2ClientError(
                    "InvalidParameterValue",
                    f"Invalid value '{spec['InterfaceType']}' for InterfaceType",
                )
        groups = _groups(self.ec2_backend)
        if group_id and not name:
            by_id = [g for g in groups.values() if g.group_id == group_id]
            if not by_id:
                raise _unknown(group_id)
            name = by_id[0].name
        if name and name not in groups:
            raise _unknown(name)
        result = original(self)
        kinds = {
            int(spec.get("DeviceIndex", 0)): spec.get("InterfaceType")
            for spec in self._get_param("NetworkInterfaces", [])
        }
        for instance in result.result.instances:
            if name:
                instance.placement.group_name = name
            for index, nic in instance.nics.items():  # moto keeps "interface" whatever was asked
                if kinds.get(index):
                    nic.interface_type = kinds[index]
        return result

    return run_instances


def install() -> None:
    """Add the placement-group actions to moto's EC2 responses (once per process)."""
    global _done
    with _installed:
        if _done:
            return
        from moto.ec2.responses import EC2Response

        EC2Response.create_placement_group = create_placement_group  # type: ignore[attr-defined]
        EC2Response.describe_placement_groups = describe_placement_groups  # type: ignore[attr-defined]
        EC2Response.delete_placement_group = delete_placement_group  # type: ignore[attr-defined]
        EC2Response.run_instances = _placed_run_instances(EC2Response.run_instances)  # type: ignore[method-assign]
        _done = True


def placement_of(instance_id: str, region: str) -> str:
    """The group moto's backend has instance ``instance_id`` in (``""``: none)."""
    from moto.backends import get_backend
    from moto.core import DEFAULT_ACCOUNT_ID

    backend = get_backend("ec2")[DEFAULT_ACCOUNT_ID][region]
    return str(backend.get_instance(instance_id).placement.group_name)
