// Drives an A2A 1.0 agent with the official JavaScript SDK (@a2a-js/sdk), a client we did not write.
//
// Usage: node check.mjs BASE_URL BINDING     (BINDING: JSONRPC or HTTP+JSON)
//
// The agent must perform the A2A TCK's scripted behaviours (examples/a2a-tck-sut does).
// Prints one JSON object with what the client saw; the Rust test asserts on it.

import { randomUUID } from 'node:crypto';
import { ClientFactory, ClientFactoryOptions } from '@a2a-js/sdk/client';
import { Role, TaskState } from '@a2a-js/sdk';

const [url, binding] = process.argv.slice(2);

function message(prefix) {
  return {
    tenant: '',
    configuration: undefined,
    metadata: {},
    message: {
      messageId: `${prefix}-${randomUUID()}`,
      role: Role.ROLE_USER,
      taskId: '',
      contextId: '',
      extensions: [],
      metadata: {},
      referenceTaskIds: [],
      parts: [{ content: { $case: 'text', value: 'hello' }, filename: '', mediaType: 'text/plain', metadata: undefined }],
    },
  };
}

const stateName = (s) => TaskState[s];
const text = (part) => (part.content?.$case === 'text' ? part.content.value : undefined);

const options = ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { preferredTransports: [binding] });
const client = await new ClientFactory(options).createFromUrl(url);
const seen = { binding };

const sent = await client.sendMessage(message('tck-complete-task'));
seen.send = { state: stateName(sent.status.state), reply: text(sent.status.message.parts[0]) };

const kinds = [];
const states = [];
const texts = [];
let streamId;
for await (const event of client.sendMessageStream(message('tck-stream-001'))) {
  const kind = event.payload?.$case;
  kinds.push(kind);
  if (kind === 'task') {
    streamId = event.payload.value.id;
    states.push(stateName(event.payload.value.status.state));
  } else if (kind === 'statusUpdate') {
    states.push(stateName(event.payload.value.status.state));
  } else if (kind === 'artifactUpdate') {
    texts.push(...event.payload.value.artifact.parts.map(text));
  }
}
seen.stream = { first: kinds[0], states, texts };

const got = await client.getTask({ tenant: '', id: streamId, historyLength: undefined });
seen.get = { state: stateName(got.status.state), artifacts: got.artifacts.length };

const listed = await client.listTasks({ tenant: '', contextId: '', status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: undefined, pageToken: '', historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: undefined });
const ids = new Set(listed.tasks.map((t) => t.id));
seen.list = { contains_both: ids.has(sent.id) && ids.has(streamId), total: listed.totalSize };

const paused = await client.sendMessage(message('tck-input-required'));
const canceled = await client.cancelTask({ tenant: '', id: paused.id, metadata: undefined });
seen.cancel = { before: stateName(paused.status.state), after: stateName(canceled.status.state) };

console.log(JSON.stringify(seen));
