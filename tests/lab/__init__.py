"""A network-namespace lab that reproduces a pod with an OpenVPN sidecar, its cluster DNS and the
network behind the tunnel, with real processes.

`Lab().up()` builds it (see `topology` for the picture), `python -m tests.lab up|down|status`
does the same by hand, and `tests.lab.fixtures.lab_session` backs pytest fixtures.
"""

from .netns import LabError
from .topology import Lab, PodSpec

__all__ = ["Lab", "LabError", "PodSpec"]
