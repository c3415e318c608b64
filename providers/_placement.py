"""Placement groups for the clouds whose groups live in one region (Alibaba deployment sets,
Tencent placement groups): the part of :class:`providers.capabilities.PlacementGroups` the
two share, over three calls each cloud makes its own way.

The id given out is ``<region>/<cloud id>`` (each cloud's ids are per region, so a delete
knows where to ask). Ensure looks the group up by name first (the name is the gang attempt's
token, so a crash between create and record finds the same group, never a second), then
creates it with the attempt's tags; delete of an unknown group is not an error; listing keeps
the groups this tool made that carry every tag asked for.
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Mapping

from providers._regional import RegionalClient
from providers.base import ErrorKind, ProviderError
from providers.capabilities import PlacementGroup
from provisioner.core.models import TAG_MANAGED


class RegionalPlacement(abc.ABC):
    """The placement groups of a regional cloud, through ``client``
    (:class:`providers._regional.RegionalClient`: its ``regions`` and ``name``); the cloud's
    part fills in the hooks."""

    def __init__(self, client: RegionalClient) -> None:
        self.client = client
        self.name = client.name

    @abc.abstractmethod
    def _find_groups(self, region: str, name: str | None = None) -> builtins.list[PlacementGroup]:
        """The groups in ``region`` (only those named ``name`` where given); ids as the cloud
        writes them, tags as the group carries them."""

    @abc.abstractmethod
    def _create_group(self, region: str, zone: str, name: str, tags: dict[str, str]) -> str:
        """Create the group; the cloud's id."""

    @abc.abstractmethod
    def _delete_group(self, region: str, group_id: str) -> None:
        """Delete it (ProviderError NOT_FOUND when it is not there)."""

    def ensure_placement_group(
        self, name: str, region: str, zone: str, tags: Mapping[str, str]
    ) -> str:
        wanted = {**tags, TAG_MANAGED: "true"}
        for group in self._find_groups(region, name):
            if group.name == name:
                return f"{region}/{group.id}"
        return f"{region}/{self._create_group(region, zone, name, wanted)}"

    def delete_placement_group(self, group_id: str) -> None:
        region, _, gid = group_id.partition("/")
        if not gid:
            raise ProviderError(
                ErrorKind.INVALID,
                "InvalidPlacementGroupId",
                f"{group_id!r} is not <region>/<id>",
                provider=self.name,
            )
        try:
            self._delete_group(region, gid)
        except ProviderError as exc:
            if exc.kind is not ErrorKind.NOT_FOUND:
                raise

    def list_placement_groups(
        self, tags: Mapping[str, str] | None = None
    ) -> builtins.list[PlacementGroup]:
        wanted = {TAG_MANAGED: "true", **(tags or {})}
        out = []
        for region in self.client.regions:
            for g in self._find_groups(region):
                if all(g.tags.get(k) == v for k, v in wanted.items()):
                    out.append(PlacementGroup(f"{region}/{g.id}", g.name, region, g.tags))
        return out


def group_in(request_group: str | None, region: str, provider: str) -> str | None:
    """The cloud's id of a launch's group (``<region>/<id>``), refused when it is in another
    region than the launch (a cloud's group places only in its own)."""
    if not request_group:
        return None
    where, _, gid = request_group.partition("/")
    if not gid:
        return where
    if where != region:
        raise ProviderError(
            ErrorKind.INVALID,
            "InvalidPlacementGroup.Region",
            f"placement group {request_group} is not in {region}",
            provider=provider,
        )
    return gid
