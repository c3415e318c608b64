"""The control loop: the store, one job's pass, the reconciler over all jobs, the daemon."""
