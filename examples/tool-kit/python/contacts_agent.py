"""The "contacts" example tool agent of Sagaplane (spec/reversibility-v1.md), on the A2A Python SDK 1.3.0.
Run: python contacts_agent.py --token-file token.txt [--port 0] [--ledger contacts-ledger.sqlite]
"""
import argparse, asyncio, hmac, json, secrets, socket, sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import uvicorn
from google.protobuf.json_format import MessageToDict, ParseDict
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse
from starlette.routing import Route

from a2a.helpers import new_data_part, new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCard, TaskState
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH as CARD_PATH

EXT = 'urn:sagaplane:ext:reversibility:v1'
CARD_FILE = Path(__file__).resolve().parent.parent / 'contacts-card.json'
# Each skill's argument names, all strings. (Numbers arrive as doubles, 25000.0: none here.)
ARGS = {'contacts.add': [{'name', 'email'}], 'contacts.remove': [{'contactId'}, {'forwardKey'}],
        'contacts.notify': [{'contactId', 'team'}]}
SCHEMA = """CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, skill TEXT, args TEXT, result TEXT, undone INT);
CREATE TABLE IF NOT EXISTS tombstones (key TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS calls (seq INTEGER PRIMARY KEY, key TEXT, skill TEXT, outcome TEXT);"""


class Failure(Exception):
    """A definite failure: nothing took effect. `kind` is its class, per spec 6.1."""
    def __init__(self, kind: str, reason: str, outcome: str | None = None):
        super().__init__(reason)
        self.kind, self.outcome = kind, outcome or f'failed-{kind}'


class ContactsAgent(AgentExecutor):
    """The three skills, over the agent's own ledger of what it did under which idempotency key."""
    def __init__(self, path: str):
        self.db = sqlite3.connect(path)
        self.db.executescript(SCHEMA)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        msg, headers = context.message, context.call_context.state.get('headers', {})
        # The SDK hands over the HTTP headers (lower-cased); the metadata carries the same key.
        ext = MessageToDict(msg.metadata).get(EXT)
        in_meta = ext.get('idempotencyKey') if isinstance(ext, dict) else None
        key = headers.get('idempotency-key') or (in_meta if isinstance(in_meta, str) else '')
        data = [MessageToDict(p.data) for p in msg.parts if p.HasField('data')]
        call = data[0] if len(data) == 1 and isinstance(data[0], dict) else {}
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await event_queue.enqueue_event(new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED))
        skill = str(call.get('skill', ''))
        try:
            outcome, result = self.apply(key, skill, call.get('args'))
        except Failure as failure:  # its class goes in the status message's metadata (spec 6.1)
            self.db.rollback()
            self.log(key, skill, failure.outcome)
            reason = updater.new_agent_message([new_text_part(str(failure))], {EXT: {'failure': failure.kind}})
            return await updater.failed(reason)
        self.log(key, skill, outcome)
        await updater.add_artifact([new_data_part(result)], name='result')
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        pass  # every call settles before it answers: nothing is left running to cancel

    def log(self, key: str, skill: str, outcome: str) -> None:
        self.db.execute('INSERT INTO calls (key, skill, outcome) VALUES (?, ?, ?)', (key, skill, outcome))
        self.db.commit()  # the effect and its log line are durable before anyone hears of them

    def apply(self, key: str, skill: str, args) -> tuple[str, dict]:
        one = lambda sql, *params: self.db.execute(sql, params).fetchone()
        strings = isinstance(args, dict) and all(isinstance(v, str) and v for v in args.values())
        if not key or skill not in ARGS or not strings or set(args) not in ARGS[skill]:
            raise Failure('permanent', f'unknown skill {skill!r}' if skill not in ARGS else
                          'no Idempotency-Key' if not key else f'bad arguments for {skill}')
        if row := one('SELECT skill, result FROM effects WHERE key = ?', key):  # applied: answer the same
            if row[0] != skill:
                raise Failure('permanent', f'key already used by {row[0]}')
            return 'replayed', json.loads(row[1])
        if skill == 'contacts.add':
            if one('SELECT 1 FROM tombstones WHERE key = ?', key):
                raise Failure('permanent', 'undone before it arrived', 'refused-late')
            expires = (datetime.now(timezone.utc) + timedelta(hours=24)).strftime('%Y-%m-%dT%H:%M:%SZ')
            outcome, result = 'applied', {'contactId': 'c_' + secrets.token_hex(8), 'undoExpiresAt': expires}
        elif skill == 'contacts.remove':
            (field, value), = args.items()  # contactId, or forwardKey: the add's own idempotency key
            column = 'key' if field == 'forwardKey' else "json_extract(result, '$.contactId')"
            if target := one(f"SELECT key FROM effects WHERE skill = 'contacts.add' AND {column} = ?", value):
                self.db.execute('UPDATE effects SET undone = 1 WHERE key = ?', target)
                outcome, result = 'undone', {'removed': True}
            else:  # "no such work" is success, and the forward call must never land after it
                if field == 'forwardKey':
                    self.db.execute('INSERT OR IGNORE INTO tombstones VALUES (?)', (value,))
                outcome, result = 'nothing-to-undo', {'removed': False}
        else:  # contacts.notify; a busy team refuses the first attempt under a key, as a busy inbox would
            team, busy = args['team'].removesuffix('-busy'), args['team'].endswith('-busy')
            if team not in ('sales', 'support'):
                raise Failure('permanent', 'no such team')
            if busy and not one("SELECT 1 FROM calls WHERE key = ? AND outcome = 'failed-transient'", key):
                raise Failure('transient', "the team's inbox is busy; try again")
            outcome, result = 'applied', {'notificationId': 'n_' + secrets.token_hex(8)}
        self.db.execute('INSERT INTO effects VALUES (?, ?, ?, ?, 0)',
                        (key, skill, json.dumps(args), json.dumps(result)))
        return outcome, result

    def dump(self) -> dict:
        rows = lambda sql: self.db.execute(sql).fetchall()
        return {'effects': [{'key': k, 'skill': s, 'args': json.loads(a), 'result': json.loads(r), 'undone': bool(u)}
                            for k, s, a, r, u in rows('SELECT * FROM effects ORDER BY rowid')],
                'tombstones': [k for (k,) in rows('SELECT key FROM tombstones ORDER BY rowid')],
                'calls': [{'key': k, 'skill': s, 'outcome': o}
                          for _, k, s, o in rows('SELECT * FROM calls ORDER BY seq')]}


def main() -> None:
    p = argparse.ArgumentParser(description='The contacts example tool agent (A2A 1.0, Sagaplane reversibility v1)')
    p.add_argument('--port', type=int, default=0, help='0 picks a free port')
    p.add_argument('--host', default='127.0.0.1')
    p.add_argument('--ledger', default='contacts-ledger.sqlite')
    p.add_argument('--token-file', required=True, help='holds the bearer token the executor sends')
    p.add_argument('--print-card', action='store_true', help='print the card (needs an explicit --port) and exit')
    a = p.parse_args()
    if a.print_card and not a.port:
        p.error('--print-card needs an explicit --port, so that the card carries a usable url')
    sock = None if a.print_card else socket.create_server((a.host, a.port))  # with port 0, only it knows the port
    card, port = json.loads(CARD_FILE.read_text()), a.port or sock.getsockname()[1]
    card['supportedInterfaces'][0]['url'] = f'http://{a.host}:{port}'
    if a.print_card:
        return print(json.dumps(card, indent=2))
    expected, agent = f'Bearer {Path(a.token_file).read_text().strip()}'.encode(), ContactsAgent(a.ledger)

    async def guard(request, call_next):  # only the card is open: nothing reaches the SDK without the token
        given = request.headers.get('authorization', '').encode()
        if request.url.path != CARD_PATH and not hmac.compare_digest(given, expected):
            return JSONResponse({'error': 'unauthorized'}, 401, headers={'WWW-Authenticate': 'Bearer'})
        return await call_next(request)

    async def ledger(request):  # async, so that SQLite stays on the event loop's thread
        return JSONResponse(agent.dump())

    # The card is served as written: the SDK's card route goes through protobuf and turns 5000 into 5000.0.
    handler = DefaultRequestHandler(agent, InMemoryTaskStore(), ParseDict(card, AgentCard()))
    app = Starlette(routes=[Route(CARD_PATH, lambda _: JSONResponse(card)), Route('/ledger', ledger),
                            *create_jsonrpc_routes(handler, '/')])
    app.add_middleware(BaseHTTPMiddleware, dispatch=guard)
    print(f'listening on http://{a.host}:{port}', flush=True)  # the socket already listens: early callers queue
    asyncio.run(uvicorn.Server(uvicorn.Config(app, log_level='warning')).serve(sockets=[sock]))


if __name__ == '__main__':
    main()
