"""SGLang's own rules: the pool arithmetic, its flags and --config merge, the launch environment."""

from mmpool_cli.engines.sglang import codes as _codes  # noqa: F401 - registers SGLang's finding codes
