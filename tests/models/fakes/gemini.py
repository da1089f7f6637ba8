"""Gemini API wire shapes: `GenerateContentResponse` (whole, or as SSE chunks of
`streamGenerateContent?alt=sse`) and Google's error body."""

from __future__ import annotations

from typing import Any

from tests.models.fakes.server import Reply, sse_event


def chunk(
    parts: list[dict[str, Any]],
    *,
    finish: str | None = None,
    usage: dict[str, int] | None = None,
    model: str = "gemini-fake-001",
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    data: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
    if usage is not None:
        data["usageMetadata"] = usage
    return data


USAGE = {"promptTokenCount": 21, "candidatesTokenCount": 8, "totalTokenCount": 29}


def response(parts: list[dict[str, Any]], *, usage: dict[str, int] | None = None) -> Reply:
    return Reply(json=chunk(parts, finish="STOP", usage=usage or USAGE))


def stream(chunks: list[dict[str, Any]], *, cut: bool = False) -> Reply:
    return Reply(sse=[sse_event(c) for c in chunks], cut=cut)


def text_stream(pieces: list[str], *, end: bool = True) -> Reply:
    """Text in pieces; the last chunk carries finishReason and usage (unless not `end`)."""
    chunks = [chunk([{"text": p}]) for p in pieces]
    if end:
        chunks[-1] = chunk([{"text": pieces[-1]}], finish="STOP", usage=USAGE)
    return stream(chunks)


def error(
    status: int, word: str, message: str, *, details: list[dict[str, Any]] | None = None
) -> Reply:
    """`{"error": {code, message, status, details}}`, as Google APIs answer."""
    body = {"error": {"code": status, "message": message, "status": word, "details": details or []}}
    return Reply(status=status, json=body)
