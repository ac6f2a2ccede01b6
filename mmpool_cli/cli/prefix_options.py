"""``mmpool cache``'s flags for SGLang's radix (prefix) cache, named as SGLang names them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from mmpool_cli.errors import MmpoolError

if TYPE_CHECKING:
    from mmpool_cli.inputs.traffic.cache_request import PrefixOptions

MAX_KV_TOKENS = 1 << 40
MAX_PAGE = 1 << 16

MaxTotalTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--max-total-tokens",
        metavar="N",
        help="The KV capacity in tokens the radix cache shares (SGLang's max_total_num_tokens).",
    ),
]
DisableRadixOpt = Annotated[
    bool, typer.Option("--disable-radix-cache", help="As given to SGLang: no prefix cache, every item looked up.")
]
PageSizeOpt = Annotated[int, typer.Option("--page-size", metavar="N", help="As given to SGLang.")]
TokenizerPathOpt = Annotated[
    str | None,
    typer.Option(
        "--tokenizer-path",
        metavar="DIR|NAME",
        help="The tokenizer and chat template (default: --model DIR's; else the text's tokens are estimated).",
    ),
]


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
