"""What a policy costs: trace replay, the offline optimum, and the decide()-driven simulator.

* :mod:`~provisioner.simulate.scenario`: the job model and the per-window results;
* :mod:`~provisioner.simulate.engine`: the daemon's ``decide()`` over a virtual clock
  (``provisioner simulate``);
* :mod:`~provisioner.simulate.replay`: the same strategies over many windows at once, with
  numpy (the benchmark's fast path; tests check it agrees with the engine);
* :mod:`~provisioner.simulate.optimum`: the exact offline optimum and the simple lower bound.
"""

from provisioner.simulate.scenario import RunStats, Scenario

__all__ = ["RunStats", "Scenario"]
