"""``provisioner logs`` and ``provisioner exec``: what a job said, and a way in beside it.

``logs`` prints the controller's events (launches and why, notices, checkpoints, preemptions,
restarts) and the job's own output (stdout and stderr as its agent shipped them to the
checkpoint store, ``provisioner.agent.logship``) interleaved by time, each output line marked
with its attempt (``a2``) and stream (``job`` or ``setup``). ``--follow`` keeps printing until
the job ends.

``exec`` runs a command beside a running attempt. The sim runs it in the attempt's sandbox;
a cloud VM is reached with the cloud's own tool (provisioner opens no port and keeps no SSH
key), so there it prints the command for that cloud with the instance filled in.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from provisioner.cli import EXIT_NOT_FOUND, EXIT_OK
from provisioner.cli.common import fail, job_or_exit, json_option, open_store, store_option

#: how often --follow looks again
FOLLOW_S = 1.0

#: the cloud's own way onto a VM, by provider (the instance id, region and zone filled in)
REACH = {
    "aws": "aws ssm start-session --target {instance} --region {region}  "
    "(SSM Session Manager: the VM's instance profile needs AmazonSSMManagedInstanceCore)",
    "gcp": "gcloud compute ssh {instance} --zone {zone} --tunnel-through-iap",
    "azure": "az vm run-command invoke --name {instance} --resource-group RESOURCE_GROUP "
    "--command-id RunShellScript --scripts 'CMD'  (or az ssh vm)",
    "alibaba": "aliyun ecs RunCommand --RegionId {region} --InstanceId.1 {instance} "
    "--Type RunShellScript --CommandContent 'CMD'  (Cloud Assistant)",
    "tencent": "tccli tat RunCommand --region {region} --InstanceIds '[\"{instance}\"]' "
    "--Content $(echo -n 'CMD' | base64)  (TencentCloud Automation Tools)",
}


def _checkpoints(job: Any) -> Any:
    from provisioner.agent.store import CheckpointStore
    from provisioner.control.records import job_checkpoint_uri

    try:
        return CheckpointStore(job_checkpoint_uri(job), job.id)
    except Exception as exc:  # a store this machine cannot open: the events still print
        click.echo(f"(the job's output is not readable here: {exc})", err=True)
        return None


def _event_record(ev: Any) -> dict[str, Any]:
    return {
        "source": "event",
        "at": ev.at.isoformat(),
        "kind": ev.kind,
        "message": ev.message,
        "data": ev.data,
    }


def _line_record(line: Any) -> dict[str, Any]:
    return {
        "source": line.kind,
        "at": line.at,
        "attempt": line.attempt,
        "node": line.node,
        "text": line.text,
    }


def _print(records: list[dict[str, Any]], as_json: bool) -> None:
    from provisioner.core.timefmt import parse_time

    def when(r: dict[str, Any]) -> float:
        t = parse_time(r["at"])
        return t.timestamp() if t is not None else 0.0

    for r in sorted(records, key=when):
        if as_json:
            click.echo(json.dumps(r, default=str))
            continue
        t = parse_time(r["at"])
        stamp = f"{t:%Y-%m-%d %H:%M:%S}" if t is not None else r["at"][:19]
        if r["source"] == "event":
            click.echo(f"{stamp} {r['kind']:<12} {r['message']}")
        else:
            node = f"n{r['node']} " if r["node"] else ""
            click.echo(f"{stamp} a{r['attempt']} {node}{r['source']:<5} | {r['text']}")


@click.command()
@click.argument("job_id")
@store_option
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends.")
@click.option("--attempt", type=int, default=None, help="Only this attempt's output.")
@click.option("--events/--no-events", "show_events", default=True, help="The controller's events.")
@click.option("--output/--no-output", "show_output", default=True, help="The job's own output.")
@json_option
def logs(
    job_id: str,
    store_url: str | None,
    follow: bool,
    attempt: int | None,
    show_events: bool,
    show_output: bool,
    as_json: bool,
) -> None:
    """Print a job's events and its own output (stdout/stderr), interleaved by time.

    Output lines read `TIME aN job | text` (attempt N; `setup` for its setup's output).
    With --json, one JSON object a line: {"source": "event"|"job"|"setup", "at", ...}.
    """
    from provisioner.agent.logship import LogCursor, read_new
    from provisioner.control.store import FINAL_STATES

    store = open_store(store_url)
    job = job_or_exit(store, job_id)
    ckpt = _checkpoints(job) if show_output else None
    cursor = LogCursor()
    last = 0
    while True:
        final = (store.job(job.id) or job).state in FINAL_STATES
        records: list[dict[str, Any]] = []
        if show_events:
            for ev in store.events(job.id, after_id=last):
                last = ev.id
                records.append(_event_record(ev))
        if ckpt is not None:
            records += [_line_record(x) for x in read_new(ckpt, cursor, attempt)]
            for gap in cursor.gaps:
                click.echo(f"({gap})", err=True)
            cursor.gaps.clear()
        _print(records, as_json)
        if not follow or final:
            break
        time.sleep(FOLLOW_S)
    raise SystemExit(EXIT_OK)


@click.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.argument("job_id")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@store_option
def exec_(job_id: str, command: tuple[str, ...], store_url: str | None) -> None:
    """Run COMMAND beside JOB_ID's running attempt: `provisioner exec JOB -- nvidia-smi`.

    On the sim it runs in the attempt's sandbox, in the job's code directory, and exits with
    its exit code. On a cloud it prints how to reach the VM with that cloud's own tool.
    """
    store = open_store(store_url)
    job = job_or_exit(store, job_id)
    running = [a for a in store.attempts(job.id) if a.state == "running" and a.instance_id]
    if not running:
        fail(f"{job.id} has no running attempt (state {job.state})", EXIT_NOT_FOUND)
    cur = running[-1]
    if job.provider != "sim":
        how = REACH.get(job.provider)
        if how is None:
            fail(f"{job.provider}: no known way onto its VMs", EXIT_NOT_FOUND)
        click.echo(how.format(instance=cur.instance_id, region=cur.region, zone=cur.zone))
        raise SystemExit(EXIT_OK)
    from providers.sim.adapter import sandbox_of

    where = sandbox_of(cur.instance_id, dict(job.provider_options or {}))
    if where is None:
        fail(f"the sim has no sandbox for {cur.instance_id}", EXIT_NOT_FOUND)
    import subprocess

    work = where / "work"
    cwd = work / "code" if (work / "code").is_dir() else work
    raise SystemExit(subprocess.call(list(command), cwd=cwd))
