"""The engines mmpool plans for, each in a package of its own (``engines/sglang/``)."""
