"""``mmpool probe``: prove on the real GPU that the planned pools can be allocated, shared and read.

torch and NVML are imported only inside this package's functions, and torch only in child
processes: the process that runs ``mmpool`` never creates a CUDA context.
"""

from mmpool_cli.probe import codes as _codes  # noqa: F401 - registers the probe's finding codes
