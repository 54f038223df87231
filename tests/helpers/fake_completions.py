"""A fake OpenAI-compatible ``/v1/completions`` endpoint's answers, for log-likelihood scorers:
prompt log-probabilities echoed right, shifted a position late, or for generated tokens only."""

from __future__ import annotations

import re

from tests.helpers.fake_openai import Request, error_body

NEXT = " Paris"  # what the fake model generates after any prompt


def tokens_of(text: str) -> list[str]:
    """The fake tokenizer: words with their leading whitespace."""
    return re.findall(r"\s*\S+", text)


def logprob(before: list[str], token: str) -> float:
    """The fake model's log-probability of ``token`` after the tokens ``before``."""
    return -0.3 * len(token.strip()) - 0.05 * len(before) - (0.7 if token == NEXT else 0.0)


def completions(mode: str):
    """The answer of a completions server: 'right' echoes right prompt log-probabilities,
    'shifted' each one a position late (llama-cpp-python without a BOS token), 'generated'
    only the generated token's (llama.cpp's llama-server)."""

    def respond(request: Request):
        if not request.path.endswith("/completions") or request.path.endswith("/chat/completions"):
            return 404, error_body("not found")
        prompt, echo = request.body["prompt"], request.body.get("echo", False)
        words = tokens_of(prompt)
        generated = (NEXT, len(prompt), logprob(words, NEXT))
        if echo and mode != "generated":
            offsets = [sum(len(w) for w in words[:i]) for i in range(len(words))]
            if mode == "right":
                values = [None] + [logprob(words[:i], words[i]) for i in range(1, len(words))]
            else:
                values = [None] + [logprob(words[: i + 1], words[i]) for i in range(1, len(words))]
            toks, offs, lps = [*words, NEXT], [*offsets, len(prompt)], [*values, generated[2]]
        else:
            toks, offs, lps = [NEXT], [len(prompt)], [generated[2]]
        tops = [None if v is None else {t: v} for t, v in zip(toks, lps, strict=True)]
        text = (prompt if echo else "") + NEXT
        choice = {
            "index": 0,
            "text": text,
            "finish_reason": "length",
            "logprobs": {"tokens": toks, "text_offset": offs, "token_logprobs": lps, "top_logprobs": tops},
        }
        usage = {"prompt_tokens": len(words), "completion_tokens": 1, "total_tokens": len(words) + 1}
        return 200, {
            "id": "cmpl",
            "object": "text_completion",
            "created": 0,
            "model": "fake",
            "choices": [choice],
            "usage": usage,
        }

    return respond
