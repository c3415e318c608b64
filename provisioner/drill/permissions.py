"""``provisioner drill --dry-run``: every API call the drill makes, in order, and the
permissions the caller and the VM need, per cloud, so an administrator can grant them first.

Nothing here calls a cloud. The calls are the adapters' own (docs/clouds.md lists them per
cloud) plus the interruption's; the AWS caller's permissions come as an IAM policy document
(FIS included), GCP's as roles, Azure's as role actions (a custom role's ``Actions``),
Alibaba's as RAM actions and Tencent's as CAM actions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Call:
    who: str  # "caller" (this machine), "vm" (the agent), "cloud" (done by the cloud itself)
    call: str
    why: str


@dataclass(frozen=True)
class Grants:
    """One cloud's calls in order, and what the caller and the VM need."""

    cloud: str
    interruption: str  # the cloud's interruption API, or the substitute
    calls: list[Call]
    caller: list[str]  # actions / roles
    vm: list[str]
    notes: list[str] = field(default_factory=list)
    documents: dict[str, Any] = field(default_factory=dict)  # e.g. AWS IAM policy documents

    def to_json(self) -> dict[str, Any]:
        return {
            "cloud": self.cloud,
            "interruption": self.interruption,
            "calls": [{"who": c.who, "call": c.call, "why": c.why} for c in self.calls],
            "caller_permissions": self.caller,
            "vm_permissions": self.vm,
            "documents": self.documents,
            "notes": self.notes,
        }


def _aws(bucket: str) -> Grants:
    calls = [
        Call(
            "caller",
            "ec2:DescribeInstanceTypes, ec2:DescribeSpotPriceHistory",
            "offers and spot prices",
        ),
        Call("caller", "ssm:GetParameters", "the default image (a public SSM parameter)"),
        Call("caller", "ec2:RunInstances (spot, tagged provisioner-job=<drill id>)", "launch"),
        Call("caller", "ec2:DescribeInstances", "watch the instance (every pass)"),
        Call(
            "vm",
            "IMDSv2 PUT /latest/api/token, GET /latest/meta-data/spot/instance-action",
            "the agent polls for the notice",
        ),
        Call("caller", "sts:GetCallerIdentity", "the account, for the instance's ARN"),
        Call(
            "caller",
            "iam:CreateRole provisioner-drill-<id> (trusted by fis.amazonaws.com)",
            "the role FIS assumes",
        ),
        Call(
            "caller",
            "iam:PutRolePolicy interrupt-one-instance",
            "ec2:SendSpotInstanceInterruptions on that instance only",
        ),
        Call(
            "caller",
            "fis:CreateExperimentTemplate (iam:PassRole, fis:TagResource)",
            "action aws:ec2:send-spot-instance-interruptions, durationBeforeInterruption PT2M, target: the instance's ARN",
        ),
        Call("caller", "fis:StartExperiment", "the interruption"),
        Call(
            "cloud",
            "ec2:SendSpotInstanceInterruptions (by FIS, as the role)",
            "EC2 serves the two-minute notice, then reclaims the instance",
        ),
        Call(
            "vm",
            "s3:PutObject checkpoints/<name>, latest, progress.json",
            "the checkpoint taken on the notice",
        ),
        Call("caller", "ec2:RunInstances", "the replacement, during the notice"),
        Call("vm", "s3:GetObject checkpoints/<name>", "the replacement resumes"),
        Call(
            "caller",
            "ec2:TerminateInstances",
            "the old instance once its checkpoint is in; the replacement at the end",
        ),
        Call("caller", "fis:StopExperiment, fis:DeleteExperimentTemplate", "cleanup"),
        Call("caller", "iam:DeleteRolePolicy, iam:DeleteRole", "cleanup"),
        Call(
            "caller",
            "s3:ListBucket, s3:DeleteObject on <prefix>/<drill id>/",
            "cleanup: the drill's objects",
        ),
    ]
    arn_bucket = f"arn:aws:s3:::{bucket}"
    caller_doc: dict[str, Any] = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "Launch",
                "Effect": "Allow",
                "Action": [
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeInstanceTypeOfferings",
                    "ec2:DescribeSpotPriceHistory",
                    "ec2:DescribeImages",
                    "ec2:DescribeInstances",
                    "ec2:RunInstances",
                    "ec2:CreateTags",
                    "ec2:TerminateInstances",
                    "ssm:GetParameters",
                    "sts:GetCallerIdentity",
                ],
                "Resource": "*",
            },
            {
                "Sid": "Interrupt",
                "Effect": "Allow",
                "Action": [
                    "fis:CreateExperimentTemplate",
                    "fis:StartExperiment",
                    "fis:StopExperiment",
                    "fis:GetExperiment",
                    "fis:DeleteExperimentTemplate",
                    "fis:TagResource",
                ],
                "Resource": "*",
            },
            {
                "Sid": "TheRoleFisAssumes",
                "Effect": "Allow",
                "Action": [
                    "iam:CreateRole",
                    "iam:PutRolePolicy",
                    "iam:DeleteRolePolicy",
                    "iam:DeleteRole",
                    "iam:TagRole",
                    "iam:PassRole",
                ],
                "Resource": "arn:aws:iam::*:role/provisioner-drill-*",
            },
            {
                "Sid": "TheDrillsObjects",
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": arn_bucket,
            },
            {
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                "Resource": f"{arn_bucket}/*",
            },
        ],
    }
    vm_doc = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": arn_bucket},
            {
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                "Resource": f"{arn_bucket}/*",
            },
        ],
    }
    fis_role = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "ec2:SendSpotInstanceInterruptions",
                "Resource": "arn:aws:ec2:REGION:ACCOUNT:instance/INSTANCE",
            },
            {"Effect": "Allow", "Action": "ec2:DescribeInstances", "Resource": "*"},
        ],
    }
    return Grants(
        "aws",
        "AWS Fault Injection Service: aws:ec2:send-spot-instance-interruptions",
        calls,
        sorted({a for s in caller_doc["Statement"] for a in s["Action"]}),
        ["s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
        [
            "The VM's role comes from its instance profile (-o instance_profile=NAME).",
            "The role FIS assumes is made by the drill, allowed to interrupt that one instance, and deleted after.",
        ],
        {"caller_policy": caller_doc, "vm_policy": vm_doc, "fis_role_policy": fis_role},
    )


def _gcp(bucket: str) -> Grants:
    calls = [
        Call(
            "caller",
            "compute.machineTypes.aggregatedList, compute.acceleratorTypes.aggregatedList",
            "offers",
        ),
        Call(
            "caller",
            "compute.instances.insert (provisioningModel SPOT, labels provisioner-job=<drill id>)",
            "launch",
        ),
        Call("caller", "compute.instances.aggregatedList, compute.zoneOperations.get", "watch"),
        Call(
            "vm",
            "GET metadata.google.internal/computeMetadata/v1/instance/preempted",
            "the agent polls for the notice",
        ),
        Call(
            "caller",
            "compute.instances.simulateMaintenanceEvent",
            "the interruption: a Spot VM is preempted (about 30 s notice)",
        ),
        Call("vm", "storage.objects.create checkpoints/<name>", "the notice's checkpoint"),
        Call("caller", "compute.instances.insert", "the replacement"),
        Call("vm", "storage.objects.get", "the replacement resumes"),
        Call(
            "caller",
            "compute.instances.delete",
            "the old instance (if still there) and the replacement",
        ),
        Call(
            "caller",
            "storage.objects.list, storage.objects.delete on <prefix>/<drill id>/",
            "cleanup",
        ),
    ]
    return Grants(
        "gcp",
        "compute.instances.simulateMaintenanceEvent",
        calls,
        [
            "roles/compute.instanceAdmin.v1 (includes compute.instances.simulateMaintenanceEvent)",
            "roles/iam.serviceAccountUser on the VM's service account",
            f"roles/storage.objectAdmin on gs://{bucket}",
        ],
        [f"roles/storage.objectAdmin on gs://{bucket} (the VM's service account)"],
        [
            "A custom role instead of instanceAdmin needs compute.instances.create, .delete, .get, .list, .setLabels, .setMetadata, .simulateMaintenanceEvent, compute.zoneOperations.get."
        ],
    )


def _azure(bucket: str) -> Grants:
    actions = [
        "Microsoft.Compute/virtualMachines/read",
        "Microsoft.Compute/virtualMachines/write",
        "Microsoft.Compute/virtualMachines/delete",
        "Microsoft.Compute/virtualMachines/simulateEviction/action",
        "Microsoft.Network/networkInterfaces/read",
        "Microsoft.Network/networkInterfaces/write",
        "Microsoft.Network/networkInterfaces/delete",
        "Microsoft.Network/networkInterfaces/join/action",
        "Microsoft.Network/virtualNetworks/subnets/join/action",
        "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action",
        "Microsoft.Resources/subscriptions/resourceGroups/read",
    ]
    calls = [
        Call("caller", "PUT .../networkInterfaces/<vm>-nic", "the VM's NIC"),
        Call(
            "caller",
            "PUT .../virtualMachines/<vm> (priority Spot, tags provisioner-job=<drill id>)",
            "launch",
        ),
        Call("caller", "GET .../virtualMachines", "watch"),
        Call(
            "vm",
            "GET 169.254.169.254/metadata/scheduledevents",
            "the agent polls for the Preempt event",
        ),
        Call(
            "caller",
            "POST .../virtualMachines/<vm>/simulateEviction",
            "the interruption: a Preempt event, then eviction (at least 30 s)",
        ),
        Call(
            "vm",
            "POST scheduledevents StartRequests",
            "the agent approves the event once its checkpoint is in",
        ),
        Call("vm", "Blob PUT checkpoints/<name>", "the notice's checkpoint"),
        Call("caller", "PUT .../virtualMachines/<vm2>", "the replacement"),
        Call(
            "caller",
            "DELETE .../virtualMachines/<vm>, DELETE .../networkInterfaces/<vm>-nic",
            "cleanup",
        ),
        Call("caller", "Blob DELETE <prefix>/<drill id>/*", "cleanup: the drill's objects"),
    ]
    return Grants(
        "azure",
        "virtualMachines.simulateEviction",
        calls,
        [*actions, f"Storage Blob Data Contributor on {bucket}"],
        [f"Storage Blob Data Contributor on {bucket} (the VM's managed identity)"],
        ["As a custom role: the Actions above on the resource group the drill uses."],
    )


def _substitute(cloud: str, bucket: str) -> Grants:
    if cloud == "alibaba":
        prefix, store, kind = "ecs:", "the shared NAS file system (mounted on every VM)", "RAM"
        docs = (
            "Alibaba ECS API reference (ecs 2014-05-26): no action interrupts or simulates the "
            "reclaim of a preemptible instance; the notice is only served at "
            "meta-data/instance/spot/termination-time when ECS reclaims one."
        )
    else:
        prefix, store, kind = "cvm:", "the shared CFS file system (mounted on every VM)", "CAM"
        docs = (
            "Tencent CVM API reference (2017-03-12): no action interrupts a spot instance; the "
            "notice is only served at meta-data/spot/termination-time when CVM reclaims one."
        )
    verbs = [
        "DescribeInstances",
        "RunInstances",
        "TerminateInstances",
        "DescribeInstanceTypeConfigs" if cloud == "tencent" else "DescribeInstanceTypes",
    ]
    calls = [
        Call("caller", f"{prefix}RunInstances (spot, tagged provisioner-job=<drill id>)", "launch"),
        Call("caller", f"{prefix}DescribeInstances", "watch"),
        Call(
            "vm",
            "GET the metadata service's spot termination-time",
            "the agent polls for the notice",
        ),
        Call(
            "caller",
            "write <store>/<drill id>/drill/notice",
            f"substitute: a {cloud} termination-time notice the agent serves itself",
        ),
        Call("vm", "checkpoints/<name> into the store", "the notice's checkpoint"),
        Call("caller", f"{prefix}RunInstances", "the replacement"),
        Call(
            "caller",
            f"{prefix}TerminateInstances",
            "substitute for the reclaim: the old instance, once its checkpoint is in",
        ),
        Call("caller", "delete <store>/<drill id>/", "cleanup"),
    ]
    return Grants(
        cloud,
        f"none: a substitute (a {cloud} notice from the store, then TerminateInstances)",
        calls,
        [prefix + v for v in verbs]
        + (["ecs:CreateTags"] if cloud == "alibaba" else ["tag:TagResources"]),
        [f"read and write on {store}"],
        [
            docs,
            f"{kind} actions above; the report marks the interrupt and notice steps as a substitute.",
        ],
    )


def grants(cloud: str, bucket: str = "BUCKET") -> Grants:
    if cloud == "aws":
        return _aws(bucket)
    if cloud == "gcp":
        return _gcp(bucket)
    if cloud == "azure":
        return _azure(bucket)
    if cloud in ("alibaba", "tencent"):
        return _substitute(cloud, bucket)
    if cloud == "sim":
        return Grants(
            "sim",
            "the sim's own preemption",
            [
                Call("caller", "POST /v1/launch", "launch a sandbox"),
                Call("caller", "POST /v1/instances/<id>/preempt", "the interruption"),
                Call("caller", "POST /v1/terminate", "cleanup"),
            ],
            [],
            [],
            ["No account: everything runs on this machine."],
        )
    raise ValueError(f"unknown provider {cloud!r}")


def bucket_of(uri: str | None) -> str:
    """``s3://bucket/prefix`` -> ``bucket`` (``BUCKET`` when none is given)."""
    if not uri or "://" not in uri:
        return "BUCKET"
    rest = uri.split("://", 1)[1]
    return rest.split("/", 1)[0] or "BUCKET"
