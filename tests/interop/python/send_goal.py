"""Sends a goal to Sagaplane's planner with the official Python A2A SDK (`a2a-sdk`), a
client we did not write, and follows the planner's task to its end.

Usage: send_goal.py PLANNER_URL GOAL [TOKEN_FILE]

With TOKEN_FILE, every request carries `Authorization: Bearer <its content>`.

Prints one JSON object with what the client saw; the Rust test asserts on it.
"""

import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState


def authenticated(token_file: str | None) -> httpx.AsyncClient | None:
    """An HTTP client that presents the bearer token in `token_file` on every request."""
    if token_file is None:
        return None
    with open(token_file, encoding="utf-8") as f:
        token = f.read().strip()
    # As long as a saga may take here; the default of 5 s would end a stream early.
    return httpx.AsyncClient(
        headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}, timeout=httpx.Timeout(120.0)
    )


async def main(url: str, goal: str, token_file: str | None = None) -> dict:
    config = ClientConfig(streaming=True, httpx_client=authenticated(token_file))
    client = await create_client(url, client_config=config)
    request = SendMessageRequest(
        message=Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=goal)])
    )
    states, texts, task_id = [], [], None
    try:
        async for event in client.send_message(request):
            kind = event.WhichOneof("payload")
            if kind == "task":
                task_id = event.task.id
                states.append(TaskState.Name(event.task.status.state))
            elif kind == "status_update":
                states.append(TaskState.Name(event.status_update.status.state))
                texts.extend(p.text for p in event.status_update.status.message.parts if p.text)
        task = await client.get_task(GetTaskRequest(id=task_id))
        metadata = dict(task.metadata.items()) if task.HasField("metadata") else {}
        return {
            "states": states,
            "texts": texts,
            "final": TaskState.Name(task.status.state),
            "executorTaskId": metadata.get("executorTaskId"),
            "artifacts": [a.name for a in task.artifacts],
        }
    finally:
        await client.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))))
