"""A request's prompt as the traffic gives it: messages without their items' data, the server's usage."""

from __future__ import annotations

from mmpool_cli.inputs.traffic.prompts import Message, media_count, messages_of, usage_of


def test_messages_keep_text_and_the_place_of_each_item_never_its_data() -> None:
    got = messages_of(
        [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "text", "text": "What is this?"},
                    {"type": "video_url", "video_url": {"url": "file:///v.mp4"}},
                ],
            },
            {"role": "assistant", "content": None},
        ]
    )
    assert got == (
        Message("system", ("Be brief.",)),
        Message("user", (("image",), "What is this?", ("video",))),
        Message("assistant", ()),
    )
    assert got is not None and media_count(got) == 2
    assert "AAAA" not in repr(got)


def test_a_message_mmpool_cannot_tokenize_is_no_prompt() -> None:
    assert messages_of([{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]) is None
    assert messages_of([{"content": "no role"}]) is None
    assert messages_of("not a list") is None


def test_usage_from_a_response_or_its_usage() -> None:
    usage = {"prompt_tokens": 120, "completion_tokens": 8, "prompt_tokens_details": {"cached_tokens": 96}}
    assert usage_of({"usage": usage}) == (120, 8, 96)
    assert usage_of(usage) == (120, 8, 96)
    assert usage_of({"prompt_tokens": 5}) == (5, None, None)
    assert usage_of({"prompt_tokens": -1, "completion_tokens": True}) == (None, None, None)
    assert usage_of(None) == (None, None, None)
    assert usage_of({"prompt_tokens": 40, "cached_tokens": 39}) == (40, None, 39)  # SGLang meta_info
