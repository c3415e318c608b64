"""Example jobs for provisioner (``python -m examples.train``)."""
