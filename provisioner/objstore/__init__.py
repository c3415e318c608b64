"""The object store, on the node side: where checkpoints, progress, logs, the job's code and
the agent's wheel are kept (``s3://``, ``gs://``, ``az://``, ``file://``).

- :mod:`provisioner.objstore.fs`: :func:`~provisioner.objstore.fs.filesystem` (fsspec's
  filesystems, ``s3://`` through boto3) and
  :func:`~provisioner.objstore.fs.reach_problem` (what `up` checks of a store);
- :mod:`provisioner.objstore.s3errors`: S3's errors as Python's (``OSError`` subclasses).

Used by the agent (its checkpoint store, :mod:`provisioner.agent.store`), the job's code
(:mod:`provisioner.jobcode`), the agent's wheel (:mod:`provisioner.agentwheel`) and `up`
(:mod:`provisioner.submission`); it imports nothing of theirs.
"""
