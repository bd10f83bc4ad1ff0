"""Sends a goal whose saga waits for a person, with the official Python A2A SDK
(`a2a-sdk`), then answers on the planner's task as a generic client would.

Usage: answer_paused_goal.py PLANNER_URL GOAL TOKEN_FILE

Prints one JSON object with what the client saw: the states of the stream, the paused
task's state and status text, the error its answer on the planner's task got, and the
task as it stands afterwards. The Rust test asserts on it.
"""

import asyncio
import json
import sys
import uuid

from a2a.client import ClientConfig, create_client
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState
from google.protobuf import struct_pb2
from send_goal import authenticated


def text_of(message) -> str:
    return "\n".join(p.text for p in message.parts if p.text)


async def main(url: str, goal: str, token_file: str) -> dict:
    client = await create_client(url, client_config=ClientConfig(streaming=True, httpx_client=authenticated(token_file)))
    try:
        states, task_id = [], None
        request = SendMessageRequest(
            message=Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=goal)])
        )
        async for event in client.send_message(request):
            kind = event.WhichOneof("payload")
            if kind == "task":
                task_id = event.task.id
                states.append(TaskState.Name(event.task.status.state))
            elif kind == "status_update":
                states.append(TaskState.Name(event.status_update.status.state))
        paused = await client.get_task(GetTaskRequest(id=task_id))

        # What a generic client does with a paused task: answer on it.
        answer = struct_pb2.Value()
        answer.struct_value.update({"resolution": "compensate"})
        reply = SendMessageRequest(
            message=Message(
                role=Role.ROLE_USER,
                message_id=str(uuid.uuid4()),
                task_id=task_id,
                context_id=paused.context_id,
                parts=[Part(text="approve"), Part(data=answer)],
            )
        )
        refused = None
        try:
            async for _ in client.send_message(reply):
                pass
        except Exception as e:  # the SDK raises the agent's A2A error
            refused = f"{type(e).__name__}: {e}"
        after = await client.get_task(GetTaskRequest(id=task_id))
        metadata = dict(paused.metadata.items()) if paused.HasField("metadata") else {}
        return {
            "states": states,
            "paused": TaskState.Name(paused.status.state),
            "pausedText": text_of(paused.status.message),
            "executorTaskId": metadata.get("executorTaskId"),
            "refused": refused,
            "after": TaskState.Name(after.status.state),
            "afterText": text_of(after.status.message),
            "historyBefore": len(paused.history),
            "historyAfter": len(after.history),
        }
    finally:
        await client.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))))
