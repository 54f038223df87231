"""What splitting a reasoning model's reply costs per reply (docs/reasoning.md).

Times :func:`ape.tasks.solving.reasoning.split_reply` on LangChain ``AIMessage`` replies in
each shape (a ``reasoning_content`` field, a ``<think>`` block, only ``</think>``, a block
never closed, Anthropic thinking blocks, a plain answer), with short (about 1 kB) and long
(about 32 kB) reasoning, and prints microseconds per reply: the best of five repeats, so a
busy machine's pauses do not count. No server, no model; under a minute.

    python benchmarks/reasoning_split.py
"""

from __future__ import annotations

import timeit

from langchain_core.messages import AIMessage

from ape.tasks.solving.reasoning import split_reply

SENTENCE = "Let me add the numbers digit by digit and check the carry once more. "


def replies(chars: int) -> dict[str, AIMessage]:
    thought = (SENTENCE * (chars // len(SENTENCE) + 1))[:chars]
    return {
        "reasoning_content field": AIMessage(content="12", additional_kwargs={"reasoning_content": thought}),
        "<think> block": AIMessage(content=f"<think>{thought}</think>\n12"),
        "only </think>": AIMessage(content=f"{thought}\n</think>\n\n12"),
        "unclosed <think>": AIMessage(content=f"<think>{thought}"),
        "thinking blocks": AIMessage(
            content=[{"type": "thinking", "thinking": thought, "signature": "s"}, {"type": "text", "text": "12"}]
        ),
        "plain answer": AIMessage(content="12"),
    }


def main() -> None:
    print(f"{'shape':<26}{'reasoning':>12}{'µs per reply':>15}")
    for chars in (1_000, 32_000):
        for name, message in replies(chars).items():
            number = 2_000
            best = min(timeit.repeat(lambda m=message: split_reply(m), number=number, repeat=5))
            size = "-" if name == "plain answer" else f"{chars // 1000} kB"
            print(f"{name:<26}{size:>12}{best / number * 1e6:>15.1f}")


if __name__ == "__main__":
    main()
