"""Sends a goal to Sagaplane's planner with the official Python A2A SDK (`a2a-sdk`), a
client we did not write, and follows the planner's task to its end.

Usage: send_goal.py PLANNER_URL GOAL

Prints one JSON object with what the client saw; the Rust test asserts on it.
"""

import asyncio
import json
import sys
import uuid

from a2a.client import ClientConfig, create_client
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState


async def main(url: str, goal: str) -> dict:
    client = await create_client(url, client_config=ClientConfig(streaming=True))
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
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
