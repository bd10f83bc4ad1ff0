"""Drives a running "contacts" tool agent the way a Sagaplane executor calls it, and checks its promises.

    python check_agent.py BASE_URL TOKEN        (for example: http://127.0.0.1:8001 s3cret)

Standard library only. Each call is an A2A 1.0 JSON-RPC `SendMessage` with the headers and params
of spec/reversibility-v1.md section 4. Prints one line per check and exits non-zero on any mismatch.
"""
import json
import secrets
import sys
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone

EXT = 'urn:sagaplane:ext:reversibility:v1'
BASE, TOKEN = (sys.argv[1].rstrip('/'), sys.argv[2]) if len(sys.argv) == 3 else sys.exit(__doc__)
SAGA = f'saga-{uuid.uuid4().hex[:12]}'  # fresh keys on every run, so a kept ledger does not interfere
TRACE = secrets.token_hex(16)
failures = passed = 0


def http(method, path, body=None, headers=None):
    """Returns (status, parsed JSON body or None)."""
    req = urllib.request.Request(BASE + path, data=None if body is None else json.dumps(body).encode(),
                                 method=method, headers={'Content-Type': 'application/json', **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, None


def call(step, skill, args, undo_of=None, token=TOKEN):
    """One call as spec section 4 says; returns (kind, payload): ('ok', result), ('failed', (class, text)) or ('other', ...)."""
    key = f'{SAGA}:{step}'
    baggage = f'sagaplane.saga={SAGA},sagaplane.step={step}' + (f',sagaplane.caused-by={undo_of}' if undo_of else '')
    headers = {'Authorization': f'Bearer {token}', 'Idempotency-Key': key, 'A2A-Version': '1.0', 'A2A-Extensions': EXT,
               'traceparent': f'00-{TRACE}-{secrets.token_hex(8)}-01', 'baggage': baggage}
    params = {'message': {'messageId': str(uuid.uuid4()), 'role': 'ROLE_USER',
                          'parts': [{'data': {'skill': skill, 'args': args}}],
                          'metadata': {EXT: {'sagaId': SAGA, 'stepId': step, 'idempotencyKey': key,
                                             'causedBy': undo_of, 'compensation': undo_of is not None}},
                          'extensions': [EXT]},
              'configuration': {'historyLength': 0}}
    status, body = http('POST', '/', {'jsonrpc': '2.0', 'id': str(uuid.uuid4()), 'method': 'SendMessage', 'params': params}, headers)
    task = (body or {}).get('result', {}).get('task') if status == 200 else None
    if not task:
        return 'other', (status, body)
    state = task.get('status', {}).get('state')
    if state == 'TASK_STATE_COMPLETED':
        try:
            return 'ok', task['artifacts'][0]['parts'][0]['data']
        except (KeyError, IndexError):
            return 'other', task
    if state == 'TASK_STATE_FAILED':
        message = task['status'].get('message', {})
        failure = message.get('metadata', {}).get(EXT, {}).get('failure')
        return 'failed', (failure, ' '.join(p.get('text', '') for p in message.get('parts', [])))
    return 'other', task


def check(what, ok, seen=None):
    global failures, passed
    print(('ok    ' if ok else 'FAIL  ') + what + ('' if ok else f'\n      saw: {json.dumps(seen)}'))
    failures, passed = failures + (not ok), passed + bool(ok)


# The card is open, declares the extension, and names the address it is served at.
status, card = http('GET', '/.well-known/agent-card.json')
skills = ((card or {}).get('capabilities', {}).get('extensions') or [{}])[0].get('params', {}).get('skills', {})
check('agent card is served without a token and declares the three skills',
      status == 200 and sorted(skills) == ['contacts.add', 'contacts.notify', 'contacts.remove'], (status, card))
check('agent card names the url it is served at',
      [i.get('url', '').rstrip('/') for i in (card or {}).get('supportedInterfaces', [])] == [BASE], card)

# contacts.add applies once per key and replays its result.
add = call('s1', 'contacts.add', {'name': 'Jane Roe', 'email': 'jane@example.com'})
result = add[1] if add[0] == 'ok' else {}
try:
    expires = datetime.strptime(result.get('undoExpiresAt', ''), '%Y-%m-%dT%H:%M:%S%z')
    in_a_day = abs(expires - datetime.now(timezone.utc) - timedelta(hours=24)) < timedelta(minutes=5)
except ValueError:
    in_a_day = str(result.get('undoExpiresAt', '')).endswith('Z')  # RFC 3339 with fractions: accept
check('add succeeds with a contactId and an undo deadline about 24h ahead',
      add[0] == 'ok' and str(result.get('contactId', '')).startswith('c_') and in_a_day, add)
again = call('s1', 'contacts.add', {'name': 'Jane Roe', 'email': 'jane@example.com'})
check('add under the same key is replayed with the same result', again == add, again)

# contacts.remove by contactId undoes, idempotently under its own key.
undo = call('s1:undo', 'contacts.remove', {'contactId': result.get('contactId', '?')}, undo_of='s1')
check('remove {contactId} undoes the contact', undo == ('ok', {'removed': True}), undo)
undo_again = call('s1:undo', 'contacts.remove', {'contactId': result.get('contactId', '?')}, undo_of='s1')
check('remove under the same key answers the same', undo_again == undo, undo_again)

# contacts.remove by forwardKey for work that never arrived: success, then the late forward call is refused.
nothing = call('s2:undo', 'contacts.remove', {'forwardKey': f'{SAGA}:s2'}, undo_of='s2')
check('remove {forwardKey} with nothing to undo succeeds with removed=false', nothing == ('ok', {'removed': False}), nothing)
late = call('s2', 'contacts.add', {'name': 'Late Arrival', 'email': 'late@example.com'})
check('add arriving after its undo is refused permanently', late[0] == 'failed' and late[1][0] == 'permanent', late)

# contacts.notify: a busy team fails transiently once per key, then succeeds; an unknown team fails permanently.
busy = call('s3', 'contacts.notify', {'contactId': result.get('contactId', 'c_1'), 'team': 'sales-busy'})
check('notify sales-busy: the first attempt fails transient', busy[0] == 'failed' and busy[1][0] == 'transient', busy)
retry = call('s3', 'contacts.notify', {'contactId': result.get('contactId', 'c_1'), 'team': 'sales-busy'})
check('notify sales-busy: the retry under the same key succeeds',
      retry[0] == 'ok' and str(retry[1].get('notificationId', '')) != '', retry)
replay = call('s3', 'contacts.notify', {'contactId': result.get('contactId', 'c_1'), 'team': 'sales-busy'})
check('notify under the same key again answers the same notificationId', replay == retry, replay)
nowhere = call('s4', 'contacts.notify', {'contactId': 'c_1', 'team': 'nowhere'})
check('notify nowhere fails permanent', nowhere[0] == 'failed' and nowhere[1][0] == 'permanent', nowhere)

# Bad calls are permanent failures, never crashes.
unknown = call('s5', 'contacts.teleport', {})
check('unknown skill fails permanent', unknown[0] == 'failed' and unknown[1][0] == 'permanent', unknown)
bad = call('s6', 'contacts.add', {'name': 'Jane Roe', 'email': 42})
check('bad arguments fail permanent', bad[0] == 'failed' and bad[1][0] == 'permanent', bad)

# The credential guards every call and the ledger.
unauthorized = call('s7', 'contacts.add', {'name': 'Mallory', 'email': 'm@example.com'}, token='wrong')
check('a call with the wrong token gets HTTP 401', unauthorized[0] == 'other' and unauthorized[1][0] == 401, unauthorized)
status, _ = http('POST', '/', {'jsonrpc': '2.0', 'id': 1, 'method': 'SendMessage', 'params': {}}, {'A2A-Version': '1.0'})
check('a call without a token gets HTTP 401', status == 401, status)
status, _ = http('GET', '/ledger')
check('the ledger without a token gets HTTP 401', status == 401, status)

# The ledger shows what happened, in order.
status, ledger = http('GET', '/ledger', headers={'Authorization': f'Bearer {TOKEN}'})
ledger = ledger or {}
mine = lambda key: key.startswith(SAGA + ':')
calls = [(c['key'][len(SAGA) + 1:], c['skill'], c['outcome']) for c in ledger.get('calls', []) if mine(c['key'])]
expected_calls = [('s1', 'contacts.add', 'applied'), ('s1', 'contacts.add', 'replayed'),
                  ('s1:undo', 'contacts.remove', 'undone'), ('s1:undo', 'contacts.remove', 'replayed'),
                  ('s2:undo', 'contacts.remove', 'nothing-to-undo'), ('s2', 'contacts.add', 'refused-late'),
                  ('s3', 'contacts.notify', 'failed-transient'), ('s3', 'contacts.notify', 'applied'),
                  ('s3', 'contacts.notify', 'replayed'), ('s4', 'contacts.notify', 'failed-permanent'),
                  ('s5', 'contacts.teleport', 'failed-permanent'), ('s6', 'contacts.add', 'failed-permanent')]
check('GET /ledger logs every call in order with its outcome', status == 200 and calls == expected_calls, calls)
effects = {e['key'][len(SAGA) + 1:]: e for e in ledger.get('effects', []) if mine(e['key'])}
check('GET /ledger shows the contact as undone with its stored result',
      effects.get('s1', {}).get('undone') is True and effects['s1'].get('result') == result
      and effects['s1'].get('args') == {'name': 'Jane Roe', 'email': 'jane@example.com'}, effects.get('s1'))
check('GET /ledger shows the notification and no effect for the refused or failed calls',
      retry[0] == 'ok' and effects.get('s3', {}).get('result') == retry[1]
      and not {'s2', 's4', 's5', 's6', 's7'} & set(effects), sorted(effects))
check('GET /ledger tombstones the forward key whose undo came first', f'{SAGA}:s2' in ledger.get('tombstones', []),
      ledger.get('tombstones'))

print(f'{passed} passed, {failures} failed')
sys.exit(1 if failures else 0)
