"""A prompt's tokens as the model's tokenizer gives them, its media items left as slots for the engine
to pad: the model's chat template and tokenizer where they can be loaded (a local model folder, or the
Hugging Face hub cache, never the network), else an estimate that says so.

``transformers`` is optional and imported only by ``load``. The estimate renders the family's chat
format (ChatML: ``<|im_start|>role ... <|im_end|>``) and counts one token per word, run of punctuation
or special token; equal texts give equal ids, so prompts that repeat earlier turns share their prefix
as they do in the engine, only the counts are estimated. Pure core: standard library only, and the
estimate's compiled twin where it was built (``kernels/_prefixreplay.c``'s ``estimate``).
"""

from __future__ import annotations

import hashlib
import os
import re
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from types import ModuleType
from typing import Any, Protocol, TypeAlias

from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.traffic.prompts import Message, Prompt
from mmpool_cli.kernels.native import compiled

FAST: ModuleType | None = compiled("_prefixreplay")
# ids the estimate gives text pieces: below any engine's media pads (SGLang's start at 1,000,000)
ESTIMATE_VOCAB = 1 << 19
_PIECES = re.compile(r"<\|[^|<>\s]{1,40}\|>|\s?[^\W\d_]+|\s?\d{1,3}|\s?[^\w\s]+|\s+")
MIN_VOCAB = 256
MAX_PIECES = 1 << 20
MAX_MEMO_CHARS = 1 << 26
TURN = "<|im_start|>"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
MARK = "\x00mmpool-item\x00"  # where an item goes in a rendered prompt (no tokenizer splits inside it)


class TokenizerError(MmpoolError):
    """A tokenizer named that cannot be loaded (exit 2)."""


@dataclass(frozen=True)
class Chat:
    """How a family's chat format writes a turn (the estimate's template) and where an item goes."""

    default_system: str | None  # the system message the template adds when the chat has none
    item_text: dict[str, str]  # kind -> the text the template writes for one item (placeholder included)


class Tokenizer(Protocol):
    """Text -> token ids, and a chat -> its rendered text with ``MARK`` at each item."""

    estimated: bool
    name: str

    def encode(self, text: str) -> list[int]: ...

    def render(self, messages: Sequence[Message], chat: Chat) -> str: ...


class Estimated:
    """One token per word, number group, punctuation run or special token: an estimate, said so."""

    estimated = True
    name = "estimate"

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}  # piece -> id: chats repeat their words turn after turn

    def encode(self, text: str) -> list[int]:
        pieces = _PIECES.findall(text)
        ids = self.ids
        out: list[int | None] = list(map(ids.get, pieces))  # chats repeat their words: most are known
        if None not in out:
            return out  # type: ignore[return-value]  # every piece known: ints only
        for n, got in enumerate(out):
            if got is None:
                piece = pieces[n]
                got = ids.get(piece)  # seen earlier in this text
                if got is None:
                    digest = hashlib.blake2b(piece.encode(), digest_size=8).digest()
                    got = int.from_bytes(digest, "big") % ESTIMATE_VOCAB
                    if len(ids) < MAX_PIECES:  # bounded: a log of random text does not grow it without limit
                        ids[piece] = got
                out[n] = got
        return out  # type: ignore[return-value]  # every None replaced

    def ids_of(self, text: str) -> array[int]:
        """``encode`` as int64 ids (compiled where ``kernels/_prefixreplay.c`` was built: its ``estimate``
        gives ``_PIECES``' pieces, kept equal by ``tests/inputs/traffic/test_tokens.py``)."""
        if FAST is not None:
            got = FAST.estimate(text, self.ids)
            if got is not None:  # every piece known
                out = array("q")
                out.frombytes(got)
                return out
        try:
            return array("q", map(self.ids.__getitem__, _PIECES.findall(text)))  # every piece known
        except KeyError:  # a piece not seen yet
            return array("q", self.encode(text))

    def render(self, messages: Sequence[Message], chat: Chat) -> str:
        return render_chatml(messages, chat)


def render_chatml(messages: Sequence[Message], chat: Chat) -> str:
    """The chat as ChatML, a generation prompt at its end, ``MARK`` + kind at each item."""
    out = []
    if chat.default_system is not None and (not messages or messages[0].role != "system"):
        out.append(f"<|im_start|>system\n{chat.default_system}<|im_end|>\n")
    for m in messages:
        body = "".join(p if isinstance(p, str) else MARK + p[0] + MARK for p in m.parts)
        out.append(f"<|im_start|>{m.role}\n{body}<|im_end|>\n")
    out.append("<|im_start|>assistant\n")
    return "".join(out)


class Loaded:
    """A Hugging Face tokenizer and its chat template (``transformers``)."""

    estimated = False

    def __init__(self, tok: Any, name: str) -> None:
        self.tok = tok
        self.name = name

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def render(self, messages: Sequence[Message], chat: Chat) -> str:
        if not getattr(self.tok, "chat_template", None):
            return render_chatml(messages, chat)
        marks = {kind: f"{MARK}{kind}{MARK}" for kind in chat.item_text}
        plain = []
        for m in messages:
            content: list[dict[str, str]] = []
            for p in m.parts:
                content.append({"type": "text", "text": p} if isinstance(p, str) else {"type": p[0]})
            plain.append({"role": m.role, "content": content})
        text = str(self.tok.apply_chat_template(plain, tokenize=False, add_generation_prompt=True))
        # the template writes each item's own text: put the marks back in its place, in order
        for kind, item in chat.item_text.items():
            text = text.replace(item, marks[kind])
        return text


def load(name: str | None) -> Loaded | None:
    """The tokenizer of a model folder or of a hub name already in the local hub cache; None where
    ``name`` is None or ``transformers`` is not installed.

    Raises:
        TokenizerError: ``name`` given but no tokenizer there.
    """
    if name is None:
        return None
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    try:
        tok = AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception as e:  # transformers raises OSError, ValueError, KeyError... for a folder without one
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise TokenizerError(f"no tokenizer can be loaded from {name} (local files only): {first}") from None
    try:  # transformers builds an empty tokenizer from a folder with a config.json and no vocabulary
        usable = len(tok) >= MIN_VOCAB and bool(tok.encode("Hello, world", add_special_tokens=False))
    except Exception:
        usable = False
    if not usable:
        raise TokenizerError(f"no tokenizer can be loaded from {name} (local files only): it holds no vocabulary")
    return Loaded(tok, name)


def try_load(name: str) -> Loaded | None:
    """``load`` for a model folder that may have no tokenizer: None instead of an error (and
    ``transformers`` not imported where the folder holds none of a tokenizer's files)."""
    if not any(os.path.isfile(os.path.join(name, f)) for f in TOKENIZER_FILES):
        return None
    try:
        return load(name)
    except TokenizerError:
        return None


@dataclass(frozen=True)
class Tokens:
    """A prompt's tokens: text runs as ids, each item as ``(kind, index)`` in the order the items came."""

    runs: tuple[tuple[int, ...] | tuple[str, int], ...]

    @property
    def text_tokens(self) -> int:
        return sum(len(r) for r in self.runs if not (r and isinstance(r[0], str)))


Segment: TypeAlias = "array[int] | str"  # a text run's ids, or an item's kind where the item goes
GENERATION = "<|im_start|>assistant\n"


class Memo:
    """Text runs and messages already tokenized (a chat's next turn repeats its earlier turns),
    bounded in characters."""

    def __init__(self, tokenizer: Tokenizer, max_chars: int = MAX_MEMO_CHARS) -> None:
        self.tokenizer = tokenizer
        self.ids_of = getattr(tokenizer, "ids_of", None) or self._ids_of
        self.runs: dict[str, tuple[int, ...]] = {}
        self.messages: dict[Message, tuple[Segment, ...]] = {}
        self.chars = 0
        self.max_chars = max_chars
        self.generation: array[int] | None = None

    def _ids_of(self, text: str) -> array[int]:
        return array("q", self.tokenizer.encode(text))

    def chatml(self, messages: Sequence[Message], chat: Chat) -> list[Segment] | None:
        """The ids ``tokens_of`` gives the ChatML rendering of ``messages`` (``render_chatml``), made
        message by message: ChatML starts each message with a special token, where ``encode`` splits
        the text anyway, so a message's runs are the same wherever it comes, and a chat's next turn
        looks its earlier messages up instead of rendering and splitting them again. Items are their
        kind. None where a message holds a NUL (where ``MARK`` could hide): then ``tokens_of``."""
        if chat.default_system is not None and (not messages or messages[0].role != "system"):
            messages = (Message("system", (chat.default_system,)), *messages)
        found = list(map(self.messages.get, messages))  # a chat's earlier messages: known
        if None in found:
            for n, got in enumerate(found):
                if got is None:
                    got = found[n] = self._message(messages[n])
                    if got is None:
                        return None
        out: list[Segment] = list(chain.from_iterable(found))  # type: ignore[arg-type]  # no None left
        if self.generation is None:
            self.generation = array("q", self.encode(GENERATION))
        out.append(self.generation)
        return out

    def _message(self, m: Message) -> tuple[Segment, ...] | None:
        # its rendering split at MARK, made from its parts: the text between its items, the kinds
        if "\x00" in m.role:
            return None
        texts: list[str] = []
        text = f"{TURN}{m.role}\n"
        for p in m.parts:
            if type(p) is str:
                if "\x00" in p:
                    return None  # a NUL of its own: the whole text's split decides where its items are
                text += p
            else:
                texts.append(text)
                texts.append(p[0])
                text = ""
        texts.append(text + "<|im_end|>\n")
        got: list[Segment] = []
        runs = self.runs
        ids_of = self.ids_of
        size = 0
        for i, piece in enumerate(texts):
            size += len(piece)
            if i % 2:
                got.append(piece)  # an item's kind
            elif piece:
                known = runs.get(piece)  # a message's head ("<|im_start|>user\n") recurs
                if known is not None:
                    got.append(array("q", known))
                elif TURN in piece[1:]:
                    got.append(array("q", self.encode(piece)))
                else:  # one turn: ``encode``'s own result without its split; heads are kept
                    ids = ids_of(piece)
                    if i == 0 and len(texts) > 1 and self.chars + len(piece) <= self.max_chars:
                        runs[piece] = tuple(ids)
                        self.chars += len(piece)
                    got.append(ids)
        out = tuple(got)
        if self.chars + size <= self.max_chars:
            self.messages[m] = out
            self.chars += size
        return out

    def encode(self, text: str) -> tuple[int, ...]:
        # each turn apart: ChatML starts every turn with a special token, where tokenizers split anyway
        out: list[int] = []
        for n, turn in enumerate(text.split(TURN)):
            piece = turn if n == 0 else TURN + turn
            if not piece:
                continue
            got = self.runs.get(piece)
            if got is None:
                got = tuple(self.tokenizer.encode(piece))
                if self.chars + len(piece) <= self.max_chars:
                    self.runs[piece] = got
                    self.chars += len(piece)
            out.extend(got)
        return tuple(out)


def tokens_of(prompt: Prompt, tokenizer: Tokenizer, chat: Chat, memo: Memo | None = None) -> Tokens | None:
    """The prompt's tokens, items as slots; None where it carries no messages or text mmpool can place
    items in (a templated text without the family's item text, or one cut by the log)."""
    if prompt.messages is not None:
        text = tokenizer.render(prompt.messages, chat)
    elif prompt.text is not None:
        text = prompt.text
        for kind, item in chat.item_text.items():
            text = text.replace(item, f"{MARK}{kind}{MARK}")
    else:
        return None
    runs: list[tuple[int, ...] | tuple[str, int]] = []
    pieces = text.split(MARK)
    index = 0
    for i, piece in enumerate(pieces):
        if i % 2:
            runs.append((piece, index))
            index += 1
        elif piece:
            runs.append((memo or Memo(tokenizer)).encode(piece))
    return Tokens(tuple(runs))


def prompt_segments(prompt: Prompt, tokenizer: Tokenizer, chat: Chat, memo: Memo) -> list[Segment] | None:
    """The prompt's text runs (int64 ids) and items (their kind), in order: ``tokens_of``'s, the
    estimate's ChatML made message by message (``Memo.chatml``); None where ``tokens_of`` gives none."""
    if type(tokenizer) is Estimated and prompt.messages is not None:
        got = memo.chatml(prompt.messages, chat)
        if got is not None:
            return got
    runs = tokens_of(prompt, tokenizer, chat, memo)
    if runs is None:
        return None
    return [r[0] if r and isinstance(r[0], str) else array("q", r) for r in runs.runs]
