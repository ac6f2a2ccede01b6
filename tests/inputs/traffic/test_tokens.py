"""A prompt's tokens: the model's tokenizer and chat template from a folder, or the estimate, said so.

tests/data/byte-tokenizer is a byte-level tokenizer with a ChatML template (its README says how it
was made): transformers loads it from the folder, nothing is downloaded.
"""

from __future__ import annotations

import random
from array import array
from pathlib import Path

import pytest

from mmpool_cli.inputs.traffic.prompts import Message, Prompt, messages_of
from mmpool_cli.inputs.traffic.tokens import (
    _PIECES,
    ESTIMATE_VOCAB,
    FAST,
    MARK,
    Chat,
    Estimated,
    Memo,
    TokenizerError,
    load,
    render_chatml,
    tokens_of,
    try_load,
)

BYTES = Path(__file__).parents[2] / "data" / "byte-tokenizer"
ITEM = "<|vision_start|><|image_pad|><|vision_end|>"
CHAT = Chat("You are a helpful assistant.", {"image": ITEM})


def chat(*turns: str | tuple[str, ...]) -> Prompt:
    messages = []
    for n, turn in enumerate(turns):
        role = "user" if n % 2 == 0 else "assistant"
        if isinstance(turn, tuple):
            parts = [
                {"type": "image_url", "image_url": {"url": "-"}} if t == "<img>" else {"type": "text", "text": t}
                for t in turn
            ]
            messages.append({"role": role, "content": parts})
        else:
            messages.append({"role": role, "content": turn})
    got = messages_of(messages)
    assert got is not None
    return Prompt(got)


def test_the_estimate_renders_chatml_with_the_default_system_message() -> None:
    p = chat(("<img>", "What is it?"))
    assert p.messages is not None
    text = render_chatml(p.messages, CHAT)
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n")
    assert text.endswith("What is it?<|im_end|>\n<|im_start|>assistant\n")


def test_the_estimates_next_turn_repeats_the_earlier_turns_tokens() -> None:
    first = tokens_of(chat(("<img>", "What is it?")), Estimated(), CHAT)
    second = tokens_of(chat(("<img>", "What is it?"), "A cat.", ("And this?", "<img>")), Estimated(), CHAT)
    assert first is not None and second is not None
    assert second.runs[: len(first.runs) - 1] == first.runs[:-1]  # up to the generation prompt
    assert [r for r in second.runs if isinstance(r[0], str)] == [("image", 0), ("image", 1)]
    assert all(0 <= t < ESTIMATE_VOCAB for r in second.runs if not isinstance(r[0], str) for t in r)
    # one token per word, punctuation run or special token
    assert Estimated().encode("<|im_start|>user\nWhat is it?") == Estimated().encode("<|im_start|>user\nWhat is it?")
    assert len(Estimated().encode("<|im_start|>user\nWhat is it?")) == 6


def test_a_templated_text_places_items_where_the_family_writes_them() -> None:
    got = tokens_of(Prompt(text=f"<|im_start|>user\n{ITEM}Hi<|im_end|>"), Estimated(), CHAT)
    assert got is not None and got.runs[1] == ("image", 0)
    assert tokens_of(Prompt(), Estimated(), CHAT) is None


def test_a_tokenizer_from_a_folder_with_its_chat_template() -> None:
    pytest.importorskip("transformers")
    tok = load(str(BYTES))
    assert tok is not None and not tok.estimated
    got = tokens_of(chat(("<img>", "Hi")), tok, CHAT)
    assert got is not None
    head, slot, tail = got.runs
    assert slot == ("image", 0)
    assert tok.encode("<|im_start|>user\n") == list(head)  # the template's own text, no default system turn
    assert list(tail) == tok.encode("Hi<|im_end|>\n<|im_start|>assistant\n")
    assert got.text_tokens == len(head) + len(tail)


def test_a_folder_without_a_tokenizer(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
    assert try_load(str(tmp_path)) is None  # no tokenizer file: transformers is not even asked
    pytest.importorskip("transformers")
    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": "Qwen2Tokenizer"}')
    with pytest.raises(TokenizerError, match="no tokenizer can be loaded"):
        load(str(tmp_path))  # transformers builds an empty one from the config: refused
    assert try_load(str(tmp_path)) is None
    assert load(None) is None


PIECES = ["a", "b c", " x", "12", "345678", ",.!", "\n\n", "<|im_start|>", "<|im_end|>", "héllo", "_", "  ", ITEM]


def random_chat(rng: random.Random) -> tuple[Message, ...]:
    """Messages with text that holds ChatML's own turn marks, items anywhere, empty turns, NULs."""
    out = []
    for _ in range(rng.randrange(0, 6)):
        parts: list[str | tuple[str]] = []
        for _ in range(rng.randrange(0, 4)):
            if rng.random() < 0.3:
                parts.append((rng.choice(["image", "video"]),))
            else:
                parts.append("".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 5))))
        if rng.random() < 0.05:
            parts.append(rng.choice(["\x00", MARK]))
        out.append(Message(rng.choice(["system", "user", "assistant", "tool"]), tuple(parts)))
    return tuple(out)


@pytest.mark.parametrize("seed", range(4))
def test_chatml_message_by_message_gives_the_ids_of_the_whole_rendering(seed: int) -> None:
    rng = random.Random(seed)
    memo = Memo(Estimated())
    chats = [CHAT, Chat(None, {"image": ITEM})]
    nul = 0
    for _ in range(400):
        messages = random_chat(rng)
        chat = rng.choice(chats)
        want = tokens_of(Prompt(messages), Estimated(), chat)
        assert want is not None
        got = memo.chatml(messages, chat)
        if got is None:  # a NUL of its own: the whole rendering decides
            nul += 1
            assert any("\x00" in p for m in messages for p in m.parts if isinstance(p, str))
            continue
        flat = [t for seg in got if not isinstance(seg, str) for t in seg]
        assert flat == [t for r in want.runs if not (r and isinstance(r[0], str)) for t in r]
        assert [s for s in got if isinstance(s, str)] == [r[0] for r in want.runs if r and isinstance(r[0], str)]
    assert nul  # the NULs were met


def test_the_estimates_array_ids_are_its_ids() -> None:
    est = Estimated()
    for text in ("the truck, 12 north", "the truck, 12 north", "new words here", ""):
        assert list(est.ids_of(text)) == est.encode(text)


ALPHABET = [
    *"ab Z_09 \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2003\u3000<>|,.!-'\"éßЖ漢字٣²Ⅻ𝟘\u0300😀\x00",
    "<|im_start|>",
    "<|im_end|>",
    "<|" + "x" * 40 + "|>",
    "<|" + "x" * 41 + "|>",
    "<||>",
    "<| a|>",
    "<|a",
    "a|>",
]


@pytest.mark.skipif(FAST is None, reason="the compiled estimate is not built")
def test_the_compiled_estimate_gives_the_patterns_pieces() -> None:
    assert FAST is not None
    rng = random.Random(7)
    texts = ["".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 30))) for _ in range(20_000)]
    # every character's class, where the pattern's classes decide: alone, in runs, after a space
    texts += [f"{c}{c}a{c} {c}1{c}{c}{c}{c}. {c}<|{c}|>{c}" for c in map(chr, range(0, 0x110000, 7)) if c.isprintable()]
    for text in texts:
        pieces = _PIECES.findall(text)
        ids = {p: n for n, p in enumerate(sorted(set(pieces)))}
        assert FAST.estimate(text, ids) == array("q", [ids[p] for p in pieces]).tobytes(), text
        if pieces:  # a piece without an id: the Python code gives it one
            del ids[pieces[-1]]
            assert FAST.estimate(text, ids) is None
