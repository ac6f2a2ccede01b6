"""``mmpool cache``'s flags for SGLang's radix (prefix) cache, named as SGLang names them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from mmpool_cli.cli.options import SGLANG_PANEL
from mmpool_cli.cli.vllm_options import PANEL
from mmpool_cli.errors import MmpoolError

if TYPE_CHECKING:
    from mmpool_cli.engines.vllm.prefix import PrefixFlags
    from mmpool_cli.inputs.traffic.cache_request import PrefixOptions

MAX_KV_TOKENS = 1 << 40
MAX_PAGE = 1 << 16

MaxTotalTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--max-total-tokens",
        metavar="N",
        help="The KV capacity in tokens the radix cache shares (SGLang's max_total_num_tokens).",
        rich_help_panel=SGLANG_PANEL,
    ),
]
DisableRadixOpt = Annotated[
    bool,
    typer.Option(
        "--disable-radix-cache",
        help="As given to SGLang: no prefix cache, every item looked up.",
        rich_help_panel=SGLANG_PANEL,
    ),
]
PageSizeOpt = Annotated[
    int, typer.Option("--page-size", metavar="N", help="As given to SGLang.", rich_help_panel=SGLANG_PANEL)
]
TokenizerPathOpt = Annotated[
    str | None,
    typer.Option(
        "--tokenizer-path",
        metavar="DIR|NAME",
        help="The tokenizer and chat template (default: --model DIR's; else the text's tokens are estimated).",
        rich_help_panel=SGLANG_PANEL,
    ),
]


NoPrefixCachingOpt = Annotated[
    bool,
    typer.Option(
        "--no-enable-prefix-caching",
        help="As given to vLLM: no prefix cache, every item encoded.",
        rich_help_panel=PANEL,
    ),
]
GpuBlocksOpt = Annotated[
    int | None,
    typer.Option(
        "--num-gpu-blocks-override",
        metavar="N",
        help="The KV blocks prefix caching shares (as vLLM's).",
        rich_help_panel=PANEL,
    ),
]
BlockSizeOpt = Annotated[
    int | None,
    typer.Option("--block-size", metavar="N", help="As given to vLLM (default 16).", rich_help_panel=PANEL),
]
TokenizerOpt = Annotated[
    str | None,
    typer.Option(
        "--tokenizer",
        metavar="DIR|NAME",
        help="As given to vLLM (default: --model DIR's; else estimated tokens).",
        rich_help_panel=PANEL,
    ),
]
# the radix cache's flags for SGLang, the block cache's for vLLM, and what to give the other engine instead
SGLANG_PREFIX = {
    "max_total_tokens": "vLLM's KV capacity is --num-gpu-blocks-override",
    "disable_radix_cache": "vLLM's is --no-enable-prefix-caching",
    "page_size": "vLLM's is --block-size",
    "tokenizer_path": "vLLM's is --tokenizer",
}
VLLM_PREFIX = {
    "no_prefix_caching": "SGLang's is --disable-radix-cache",
    "num_gpu_blocks": "SGLang's KV capacity is --max-total-tokens",
    "block_size": "SGLang's is --page-size",
    "tokenizer": "SGLang's is --tokenizer-path",
}


def vllm_prefix_flags(
    disabled: bool, num_blocks: int | None, block_size: int | None, tokenizer: str | None, model: str | None
) -> PrefixFlags:
    """vLLM's prefix-caching flags, checked (exit 2 out of bounds)."""
    import os

    from mmpool_cli.engines.vllm.prefix import PrefixFlags

    if num_blocks is not None and not 2 <= num_blocks <= MAX_KV_TOKENS:
        raise MmpoolError(f"--num-gpu-blocks-override {num_blocks}: from 2 (one is the null block) to {MAX_KV_TOKENS}")
    if block_size is not None and not 1 <= block_size <= MAX_PAGE:
        raise MmpoolError(f"--block-size {block_size}: from 1 to {MAX_PAGE} tokens")
    folder = model if model is not None and os.path.isdir(model) else None
    return PrefixFlags(not disabled, num_blocks, block_size or 16, tokenizer, folder)


def prefix_options(
    max_total_tokens: int | None, disabled: bool, page_size: int, tokenizer: str | None
) -> PrefixOptions:
    """The radix cache's flags, checked (exit 2 out of bounds)."""
    from mmpool_cli.inputs.traffic.cache_request import PrefixOptions

    if max_total_tokens is not None and not 1 <= max_total_tokens <= MAX_KV_TOKENS:
        raise MmpoolError(f"--max-total-tokens {max_total_tokens}: from 1 to {MAX_KV_TOKENS} tokens")
    if not 1 <= page_size <= MAX_PAGE:
        raise MmpoolError(f"--page-size {page_size}: from 1 to {MAX_PAGE} tokens")
    if max_total_tokens is not None and max_total_tokens % page_size:
        raise MmpoolError(
            f"--max-total-tokens {max_total_tokens}: SGLang's KV pool holds whole pages of --page-size {page_size}; "
            "give a multiple of it"
        )
    return PrefixOptions(max_total_tokens, disabled, page_size, tokenizer)
