"""How each cloud is made to interrupt the drill's instance: one strategy per cloud.

- AWS: Fault Injection Service, action ``aws:ec2:send-spot-instance-interruptions`` (what the
  EC2 console's "Initiate interruption" runs): a role FIS assumes, an experiment template
  naming the instance, an experiment started from it. EC2 then serves the two-minute notice
  at IMDS and reclaims the instance at its end.
- GCP: ``instances.simulateMaintenanceEvent`` on a Spot VM preempts it (notice at
  ``instance/preempted``, about 30 s).
- Azure: ``virtualMachines.simulateEviction`` evicts a Spot VM after its ``Preempt`` scheduled
  event (at least 30 s).
- Alibaba, Tencent: no API interrupts a spot instance (ECS's and CVM's API references list
  none; their fault-injection services, AHAS Chaos and CFG, act inside the VM): a substitute.
  The drill writes a notice in the cloud's own metadata format to the job's directory in the
  checkpoint store (``drill/notice``), the agent serves it to itself as if its metadata service
  had, and once the notice's checkpoint is in (or its deadline passes) the drill terminates
  the instance through the API. The report labels those steps ``substitute``.
- sim: the sim cloud's own preemption (its metadata serves the mimicked cloud's notice).

Every resource an interrupter makes is written to the drill's ledger before it exists (or,
where the cloud names it, at once after), and :meth:`Interrupter.cleanup` deletes it.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from provisioner.agent.notices import ENV_DRILL_NOTICE, FROM_STORE, SUBSTITUTE_NOTICE
from provisioner.drill.ledger import Ledger

__all__ = ["ENV_DRILL_NOTICE", "FROM_STORE", "SUBSTITUTE_NOTICE", "Interrupter", "interrupter_for"]


class Interrupter:
    """The base: ``interrupt`` triggers the cloud's interruption of ``instance_id`` and
    returns what was sent (the call and its parameters); ``due`` is called on every pass
    after it (a substitute terminates there); ``cleanup`` deletes what it made and returns
    what it could not."""

    cloud = ""
    api = ""  # the interruption API's name, for the report
    substitute = False

    def __init__(self, provider: Any, ledger: Ledger, sleep: Callable[[float], None] = time.sleep):
        self.provider, self.ledger, self.sleep = provider, ledger, sleep

    def interrupt(self, instance_id: str, zone: str) -> dict[str, Any]:
        raise NotImplementedError

    def due(self, instance_id: str, checkpoint_in: bool, now: datetime) -> None:
        """Called on each pass after :meth:`interrupt` (the cloud does the rest itself)."""

    def cleanup(self) -> list[str]:
        return []


class SimInterrupter(Interrupter):
    cloud, api = "sim", "sim preempt (the mimicked cloud's notice, then the capacity goes)"

    def interrupt(self, instance_id: str, zone: str) -> dict[str, Any]:
        self.provider.preempt(instance_id)
        return {"call": "POST /v1/instances/{id}/preempt", "instance": instance_id}


def _trust_policy() -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": "fis.amazonaws.com"},
                    "Action": "sts:AssumeRole",
                }
            ],
        }
    )


def fis_role_policy(instance_arn: str) -> dict[str, Any]:
    """What the role FIS assumes may do: interrupt that one instance (and see it)."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "ec2:SendSpotInstanceInterruptions",
                "Resource": instance_arn,
            },
            {"Effect": "Allow", "Action": "ec2:DescribeInstances", "Resource": "*"},
        ],
    }


def fis_template(drill_id: str, role_arn: str, instance_arn: str) -> dict[str, Any]:
    """The experiment template: send the spot interruption to one instance, two minutes."""
    return {
        "clientToken": f"provisioner-drill-{drill_id}",
        "description": f"provisioner drill {drill_id}: interrupt one spot instance",
        "roleArn": role_arn,
        "stopConditions": [{"source": "none"}],
        "targets": {
            "SpotInstances": {
                "resourceType": "aws:ec2:spot-instance",
                "resourceArns": [instance_arn],
                "selectionMode": "ALL",
            }
        },
        "actions": {
            "interrupt": {
                "actionId": "aws:ec2:send-spot-instance-interruptions",
                "parameters": {"durationBeforeInterruption": "PT2M"},
                "targets": {"SpotInstances": "SpotInstances"},
            }
        },
        "tags": {"provisioner-drill": drill_id},
    }


class AwsFis(Interrupter):
    cloud, api = "aws", "AWS FIS aws:ec2:send-spot-instance-interruptions"

    def _client(self, service: str) -> Any:
        p = self.provider
        return p.client.new_client(service, self.ledger.region or p.region, p.client.endpoint)

    @property
    def role_name(self) -> str:
        return f"provisioner-drill-{self.ledger.drill_id}"

    def interrupt(self, instance_id: str, zone: str) -> dict[str, Any]:
        region = self.ledger.region or self.provider.region
        account = self._client("sts").get_caller_identity()["Account"]
        arn = f"arn:aws:ec2:{region}:{account}:instance/{instance_id}"
        iam, fis = self._client("iam"), self._client("fis")
        self.ledger.add("iam-role", self.role_name)
        role = iam.create_role(
            RoleName=self.role_name,
            AssumeRolePolicyDocument=_trust_policy(),
            Description=f"provisioner drill {self.ledger.drill_id} (deleted by the drill)",
            Tags=[{"Key": "provisioner-drill", "Value": self.ledger.drill_id}],
        )["Role"]
        iam.put_role_policy(
            RoleName=self.role_name,
            PolicyName="interrupt-one-instance",
            PolicyDocument=json.dumps(fis_role_policy(arn)),
        )
        body = fis_template(self.ledger.drill_id, role["Arn"], arn)
        template = None
        for attempt in range(6):  # a new role takes seconds to be assumable by FIS
            try:
                template = fis.create_experiment_template(**body)["experimentTemplate"]
                break
            except Exception as exc:
                if "ValidationException" not in type(exc).__name__ + str(exc) or attempt == 5:
                    raise
                self.sleep(5.0)
        assert template is not None
        self.ledger.add("fis-template", template["id"], region)
        experiment = fis.start_experiment(
            clientToken=f"provisioner-drill-{self.ledger.drill_id}-start",
            experimentTemplateId=template["id"],
            tags={"provisioner-drill": self.ledger.drill_id},
        )["experiment"]
        self.ledger.add("fis-experiment", experiment["id"], region)
        return {
            "call": "fis:StartExperiment",
            "template": template["id"],
            "experiment": experiment["id"],
            "action": "aws:ec2:send-spot-instance-interruptions",
            "durationBeforeInterruption": "PT2M",
            "resourceArns": [arn],
        }

    def cleanup(self) -> list[str]:
        left: list[str] = []
        fis = iam = None
        for r in self.ledger.live("fis-experiment"):
            fis = fis or self._client("fis")
            with contextlib.suppress(Exception):  # finished experiments cannot be stopped
                fis.stop_experiment(id=r.id)
            self.ledger.deleted(r.kind, r.id)
        for r in self.ledger.live("fis-template"):
            fis = fis or self._client("fis")
            try:
                fis.delete_experiment_template(id=r.id)
                self.ledger.deleted(r.kind, r.id)
            except Exception as exc:
                if "ResourceNotFound" in type(exc).__name__ + str(exc):
                    self.ledger.deleted(r.kind, r.id)
                else:
                    left.append(f"FIS experiment template {r.id} ({r.region}): {exc}")
        for r in self.ledger.live("iam-role"):
            iam = iam or self._client("iam")
            try:
                with contextlib.suppress(iam.exceptions.NoSuchEntityException):
                    iam.delete_role_policy(RoleName=r.id, PolicyName="interrupt-one-instance")
                with contextlib.suppress(iam.exceptions.NoSuchEntityException):
                    iam.delete_role(RoleName=r.id)
                self.ledger.deleted(r.kind, r.id)
            except Exception as exc:
                left.append(f"IAM role {r.id}: {exc}")
        return left


class GcpMaintenance(Interrupter):
    cloud, api = "gcp", "GCP instances.simulateMaintenanceEvent"

    def interrupt(self, instance_id: str, zone: str) -> dict[str, Any]:
        p = self.provider
        name = instance_id.rsplit("/", 1)[-1]
        p.client.clients().instances.simulate_maintenance_event(
            project=p.project, zone=zone, instance=name, timeout=p.client.request_timeout
        )
        return {
            "call": "compute.instances.simulateMaintenanceEvent",
            "project": p.project,
            "zone": zone,
            "instance": name,
        }


class AzureEviction(Interrupter):
    cloud, api = "azure", "Azure virtualMachines.simulateEviction"

    def interrupt(self, instance_id: str, zone: str) -> dict[str, Any]:
        p = self.provider
        name = instance_id.rstrip("/").rsplit("/", 1)[-1]
        p.client.compute.virtual_machines.simulate_eviction(p.client.resource_group, name)
        return {
            "call": "Microsoft.Compute/virtualMachines/simulateEviction",
            "resourceGroup": p.client.resource_group,
            "vm": name,
        }


def substitute_notice_text(cloud: str, deadline: datetime) -> str:
    """The notice body the cloud's metadata service would serve (``termination-time``):
    Alibaba ISO 8601 UTC, Tencent ``YYYY-MM-DD HH:MM:SS`` in Beijing time (UTC+8, no zone
    written, as CVM serves it)."""
    if cloud == "tencent":
        return deadline.astimezone(timezone(timedelta(hours=8))).strftime("%Y-%m-%d %H:%M:%S")
    return deadline.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SubstituteNotice(Interrupter):
    """Alibaba and Tencent: the notice from the store, then terminate through the API."""

    substitute = True

    def __init__(
        self,
        provider: Any,
        ledger: Ledger,
        sleep: Callable[[float], None] = time.sleep,
        *,
        cloud: str,
        notice_s: float,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        super().__init__(provider, ledger, sleep)
        self.cloud, self.notice_s, self.clock = cloud, notice_s, clock
        self.api = f"substitute: a {cloud} notice served from the store, then TerminateInstances"
        self.deadline: datetime | None = None
        self.terminated = False
        self.attempt = 1  # the attempt whose agent reads the notice (the drill's first launched)

    def interrupt(self, instance_id: str, zone: str) -> dict[str, Any]:
        from provisioner.agent.store import CheckpointStore

        self.deadline = self.clock() + timedelta(seconds=self.notice_s)
        text = substitute_notice_text(self.cloud, self.deadline)
        store = CheckpointStore(self.ledger.checkpoint_uri, self.ledger.job_id)
        path = SUBSTITUTE_NOTICE.format(attempt=self.attempt)
        store.write_text(path, text)
        return {"call": f"substitute notice at {path}", "body": text}

    def due(self, instance_id: str, checkpoint_in: bool, now: datetime) -> None:
        if self.terminated or self.deadline is None:
            return
        if checkpoint_in or now >= self.deadline:
            self.provider.terminate([instance_id])
            self.terminated = True


def interrupter_for(
    provider_name: str, cloud: str, provider: Any, ledger: Ledger, notice_s: float
) -> Interrupter:
    """The strategy for ``provider_name`` (``cloud``: the cloud it is or mimics)."""
    if provider_name == "sim":
        return SimInterrupter(provider, ledger)
    if cloud == "aws":
        return AwsFis(provider, ledger)
    if cloud == "gcp":
        return GcpMaintenance(provider, ledger)
    if cloud == "azure":
        return AzureEviction(provider, ledger)
    if cloud in ("alibaba", "tencent"):
        return SubstituteNotice(provider, ledger, cloud=cloud, notice_s=notice_s)
    raise ValueError(f"no interruption for {provider_name!r}")
