"""OpenAI Responses wire shapes (`response` objects and typed SSE events)."""

from __future__ import annotations

from typing import Any

from tests.models.fakes.server import Reply, sse_event


def message_item(text: str, id: str = "msg_1") -> dict[str, Any]:
    return {
        "type": "message",
        "id": id,
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call_item(call_id: str, name: str, arguments: str, id: str | None = None) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": id or f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def reasoning_item(summary: str, id: str = "rs_1") -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": id,
        "summary": [{"type": "summary_text", "text": summary}],
        "encrypted_content": "gAAAA-opaque",
    }


def _response(output: list[dict[str, Any]], usage: tuple[int, int], status: str) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1700000000,
        "status": status,
        "error": None,
        "model": "gpt-test",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": usage[0],
            "output_tokens": usage[1],
            "total_tokens": sum(usage),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def response(output: list[dict[str, Any]], *, usage: tuple[int, int] = (12, 4)) -> Reply:
    return Reply(json=_response(output, usage, "completed"))


def stream(
    text_pieces: list[str],
    calls: list[tuple[str, str, list[str]]] | None = None,
    *,
    usage: tuple[int, int] = (8, 6),
    fail: str | None = None,
    fail_code: str = "server_error",
    reasoning: dict[str, Any] | None = None,
) -> Reply:
    """Typed events as the API sends them: `response.created`, per output item
    `response.output_item.added` / deltas / `...done`, then `response.completed` (or
    `response.failed` with `fail` as the error message). Calls are
    `(call_id, name, argument_pieces)`."""
    seq = 0

    def event(kind: str, **data: Any) -> str:
        nonlocal seq
        seq += 1
        return sse_event({"type": kind, "sequence_number": seq, **data}, kind)

    events = [event("response.created", response=_response([], (0, 0), "in_progress"))]
    output: list[dict[str, Any]] = []
    if reasoning is not None:
        events.append(event("response.output_item.added", output_index=0, item=reasoning))
        events.append(event("response.output_item.done", output_index=0, item=reasoning))
        output.append(reasoning)
    if text_pieces:
        item = message_item("")
        item["status"], item["content"] = "in_progress", []
        events.append(event("response.output_item.added", output_index=len(output), item=item))
        part = {"type": "output_text", "text": "", "annotations": []}
        events.append(
            event(
                "response.content_part.added",
                item_id="msg_1",
                output_index=0,
                content_index=0,
                part=part,
            )
        )
        events += [
            event(
                "response.output_text.delta",
                item_id="msg_1",
                output_index=0,
                content_index=0,
                delta=piece,
            )
            for piece in text_pieces
        ]
        full = "".join(text_pieces)
        events.append(
            event(
                "response.output_text.done",
                item_id="msg_1",
                output_index=0,
                content_index=0,
                text=full,
            )
        )
        output.append(message_item(full))
        events.append(event("response.output_item.done", output_index=0, item=output[-1]))
    for call_id, name, pieces in calls or []:
        index = len(output)
        item = call_item(call_id, name, "")
        item["status"] = "in_progress"
        events.append(event("response.output_item.added", output_index=index, item=item))
        events += [
            event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=index,
                delta=piece,
            )
            for piece in pieces
        ]
        events.append(
            event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                arguments="".join(pieces),
            )
        )
        output.append(call_item(call_id, name, "".join(pieces)))
        events.append(event("response.output_item.done", output_index=index, item=output[-1]))
    if fail is not None:
        failed = _response(output, usage, "failed")
        failed["error"] = {"code": fail_code, "message": fail}
        events.append(event("response.failed", response=failed))
    else:
        events.append(event("response.completed", response=_response(output, usage, "completed")))
    return Reply(sse=events)
