"""Measured GPUs: what a node's GPUs actually do, beside their datasheet.

- :mod:`provisioner.probe.run`: :func:`run_probe` (``provisioner probe``; the agent runs it at
  start on every node);
- :mod:`provisioner.probe.backends`: torch, CuPy and numpy backends (numpy is the CPU floor);
- :mod:`provisioner.probe.nvml`: utilisation, clock, power, temperature through NVML;
- :mod:`provisioner.probe.datasheet`: figures beside policies/gpus.csv;
- :mod:`provisioner.probe.measured`: per (cloud, instance type, GPU) summaries for the planner
  (pure);
- :mod:`provisioner.probe.idle`: the agent's idle-GPU tracker (pure);
- the controller's side (record, enforce the policy) is
  :mod:`provisioner.control.jobpass.probes`.

The probe runs on the node (the agent imports it); the controller keeps its results in the
store (:mod:`provisioner.control.store.probes`).

Nothing here is imported by ``provisioner plan`` except the pure ``measured`` module.
"""
