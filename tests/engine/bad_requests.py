"""Bad requests to the OpenAI API, as data: each must get a 4xx whose
message names the problem, and the server must serve the next request.
docs/reliability.md renders this table (tests/unit/test_reliability_doc.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MODEL = "<model>"
"""Replaced by the served model's name when a case is sent."""


@dataclass(frozen=True)
class BadRequest:
    name: str
    endpoint: str
    """``completions`` or ``chat.completions``."""
    body: dict[str, object] = field(default_factory=dict)
    raw: bytes | None = None
    """Bytes sent as the body instead of ``body`` (what the openai client
    cannot send: broken JSON, non-UTF-8)."""
    status: int = 400
    message: str = ""
    """A fragment of the error message the client receives."""


def completion(**body: object) -> dict[str, object]:
    return {"model": MODEL, "prompt": "The cat", "max_tokens": 4, **body}


def chat(**body: object) -> dict[str, object]:
    return {"model": MODEL, "max_tokens": 4, **body}


USER_HELLO = [{"role": "user", "content": "hello"}]

CASES = [
    BadRequest(
        "prompt longer than max_model_len",
        "completions",
        completion(prompt="the cat " * 3000),
        message="maximum context length is 2048 tokens",
    ),
    BadRequest(
        "negative max_tokens",
        "completions",
        completion(max_tokens=-1),
        message="max_tokens must be at least 1, got -1",
    ),
    BadRequest(
        "zero max_tokens",
        "completions",
        completion(max_tokens=0),
        message="max_tokens must be at least 1, got 0",
    ),
    BadRequest(
        "huge max_tokens",
        "completions",
        completion(max_tokens=10**9),
        message="cannot be greater than max_model_len=2048",
    ),
    BadRequest(
        "max_tokens of the wrong type",
        "completions",
        completion(max_tokens="ten"),
        message="body.max_tokens",
    ),
    BadRequest(
        "temperature of the wrong type",
        "completions",
        completion(temperature="hot"),
        message="body.temperature",
    ),
    BadRequest(
        "negative temperature",
        "completions",
        completion(temperature=-1),
        message="temperature must be non-negative",
    ),
    BadRequest(
        "top_p above 1",
        "completions",
        completion(top_p=2),
        message="top_p must be in (0, 1]",
    ),
    BadRequest(
        "n of 0", "completions", completion(n=0), message="n must be at least 1"
    ),
    BadRequest(
        "too many logprobs",
        "completions",
        completion(logprobs=1000),
        message="greater than max allowed",
    ),
    BadRequest(
        "presence_penalty out of range",
        "completions",
        completion(presence_penalty=5),
        message="presence_penalty must be in [-2, 2]",
    ),
    BadRequest(
        "seed of the wrong type",
        "completions",
        completion(seed="abc"),
        message="body.seed",
    ),
    BadRequest(
        "unknown model name",
        "completions",
        completion(model="no-such-model"),
        status=404,
        message="The model `no-such-model` does not exist",
    ),
    BadRequest(
        "empty prompt",
        "completions",
        completion(prompt=""),
        message="Either prompt or prompt_embeds must be provided",
    ),
    BadRequest(
        "no prompt",
        "completions",
        {"model": MODEL, "max_tokens": 4},
        message="Either prompt or prompt_embeds must be provided",
    ),
    BadRequest(
        "token id outside the vocabulary",
        "completions",
        completion(prompt=[10**9]),
        message="out of vocabulary",
    ),
    BadRequest(
        "chat without messages",
        "chat.completions",
        chat(),
        message="body.messages",
    ),
    BadRequest(
        "chat with an empty conversation",
        "chat.completions",
        chat(messages=[]),
        message="empty conversation",
    ),
    BadRequest(
        "chat message content of the wrong type",
        "chat.completions",
        chat(messages=[{"role": "user", "content": 5}]),
        message="content",
    ),
    BadRequest(
        "unknown response_format type",
        "chat.completions",
        chat(messages=USER_HELLO, response_format={"type": "nope"}),
        message="response_format",
    ),
    BadRequest(
        "body not a JSON object",
        "completions",
        raw=b"[1, 2]",
        message="valid dictionary",
    ),
    BadRequest(
        "invalid JSON",
        "completions",
        raw=b'{"model": "x", "prompt": ',
        message="JSON decode error",
    ),
    BadRequest(
        "non-UTF-8 bytes in the body",
        "completions",
        raw=b'{"model": "m", "prompt": "\xff\xfe\xfd"}',
        message="error parsing the body",
    ),
    BadRequest("empty body", "completions", raw=b"", message="Field required"),
]
