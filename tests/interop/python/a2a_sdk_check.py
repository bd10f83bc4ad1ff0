"""Drives an A2A 1.0 agent with the official Python SDK (`a2a-sdk`), a client we did not write.

Usage: a2a_sdk_check.py BASE_URL BINDING     (BINDING: JSONRPC or HTTP+JSON)

The agent must perform the A2A TCK's scripted behaviours (examples/a2a-tck-sut does).
Prints one JSON object with what the client saw; the Rust test asserts on it. Exits
non-zero (with the exception) when the SDK itself fails.
"""

import asyncio
import json
import sys
import uuid

from a2a.client import ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)


def message(prefix: str) -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(role=Role.ROLE_USER, message_id=f"{prefix}-{uuid.uuid4()}", parts=[Part(text="hello")])
    )


def state_name(state: int) -> str:
    return TaskState.Name(state)


async def main(url: str, binding: str) -> dict:
    seen: dict = {"binding": binding}
    unary = await create_client(url, client_config=ClientConfig(streaming=False, supported_protocol_bindings=[binding]))
    streaming = await create_client(url, client_config=ClientConfig(streaming=True, supported_protocol_bindings=[binding]))
    try:
        # Send: the unary call yields the final task.
        events = [e async for e in unary.send_message(message("tck-complete-task"))]
        task = events[-1].task
        seen["send"] = {"state": state_name(task.status.state), "reply": task.status.message.parts[0].text}
        completed_id = task.id

        # Stream a task to completion.
        kinds, states, texts, stream_id = [], [], [], None
        async for event in streaming.send_message(message("tck-stream-001")):
            kind = event.WhichOneof("payload")
            kinds.append(kind)
            if kind == "task":
                stream_id = event.task.id
                states.append(state_name(event.task.status.state))
            elif kind == "status_update":
                states.append(state_name(event.status_update.status.state))
            elif kind == "artifact_update":
                texts.extend(p.text for p in event.artifact_update.artifact.parts)
        seen["stream"] = {"first": kinds[0], "states": states, "texts": texts}

        # Get, list.
        got = await unary.get_task(GetTaskRequest(id=stream_id))
        seen["get"] = {"state": state_name(got.status.state), "artifacts": len(got.artifacts)}
        listed = await unary.list_tasks(ListTasksRequest())
        ids = {t.id for t in listed.tasks}
        seen["list"] = {"contains_both": completed_id in ids and stream_id in ids, "total": listed.total_size}

        # Cancel a task that waits for input.
        events = [e async for e in unary.send_message(message("tck-input-required"))]
        paused = events[-1].task
        canceled = await unary.cancel_task(CancelTaskRequest(id=paused.id))
        seen["cancel"] = {"before": state_name(paused.status.state), "after": state_name(canceled.status.state)}
    finally:
        await unary.close()
        await streaming.close()
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
