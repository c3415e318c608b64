"""Resource policies and region operations for the fake Compute Engine API (a mixin of
:class:`fakes.gcp_server.GCPServer`), as the Compute Engine REST reference defines them:

- ``POST   /compute/v1/projects/P/regions/R/resourcePolicies?requestId=U`` (``resourcePolicies.insert``)
  answers a *region* operation (``RUNNING``; the same ``requestId`` again answers the same
  operation); the policy shows ``status: CREATING`` until the operation is done, then ``READY``.
  A name already taken in the region is ``409 alreadyExists``; a bad name ``400 invalid``.
- ``GET    .../regions/R/resourcePolicies/N`` (``get``; ``404 notFound``),
  ``GET    .../regions/R/resourcePolicies?filter=&maxResults=&pageToken=`` (``list``),
  ``GET    /compute/v1/projects/P/aggregated/resourcePolicies?filter=`` (``aggregatedList``,
  scopes ``regions/R``).
- ``DELETE .../regions/R/resourcePolicies/N?requestId=U`` (``delete``): ``404 notFound`` when it
  is not there; ``400 resourceInUseByAnotherResource`` while an instance (any status: a stopped
  one holds its policies too) names it; else a region operation that removes it when done.
- ``GET    .../regions/R/operations/O`` and ``POST .../regions/R/operations/O/wait``: the
  operation, finished on the first read (as the zone operations are).

An instance insert may carry ``resourcePolicies`` (a URL, ``projects/P/regions/R/resourcePolicies/N``
or ``regions/R/resourcePolicies/N``): each must exist (``404 notFound``) and be in the instance's
region (``400 invalid``), and the instance keeps them as full URLs, as Compute Engine answers.

Errors can be injected per call (:meth:`GCPServer.inject_error`) with the operations
``policy-insert``, ``policy-get``, ``policy-delete``, ``policy-list`` and ``region-wait``;
:meth:`ResourcePolicies.lose_answer` makes an insert or delete take effect and answer
``503 backendError`` (its answer lost on the way).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_POLICY = re.compile(
    r"(?:.*/)?(?:projects/(?P<project>[^/]+)/)?regions/(?P<region>[^/]+)"
    r"/resourcePolicies/(?P<name>[^/]+)"
)
COLLOCATIONS = ("COLLOCATED", "UNSPECIFIED_COLLOCATION")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _error(status: int, reason: str, message: str) -> tuple[int, Any]:
    from .gcp_server import _error as error

    return error(status, reason, message)


class ResourcePolicies:
    """The resource-policy routes, state and checks of the fake (mixed into GCPServer)."""

    # provided by GCPServer
    project: str
    auto_finish: bool
    _state: Any
    _url: Callable[..., str]
    _next_id: Callable[[], str]
    _injected: Callable[[str], tuple[int, Any] | None]
    _project_ok: Callable[[str], tuple[int, Any] | None]
    _page: Callable[[list[Any], dict[str, str]], tuple[list[Any], str]]
    _filtered: Callable[[list[dict[str, Any]], dict[str, str]], list[dict[str, Any]]]
    _public: Callable[[dict[str, Any]], dict[str, Any]]

    #: the regions the fake serves (those of its zones)
    REGIONS = ("europe-west4", "us-central1")

    def policy(self, name: str, region: str) -> dict[str, Any] | None:
        """The stored resource policy (test control)."""
        found: dict[str, Any] | None = self._state.policies.get((region, name))
        return found

    def policies(self) -> list[dict[str, Any]]:
        return list(self._state.policies.values())

    def lose_answer(self, operation: str = "policy-insert", times: int = 1) -> None:
        """Do the next ``times`` calls of ``operation`` (``policy-insert``/``policy-delete``)
        and answer ``503 backendError`` instead: the call took effect, its answer was lost."""
        self._state.lost[operation] = self._state.lost.get(operation, 0) + times

    def _answer(self, operation: str, op: dict[str, Any]) -> tuple[int, Any]:
        if self._state.lost.get(operation, 0) > 0:
            self._state.lost[operation] -= 1
            return _error(503, "backendError", "Internal error. Please try again.")
        return 200, self._public(op)

    def _policy_routes(self) -> Iterator[tuple[str, str, Callable[..., tuple[int, Any]]]]:
        p = r"/compute/v1/projects/(?P<project>[^/]+)"
        r = p + r"/regions/(?P<region>[^/]+)"
        yield r + r"/resourcePolicies", "POST", self._policy_insert
        yield r + r"/resourcePolicies", "GET", self._policy_list
        yield r + r"/resourcePolicies/(?P<name>[^/]+)", "GET", self._policy_get
        yield r + r"/resourcePolicies/(?P<name>[^/]+)", "DELETE", self._policy_delete
        yield p + r"/aggregated/resourcePolicies", "GET", self._policy_aggregated
        yield r + r"/operations/(?P<name>[^/]+)", "GET", self._region_op
        yield r + r"/operations/(?P<name>[^/]+)/wait", "POST", self._region_op

    # -- helpers ------------------------------------------------------------------------------

    def _region_ok(self, project: str, region: str) -> tuple[int, Any] | None:
        bad = self._project_ok(project)
        if bad:
            return bad
        if region not in self.REGIONS:
            return _error(
                404, "notFound", f"The resource 'projects/{project}/regions/{region}' was not found"
            )
        return None

    def _policy_missing(self, region: str, name: str) -> tuple[int, Any]:
        return _error(
            404,
            "notFound",
            f"The resource 'projects/{self.project}/regions/{region}/resourcePolicies/{name}' "
            "was not found",
        )

    def _new_region_op(self, region: str, op_type: str, policy: dict[str, Any]) -> dict[str, Any]:
        name = f"operation-{int(datetime.now(UTC).timestamp() * 1000)}-{uuid.uuid4().hex[:13]}"
        op = {
            "kind": "compute#operation",
            "id": self._next_id(),
            "name": name,
            "region": self._url("regions", region),
            "operationType": op_type,
            "targetLink": policy["selfLink"],
            "targetId": policy["id"],
            "status": "RUNNING",
            "user": "fake@example.com",
            "progress": 0,
            "insertTime": _now(),
            "startTime": _now(),
            "selfLink": self._url("regions", region, "operations", name),
        }
        self._state.region_operations[(region, name)] = op
        if self.auto_finish:
            self._finish_region(region, op)
        return op

    def _finish_region(self, region: str, op: dict[str, Any]) -> None:
        if op["status"] == "DONE":
            return
        op["status"] = "DONE"
        op["progress"] = 100
        op["endTime"] = _now()
        key = (region, op["targetLink"].rsplit("/", 1)[-1])
        if op["operationType"] == "insert" and key in self._state.policies:
            self._state.policies[key]["status"] = "READY"
        elif op["operationType"] == "delete":
            self._state.policies.pop(key, None)

    def _users(self, self_link: str) -> list[str]:
        """The instances naming policy ``self_link``."""
        return [
            i["selfLink"]
            for i in self._state.instances.values()
            if self_link in (i.get("resourcePolicies") or [])
        ]

    def _instance_policies(self, body: dict[str, Any], zone: str) -> tuple[list[str], Any]:
        """An instance insert's ``resourcePolicies`` as full URLs, or the error to answer."""
        region = zone.rsplit("-", 1)[0]
        out: list[str] = []
        for entry in body.get("resourcePolicies") or []:
            m = _POLICY.fullmatch(str(entry))
            if m is None:
                return [], _error(
                    400,
                    "invalid",
                    f"Invalid value for field 'resource.resourcePolicies': '{entry}'.",
                )
            where, name = m.group("region"), m.group("name")
            if (where, name) not in self._state.policies:
                return [], self._policy_missing(where, name)
            if where != region:
                return [], _error(
                    400,
                    "invalid",
                    f"Invalid value for field 'resource.resourcePolicies': '{entry}'. Resource "
                    f"policy must be in the same region as the instance ({region}).",
                )
            out.append(self._url("regions", where, "resourcePolicies", name))
        return out, None

    # -- routes --------------------------------------------------------------------------------

    def _policy_insert(
        self, query: dict[str, str], body: Any, project: str, region: str
    ) -> tuple[int, Any]:
        bad = self._region_ok(project, region)
        if bad:
            return bad
        request_id = query.get("requestId")
        if request_id and request_id in self._state.policy_request_ids:
            op = self._state.region_operations[self._state.policy_request_ids[request_id]]
            return 200, self._public(op)
        injected = self._injected("policy-insert")
        if injected:
            return injected
        if not isinstance(body, dict) or not body.get("name"):
            return _error(400, "required", "Required field 'resource.name' not specified")
        name = str(body["name"])
        if not _NAME.fullmatch(name):
            return _error(400, "invalid", f"Invalid value for field 'resource.name': '{name}'.")
        placement = body.get("groupPlacementPolicy")
        if placement is not None:
            collocation = placement.get("collocation", "UNSPECIFIED_COLLOCATION")
            if collocation not in COLLOCATIONS:
                return _error(
                    400,
                    "invalid",
                    "Invalid value for field 'resource.groupPlacementPolicy.collocation': "
                    f"'{collocation}'.",
                )
        if (region, name) in self._state.policies:
            return _error(
                409,
                "alreadyExists",
                f"The resource 'projects/{project}/regions/{region}/resourcePolicies/{name}' "
                "already exists",
            )
        policy = json.loads(json.dumps(body))
        policy.update(
            {
                "kind": "compute#resourcePolicy",
                "id": self._next_id(),
                "creationTimestamp": _now(),
                "selfLink": self._url("regions", region, "resourcePolicies", name),
                "region": self._url("regions", region),
                "status": "CREATING",
            }
        )
        self._state.policies[(region, name)] = policy
        op = self._new_region_op(region, "insert", policy)
        if request_id:
            self._state.policy_request_ids[request_id] = (region, op["name"])
        return self._answer("policy-insert", op)

    def _policy_get(
        self, query: dict[str, str], body: Any, project: str, region: str, name: str
    ) -> tuple[int, Any]:
        injected = self._injected("policy-get")
        if injected:
            return injected
        bad = self._region_ok(project, region)
        if bad:
            return bad
        policy = self._state.policies.get((region, name))
        if policy is None:
            return self._policy_missing(region, name)
        return 200, policy

    def _policy_delete(
        self, query: dict[str, str], body: Any, project: str, region: str, name: str
    ) -> tuple[int, Any]:
        bad = self._region_ok(project, region)
        if bad:
            return bad
        request_id = query.get("requestId")
        if request_id and request_id in self._state.policy_request_ids:
            op = self._state.region_operations[self._state.policy_request_ids[request_id]]
            return 200, self._public(op)
        injected = self._injected("policy-delete")
        if injected:
            return injected
        policy = self._state.policies.get((region, name))
        if policy is None:
            return self._policy_missing(region, name)
        users = self._users(policy["selfLink"])
        if users:
            return _error(
                400,
                "resourceInUseByAnotherResource",
                f"The resource_policy resource 'projects/{project}/regions/{region}/"
                f"resourcePolicies/{name}' is already being used by "
                f"'{users[0].split('/compute/v1/', 1)[-1]}'",
            )
        policy["status"] = "DELETING"
        op = self._new_region_op(region, "delete", policy)
        if request_id:
            self._state.policy_request_ids[request_id] = (region, op["name"])
        return self._answer("policy-delete", op)

    def _policy_list(
        self, query: dict[str, str], body: Any, project: str, region: str
    ) -> tuple[int, Any]:
        injected = self._injected("policy-list")
        if injected:
            return injected
        bad = self._region_ok(project, region)
        if bad:
            return bad
        try:
            items = self._filtered(
                [p for (r, _), p in self._state.policies.items() if r == region], query
            )
        except ValueError as exc:
            return _error(400, "invalid", str(exc))
        out: dict[str, Any] = {
            "kind": "compute#resourcePolicyList",
            "id": f"projects/{project}/regions/{region}/resourcePolicies",
            "selfLink": self._url("regions", region, "resourcePolicies"),
        }
        items, token = self._page(items, query)
        if items:
            out["items"] = items
        if token:
            out["nextPageToken"] = token
        return 200, out

    def _policy_aggregated(self, query: dict[str, str], body: Any, project: str) -> tuple[int, Any]:
        injected = self._injected("policy-list")
        if injected:
            return injected
        bad = self._project_ok(project)
        if bad:
            return bad
        items: dict[str, Any] = {}
        try:
            for region in self.REGIONS:
                found = self._filtered(
                    [p for (r, _), p in self._state.policies.items() if r == region], query
                )
                scope = f"regions/{region}"
                if found:
                    items[scope] = {"resourcePolicies": found}
                else:
                    items[scope] = {
                        "warning": {
                            "code": "NO_RESULTS_ON_PAGE",
                            "message": f"There are no results for scope '{scope}' on this page.",
                            "data": [{"key": "scope", "value": scope}],
                        }
                    }
        except ValueError as exc:
            return _error(400, "invalid", str(exc))
        scopes, token = self._page(sorted(items.items()), query)
        out: dict[str, Any] = {
            "kind": "compute#resourcePolicyAggregatedList",
            "id": f"projects/{project}/aggregated/resourcePolicies",
            "items": dict(scopes),
            "selfLink": self._url("aggregated", "resourcePolicies"),
        }
        if token:
            out["nextPageToken"] = token
        return 200, out

    def _region_op(
        self, query: dict[str, str], body: Any, project: str, region: str, name: str
    ) -> tuple[int, Any]:
        injected = self._injected("region-wait")
        if injected:
            return injected
        op = self._state.region_operations.get((region, name))
        if op is None:
            return _error(
                404,
                "notFound",
                f"The resource 'projects/{self.project}/regions/{region}/operations/{name}' "
                "was not found",
            )
        self._finish_region(region, op)
        return 200, self._public(op)
