// The "contacts" example tool agent of Sagaplane (spec/reversibility-v1.md), on the A2A JavaScript SDK 1.3.0.
// Run: node --import tsx contacts-agent.ts --token-file token.txt [--port 0] [--ledger contacts-ledger.json]
import { randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import express from 'express';
import { AgentCard, Role, TaskState, type Message, type Part, type TaskStatus } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import type { AgentExecutor, ExecutionEventBus, RequestContext } from '@a2a-js/sdk/server';
import { jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';

const EXT = 'urn:sagaplane:ext:reversibility:v1';
const CARD_PATH = '/.well-known/agent-card.json';
const CARD_FILE = new URL('../contacts-card.json', import.meta.url);
// Each skill's argument names, sorted; all are strings. (Numbers arrive as doubles, 25000.0: none here.)
const ARGS = new Map([['contacts.add', ['email,name']], ['contacts.remove', ['contactId', 'forwardKey']],
  ['contacts.notify', ['contactId,team']]]);
type Result = Record<string, unknown>;
type Effect = { key: string; skill: string; args: Record<string, string>; result: Result; undone: boolean };
type Ledger = { effects: Effect[]; tombstones: string[]; calls: { key: string; skill: string; outcome: string }[] };

/** A definite failure: nothing took effect. `kind` is its class, per spec 6.1. */
class Failure extends Error {
  constructor(readonly kind: 'transient' | 'permanent', reason: string, readonly outcome = `failed-${kind}`) {
    super(reason);
  }
}

const part = (content: Part['content']): Part => ({ content, metadata: undefined, filename: '', mediaType: '' });
const hex = () => randomBytes(8).toString('hex');

/** The three skills, over the agent's own ledger of what it did under which idempotency key. */
class ContactsAgent implements AgentExecutor {
  readonly ledger: Ledger = { effects: [], tombstones: [], calls: [] };
  constructor(private readonly path: string) {
    if (existsSync(path)) this.ledger = JSON.parse(readFileSync(path, 'utf8'));
  }

  async execute(ctx: RequestContext, bus: ExecutionEventBus): Promise<void> {
    const { taskId, contextId, userMessage: msg } = ctx;
    // The SDK hands over the HTTP headers (lower-cased by Node); the metadata carries the same key.
    const header = (ctx.context.state.get('headers') as Record<string, unknown> | undefined)?.['idempotency-key'];
    const inMeta = msg.metadata?.[EXT]?.idempotencyKey;
    const key = typeof header === 'string' && header ? header : typeof inMeta === 'string' ? inMeta : '';
    const data = msg.parts.flatMap((p) => (p.content?.$case === 'data' ? [p.content.value] : []));
    const call = data.length === 1 && data[0] && typeof data[0] === 'object' ? data[0] : {};
    const [skill, timestamp] = [String(call.skill ?? ''), new Date().toISOString()];
    bus.publish(AgentEvent.task({ id: taskId, contextId, artifacts: [], history: [], metadata: undefined,
      status: { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp } }));
    let status: TaskStatus;
    try {
      const [outcome, result] = this.apply(key, skill, call.args);
      this.log(key, skill, outcome);
      const artifact = { artifactId: randomUUID(), name: 'result', description: '', metadata: undefined,
        extensions: [], parts: [part({ $case: 'data', value: result })] };
      bus.publish(AgentEvent.artifactUpdate({ taskId, contextId, artifact, append: false, lastChunk: true,
        metadata: undefined }));
      status = { state: TaskState.TASK_STATE_COMPLETED, message: undefined, timestamp };
    } catch (error) {
      if (!(error instanceof Failure)) throw error;
      this.log(key, skill, error.outcome);
      const message: Message = { messageId: randomUUID(), taskId, contextId, role: Role.ROLE_AGENT, extensions: [],
        referenceTaskIds: [], parts: [part({ $case: 'text', value: error.message })],
        metadata: { [EXT]: { failure: error.kind } } }; // the failure's class, as spec 6.1 says
      status = { state: TaskState.TASK_STATE_FAILED, message, timestamp };
    }
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status, metadata: undefined }));
    bus.finished();
  }

  async cancelTask(): Promise<void> {} // every call settles before it answers: nothing is left running to cancel

  log(key: string, skill: string, outcome: string): void {
    this.ledger.calls.push({ key, skill, outcome });
    // Durable before anyone hears of it: write a temporary file, flush it to disk, rename it over the ledger.
    writeFileSync(`${this.path}.tmp`, JSON.stringify(this.ledger), { flush: true });
    renameSync(`${this.path}.tmp`, this.path);
  }

  apply(key: string, skill: string, raw: unknown): [string, Result] {
    const { effects, tombstones, calls } = this.ledger;
    const isObject = raw !== null && typeof raw === 'object' && !Array.isArray(raw);
    const args = (isObject ? raw : {}) as Record<string, string>;
    const strings = isObject && Object.values(args).every((v) => typeof v === 'string' && v !== '');
    if (!key || !ARGS.has(skill) || !strings || !ARGS.get(skill)!.includes(Object.keys(args).sort().join()))
      throw new Failure('permanent', !ARGS.has(skill) ? `unknown skill '${skill}'`
        : !key ? 'no Idempotency-Key' : `bad arguments for ${skill}`);
    const done = effects.find((e) => e.key === key);
    if (done) { // applied before: answer the same
      if (done.skill !== skill) throw new Failure('permanent', `key already used by ${done.skill}`);
      return ['replayed', done.result];
    }
    let outcome: string, result: Result;
    if (skill === 'contacts.add') {
      if (tombstones.includes(key)) throw new Failure('permanent', 'undone before it arrived', 'refused-late');
      const undoExpiresAt = new Date(Date.now() + 86_400_000).toISOString().replace(/\.\d+Z$/, 'Z');
      [outcome, result] = ['applied', { contactId: `c_${hex()}`, undoExpiresAt }];
    } else if (skill === 'contacts.remove') { // by contactId, or by forwardKey: the add's own idempotency key
      const target = effects.find((e) => e.skill === 'contacts.add'
        && (args.contactId ? e.result.contactId === args.contactId : e.key === args.forwardKey));
      if (target) {
        target.undone = true;
        [outcome, result] = ['undone', { removed: true }];
      } else { // "no such work" is success, and the forward call must never land after it
        if (args.forwardKey && !tombstones.includes(args.forwardKey)) tombstones.push(args.forwardKey);
        [outcome, result] = ['nothing-to-undo', { removed: false }];
      }
    } else { // contacts.notify; a busy team refuses the first attempt under a key, as a busy inbox would
      const team = args.team.replace(/-busy$/, '');
      if (!['sales', 'support'].includes(team)) throw new Failure('permanent', 'no such team');
      if (team !== args.team && !calls.some((c) => c.key === key && c.outcome === 'failed-transient'))
        throw new Failure('transient', "the team's inbox is busy; try again");
      [outcome, result] = ['applied', { notificationId: `n_${hex()}` }];
    }
    effects.push({ key, skill, args, result, undone: false });
    return [outcome, result];
  }
}

const { values: opts } = parseArgs({ options: {
  port: { type: 'string', default: '0' }, host: { type: 'string', default: '127.0.0.1' },
  ledger: { type: 'string', default: 'contacts-ledger.json' }, 'token-file': { type: 'string' },
  'print-card': { type: 'boolean', default: false } } });
const fail = (why: string): never => { console.error(`contacts-agent: ${why}`); process.exit(2); };
const [port, host, tokenFile] = [Number(opts.port), opts.host!, opts['token-file']];
if (!Number.isInteger(port) || port < 0 || port > 65535) fail('--port takes a number from 0 to 65535');
if (!tokenFile) fail('--token-file is required');
if (opts['print-card'] && !port) fail('--print-card needs an explicit --port, so that the card carries a usable url');
const card = JSON.parse(readFileSync(CARD_FILE, 'utf8'));
const expected = Buffer.from(`Bearer ${readFileSync(tokenFile!, 'utf8').trim()}`);

if (opts['print-card']) {
  card.supportedInterfaces[0].url = `http://${host}:${port}`;
  console.log(JSON.stringify(card, null, 2));
} else { // bind first: with --port 0, only the socket knows the port that goes into the card
  const server = createServer().listen(port, host, () => {
    card.supportedInterfaces[0].url = `http://${host}:${(server.address() as AddressInfo).port}`;
    const [agent, app] = [new ContactsAgent(opts.ledger!), express()];
    app.use((req, res, next) => { // only the card is open: nothing reaches the SDK without the token
      const given = Buffer.from(req.get('authorization') ?? '');
      const authorized = given.length === expected.length && timingSafeEqual(given, expected);
      if (req.path === CARD_PATH || authorized) return next();
      res.status(401).set('WWW-Authenticate', 'Bearer').json({ error: 'unauthorized' });
    });
    app.get(CARD_PATH, (_req, res) => { res.json(card); }); // as written: what the platform signs is what we serve
    app.get('/ledger', (_req, res) => { res.json(agent.ledger); });
    const requestHandler = new DefaultRequestHandler(AgentCard.fromJSON(card), new InMemoryTaskStore(), agent);
    app.use(jsonRpcHandler({ requestHandler, userBuilder: UserBuilder.noAuthentication }));
    server.on('request', app);
    console.log(`listening on ${card.supportedInterfaces[0].url}`);
  });
}
