"""One error tree: every exception the project raises derives from :class:`ProvisionerError`,
through the family that says what went wrong.

Catch a family to handle all of its kind (``except InputError``), the root to handle anything of
ours; the CLI gives each family its exit code from one table (``EXIT_CODES``, below).
A class that was a builtin's before the tree keeps that base too, after its family
(``class PolicyError(InputError, ValueError)``): pydantic validators, ``except ValueError`` in
callers and ``except OSError`` around file access behave as they did. The builtin bases are
shown in brackets.

The tree (``tests/test_errors.py`` checks it against the classes themselves)::

    ProvisionerError
      InputError
        policies.loader.PolicyError [ValueError]
        policies.safeyaml.Refusal
        policies.secretref.SecretRefError [ValueError]
        provisioner.control.notify.targets.TargetsError [ValueError]
        provisioner.core.catalog.CatalogError [ValueError]
        provisioner.core.network.NetworkFileError [ValueError]
        provisioner.core.planner.planrows.PlanError [ValueError]
        provisioner.core.traces.TraceError [ValueError]
        provisioner.dashboard.access.DashboardError [ValueError]
        provisioner.dashboard.routes.BadRequest [ValueError]
        provisioner.preflight.Refused [ValueError]
          provisioner.preflight.NothingEligible
      CloudError
        providers.azure.errors.RetailError
        providers.base.ProviderError
        providers.base.ProviderUnavailable
        providers.gcp.errors._OperationError
        providers.secretref.SecretError [RuntimeError]
        providers.sim.client.SimUnreachable
        providers.sim.config.SimError
        providers.sim.groups.GroupError
      StoreError
        provisioner.objstore.s3errors.ObjectStoreError [OSError]
          provisioner.objstore.s3errors.AccessDeniedError [PermissionError]
          provisioner.objstore.s3errors.NoSuchBucketError [FileNotFoundError]
          provisioner.objstore.s3errors.ThrottledError
      ControlError
        provisioner.control.effects.Pending
        provisioner.control.guard.GuardViolation [RuntimeError]
        provisioner.control.jobpass.state.LeaseLost [RuntimeError]
        provisioner.core.states.TransitionError [ValueError]
      AgentError
        providers.bootstrap.BootstrapError [ValueError]
        provisioner.agent.container.NoEngine [RuntimeError]
        provisioner.agent.gang.RendezvousError [RuntimeError]
        provisioner.agent.prepare.SetupFailed
        provisioner.agent.prepare.Stopped
        provisioner.agent.spec.SpecError [ValueError]
        provisioner.agentwheel.WheelError [ValueError]
        provisioner.jobcode.CodeError [ValueError]
      SimulationError
        provisioner.simulate.priors.AdvisorError [ValueError]
        provisioner.simulate.run.SimulateError [ValueError]
      NotifyError
        provisioner.control.notify.send.NoApprise [RuntimeError]
        provisioner.control.notify.send.SendError [RuntimeError]
      JobError
        provisioner.api.JobFailed [RuntimeError]
      DrillError
        provisioner.drill.runner.DrillStopped
      ProbeError
        provisioner.probe.nvml.NVMLUnavailable [RuntimeError]

This module imports nothing of ours, so every layer, ``policies`` included, may import it.
"""

from __future__ import annotations

__all__ = [
    "AgentError",
    "CloudError",
    "ControlError",
    "DrillError",
    "InputError",
    "JobError",
    "NotifyError",
    "ProbeError",
    "ProvisionerError",
    "SimulationError",
    "StoreError",
]


class ProvisionerError(Exception):
    """The root: anything the project raises on purpose."""


class InputError(ProvisionerError):
    """What the user gave cannot be used as given: a policy, a catalog/trace/network file, a
    targets file, a flag, a dashboard setting, a submission refused before it is written
    (CLI exit 2; 3 when nothing is eligible)."""


class CloudError(ProvisionerError):
    """A cloud (or the sim standing in for one) refused a call, failed, could not be reached,
    or cannot be spoken to here (no SDK, no configuration) (CLI exit 4)."""


class StoreError(ProvisionerError):
    """A store of ours cannot be used: the object store that holds a job's code and
    checkpoints. (The job store's own database errors are SQLAlchemy's and sqlite3's; the CLI
    gives them exit 2 beside this family.)"""


class ControlError(ProvisionerError):
    """The controller stops itself: a state change the table refuses, a launch that would
    break a money or residency rule, a job's lease lost to another replica, a slow call
    left for the next pass."""


class AgentError(ProvisionerError):
    """The job's side: what travels to the VM (its spec, code, the agent's wheel, the boot
    script) and what runs there (setup, the container engine, a gang's rendezvous)."""


class SimulationError(ProvisionerError):
    """A simulation that cannot be set up as asked, or a Spot Advisor file it cannot read."""


class NotifyError(ProvisionerError):
    """A notification that cannot be sent (apprise not installed, a target refused it)."""


class JobError(ProvisionerError):
    """A job that did not succeed (CLI exit 5)."""


class DrillError(ProvisionerError):
    """A recovery drill that cannot go on."""


class ProbeError(ProvisionerError):
    """A GPU measurement that cannot be made here (no NVML, no driver, no GPU)."""


# -- exit codes -------------------------------------------------------------------------------

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_NOTHING_ELIGIBLE = 3
EXIT_NOT_FOUND = 3
EXIT_PROVIDER = 4
EXIT_JOB_FAILED = 5
EXIT_UNMEETABLE = 6
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of our output went away

#: The one table from an error to the command line's exit code (the CLI's and the API's
#: ``Refused.exit_code``), by the families of the error tree
#: (``provisioner.errors``): the first class along the exception's MRO named here wins, so a
#: class listed beside its family overrides it; an error outside every family listed is 1. Names,
#: not classes, so the table imports nothing (``tests/test_errors.py`` resolves each one).
#: The job store's database errors (SQLAlchemy's, sqlite3's) are 2 beside it.
EXIT_CODES: dict[str, int] = {
    "provisioner.errors.InputError": EXIT_BAD_INPUT,
    "provisioner.preflight.NothingEligible": EXIT_NOTHING_ELIGIBLE,
    "provisioner.errors.CloudError": EXIT_PROVIDER,
    "provisioner.errors.JobError": EXIT_JOB_FAILED,
}


def exit_code_for(exc: BaseException) -> int:
    """The exit code :data:`EXIT_CODES` gives ``exc`` (1 when no class of it is listed)."""
    for cls in type(exc).__mro__:
        code = EXIT_CODES.get(f"{cls.__module__}.{cls.__qualname__}")
        if code is not None:
            return code
    return EXIT_ERROR
