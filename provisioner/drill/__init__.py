"""``provisioner drill``: one tiny job through a real interruption on the user's own account.

- :mod:`provisioner.drill.job`: the job (seconds of checkpointed work, a known result)
- :mod:`provisioner.drill.target`: what a drill runs with, and the policy it writes
- :mod:`provisioner.drill.steps`: the steps as data, with their timings; the report
- :mod:`provisioner.drill.interrupters`: per cloud, how the interruption is triggered
- :mod:`provisioner.drill.ledger`: what the drill made, on disk, for ``--cleanup`` after a kill
- :mod:`provisioner.drill.runner`: the run (submit, supervise, interrupt, watch each step)
- :mod:`provisioner.drill.cpu`: ``--gpu none``: one small CPU spot type per cloud, placed by
  the drill's own controller
- :mod:`provisioner.drill.cleanup`: deleting everything the ledger names
- :mod:`provisioner.drill.permissions`: ``--dry-run``: the API calls in order and the
  permissions the caller and the VM need

See docs/getting-started.md ("Prove it on your account").
"""
