"""vLLM's multimodal memory: the processor cache, the encoder cache and the GPU decode pool.

Every rule is that of the vLLM release chosen (``versions``), read from its wheel by
``scripts/gen_vllm_tables.py``; vLLM itself is never imported. Pure core: standard library only.
"""

from mmpool_cli.engines.vllm import codes as _codes  # noqa: F401 - registers vLLM's finding codes
