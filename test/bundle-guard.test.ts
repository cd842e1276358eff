// One guard for bundle state (src/bundles/guard.ts): every route that changes a bundle or its files
// is refused when the bundle is quarantined (451), when its upload request is closed (404 for its
// senders), or when its owner key is revoked (401 for new bytes). The route table is walked, so a
// new mutating route without a probe here fails, whatever it does.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { stubDeps } from './helpers/stub-deps.ts';
import { bearer, call, upload, uploaded, type Json, type Res } from './helpers/http.ts';
import { OCTETS, tusCall, tusCreate, tusMeta, tusPatch, type TusRes } from './helpers/tus.ts';
import { mintKey } from './access-util.ts';
import { routeTable } from '../src/routes/table.ts';
import type { Route } from '../src/http/server.ts';

const METHOD: Partial<Record<Route['method'], string>> = { post: 'POST', put: 'PUT', del: 'DELETE', patch: 'PATCH' };

/** Mutating routes that change no existing bundle, and why. */
const NO_BUNDLE: Record<string, string> = {
  'POST /api/v1/my/requests': 'makes a new request with a new, empty bundle',
  'DELETE /api/v1/my/requests/:token': 'closes a request (the guard then refuses its senders)',
  'POST /api/verify-access': 'mints an access token',
  'POST /api/v1/reports': 'files a report',
  'POST /api-keys': 'starts a checkout',
  'POST /api-keys/webhook': 'billing events',
  'POST /api-keys/portal': 'billing portal',
  'POST /api-keys/portal/open': 'billing portal',
  'POST /unsubscribe': 'mail preferences',
  'POST /api/v1/my/webhooks': 'registers a webhook endpoint of the key',
  'DELETE /api/v1/my/webhooks/:id': 'removes a webhook endpoint',
};

/**
 * The operator console's forms: an operator acts on a bundle whatever its state (a release is of a
 * quarantined one), as `sluice bundles` does. Each needs a session and its token (test/admin-forms.test.ts).
 */
const byOperator = (route: string): boolean => / \/admin(\/|$)/.test(route);

const mutatingRoutes = (): string[] => [
  ...new Set(
    routeTable(stubDeps() as Parameters<typeof routeTable>[0]).flatMap((r) => (METHOD[r.method] ? [`${METHOD[r.method]} ${r.pattern}`] : [])),
  ),
];

interface Probe {
  /** The route label it exercises. */
  readonly route: string;
  readonly what: string;
  readonly status: number;
  run(): Promise<Res | TusRes>;
}

const statusOf = (r: Res | TusRes): number => r.status;
const textOf = (r: Res | TusRes): string => ('text' in r ? r.text : r.body);

/** Creates a tus upload and sends `sent` of its `length` bytes; returns its path. */
async function tusUpload(srv: TestServer, meta: Record<string, string>, length: number, sent: number): Promise<string> {
  const loc = await tusCreate(srv, length, { 'upload-metadata': tusMeta({ filename: 'piece.bin', ...meta }) });
  if (sent > 0) assert.equal((await tusPatch(srv, loc, 0, randomBytes(sent))).status, 204);
  return loc;
}

for (const backend of backends()) {
  describe(`the bundle guard (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend);
    });
    after(() => srv?.close());

    test('every mutating route is probed here or changes no bundle', () => {
      const probed = new Set(probes(srv, null).map((p) => p.route));
      const missing = mutatingRoutes().filter((r) => !probed.has(r) && !(r in NO_BUNDLE) && !byOperator(r));
      assert.deepEqual(missing, [], 'mutating routes with no guard probe: add one to probes()');
    });

    test('a quarantined bundle, a closed request and a revoked key: every change refused, nothing changed', async () => {
      const world = await setUp(srv);
      const before = await snapshot(srv, world);
      const wrong: string[] = [];
      for (const p of probes(srv, world)) {
        const r = await p.run();
        if (statusOf(r) !== p.status) wrong.push(`${p.route} (${p.what}) → ${statusOf(r)}, wanted ${p.status}: ${textOf(r).slice(0, 160)}`);
      }
      assert.deepEqual(wrong, []);
      assert.deepEqual(await snapshot(srv, world), before, 'no bundle, file, name or upload changed');
      // Removing is still allowed under a revoked key (only new bytes and names are refused).
      const del = await call(srv, 'DELETE', `/api/v1/file/${world.revoked.fileId}`, { headers: bearer(world.revoked.token) });
      assert.equal(del.status, 200, del.text);
    });
  });
}

interface World {
  owner: string;
  q: { code: string; token: string; vanity: string; fileId: number; open: string; done: string; partial: string };
  closed: { token: string; code: string; open: string; done: string };
  heldReq: { token: string };
  revoked: { code: string; token: string; fileId: number; open: string };
}

async function setUp(srv: TestServer): Promise<World> {
  const [owner, requester, doomed] = await Promise.all([mintKey(srv, 'premium'), mintKey(srv, 'starter'), mintKey(srv, 'starter')]);
  // Q: a Premium bundle with a vanity name, a finished and an unfinished tus append, then quarantined.
  const vanity = `guard-${randomBytes(4).toString('hex')}`;
  const qUp: Json = await uploaded(srv, [{ name: 'a.txt', data: 'evidence' }], { key: owner, fields: { vanity } });
  const token = qUp.upload_url.split('/').pop() as string;
  const q = {
    code: qUp.short_code as string,
    token,
    vanity,
    fileId: qUp.files[0].id as number,
    done: await tusUpload(srv, { upload_token: token }, 4, 4),
    open: await tusUpload(srv, { upload_token: token }, 8, 4),
    partial: await (async () => {
      const loc = await tusCreate(srv, 3, { 'upload-concat': 'partial' });
      assert.equal((await tusPatch(srv, loc, 0, Buffer.from('abc'))).status, 204);
      return loc;
    })(),
  };
  // A request with a finished and an unfinished upload from its sender, then closed by its owner.
  const newRequest = async (): Promise<{ token: string; code: string }> => {
    const r = await call(srv, 'POST', '/api/v1/my/requests', { headers: { ...bearer(requester), 'content-type': 'application/json' }, body: '{}' });
    assert.equal(r.status, 201, r.text);
    const list = await call(srv, 'GET', '/api/v1/my/requests', { headers: bearer(requester) });
    const entry = list.json.requests.find((e: Json) => (r.json.request_token as string).startsWith(e.token_prefix));
    return { token: r.json.request_token as string, code: entry.short_code as string };
  };
  const req = await newRequest();
  const closed = {
    ...req,
    done: await tusUpload(srv, { request_token: req.token }, 4, 4),
    open: await tusUpload(srv, { request_token: req.token }, 8, 4),
  };
  assert.equal((await call(srv, 'DELETE', `/api/v1/my/requests/${req.token}`, { headers: bearer(requester) })).status, 200);
  // A request whose bundle is quarantined.
  const heldReq = await newRequest();
  // A bundle of a key that is then revoked, with an unfinished append from its upload token's holder.
  const rUp: Json = await uploaded(srv, [{ name: 'b.txt', data: 'mine' }, { name: 'c.txt', data: 'also' }], { key: doomed });
  const rToken = rUp.upload_url.split('/').pop() as string;
  const revoked = { code: rUp.short_code as string, token: rToken, fileId: rUp.files[0].id as number, open: await tusUpload(srv, { upload_token: rToken }, 8, 4) };
  // What the operator commands do (sluice bundles quarantine, sluice keys revoke), in one statement each.
  await srv.sql`update bundles set quarantined_at = now() where short_code in ${srv.sql([q.code, heldReq.code])}`;
  await srv.sql`update api_keys set revoked_at = now() where id = (select api_key_id from bundles where short_code = ${revoked.code})`;
  return { owner, q, closed, heldReq, revoked };
}

/** Each bundle's files, totals and name, and the tus uploads left: what no refused change may alter. */
async function snapshot(srv: TestServer, w: World): Promise<unknown> {
  const codes = [w.q.code, w.closed.code, w.revoked.code];
  const bundles = await srv.sql`
    select b.short_code, b.vanity, b.file_count, b.total_size_bytes::text as total,
           (select string_agg(f.id::text || ':' || f.size::text, ',' order by f.id) from files f where f.bundle_id = b.id) as files
    from bundles b where b.short_code in ${srv.sql(codes)} order by b.short_code`;
  const uploads = await srv.sql`select id, upload_offset::text as offset, completed_at is not null as done from tus_uploads order by id`;
  return { bundles: bundles.map((r) => ({ ...r })), uploads: uploads.map((r) => ({ ...r })) };
}

/** The probes, each a change one of the guarded bundles must refuse. With no world, only their routes are read. */
function probes(srv: TestServer, world: World | null): Probe[] {
  const w = world as World;
  const file = [{ name: 'more.txt', data: 'more bytes' }];
  const json = (key: string): Record<string, string> => ({ ...bearer(key), 'content-type': 'application/json' });
  const tusNew = (path: string, meta: Record<string, string>, extra: Record<string, string> = {}): Promise<TusRes> =>
    tusCall(srv, 'POST', path, { 'upload-length': '4', 'upload-metadata': tusMeta({ filename: 'x.bin', ...meta }), ...extra });
  const patchOpen = (loc: string): Promise<TusRes> => tusPatch(srv, loc, 4, Buffer.from('tail'));
  return [
    // The quarantined bundle: 451 on every change, by every actor.
    { route: 'POST /api/v1/upload/:token', what: 'append to quarantined', status: 451, run: () => upload(srv, file, { path: `/api/v1/upload/${w.q.token}` }) },
    { route: 'DELETE /api/v1/bundle/:code', what: 'delete quarantined by token', status: 451, run: () => call(srv, 'DELETE', `/api/v1/bundle/${w.q.code}`, { headers: { 'x-upload-token': w.q.token } }) },
    { route: 'DELETE /api/v1/file/:id', what: 'delete a file of quarantined', status: 451, run: () => call(srv, 'DELETE', `/api/v1/file/${w.q.fileId}`, { headers: bearer(w.q.token) }) },
    { route: 'DELETE /api/v1/my/bundles/:code', what: 'owner deletes quarantined', status: 451, run: () => call(srv, 'DELETE', `/api/v1/my/bundles/${w.q.code}`, { headers: bearer(w.owner) }) },
    { route: 'PUT /api/v1/my/bundles/:code/vanity', what: 'owner renames quarantined', status: 451, run: () => call(srv, 'PUT', `/api/v1/my/bundles/${w.q.code}/vanity`, { headers: json(w.owner), body: JSON.stringify({ vanity: `${w.q.vanity}-2` }) }) },
    { route: 'DELETE /api/v1/my/bundles/:code/vanity', what: 'owner frees the name of quarantined', status: 451, run: () => call(srv, 'DELETE', `/api/v1/my/bundles/${w.q.code}/vanity`, { headers: bearer(w.owner) }) },
    { route: 'POST /api/v1/upload', what: 'a new bundle takes the name of quarantined', status: 409, run: () => upload(srv, file, { key: w.owner, fields: { vanity: w.q.vanity.toUpperCase() } }) },
    { route: 'POST /api/v1/tus/', what: 'tus append to quarantined', status: 451, run: () => tusNew('/api/v1/tus/', { upload_token: w.q.token }) },
    { route: 'POST /api/v1/tus', what: 'tus append to quarantined (no slash)', status: 451, run: () => tusNew('/api/v1/tus', { upload_token: w.q.token }) },
    { route: 'POST /api/v1/tus/', what: 'tus concatenation into quarantined', status: 451, run: () => tusCall(srv, 'POST', '/api/v1/tus/', { 'upload-concat': `final;${w.q.partial}`, 'upload-metadata': tusMeta({ upload_token: w.q.token }) }) },
    { route: 'PATCH /api/v1/tus/:id', what: 'bytes to an append of quarantined', status: 451, run: () => patchOpen(w.q.open) },
    { route: 'PATCH /api/v1/tus/:id', what: 'bytes by method override', status: 451, run: () => tusCall(srv, 'POST', w.q.open, { ...OCTETS, 'x-http-method-override': 'PATCH', 'upload-offset': '4' }, Buffer.from('tail')) },
    { route: 'DELETE /api/v1/tus/:id', what: 'terminate a finished append of quarantined', status: 451, run: () => tusCall(srv, 'DELETE', w.q.done) },
    { route: 'POST /api/v1/requests/:token/upload', what: 'send into a quarantined request bundle', status: 451, run: () => upload(srv, file, { path: `/api/v1/requests/${w.heldReq.token}/upload` }) },
    // The closed request: its senders change nothing (404, as the request is gone for them).
    { route: 'POST /api/v1/requests/:token/upload', what: 'send to a closed request', status: 404, run: () => upload(srv, file, { path: `/api/v1/requests/${w.closed.token}/upload` }) },
    { route: 'POST /api/v1/tus/', what: 'tus send to a closed request', status: 404, run: () => tusNew('/api/v1/tus/', { request_token: w.closed.token }) },
    { route: 'PATCH /api/v1/tus/:id', what: 'finish a send after the close', status: 404, run: () => patchOpen(w.closed.open) },
    { route: 'DELETE /api/v1/tus/:id', what: "a sender removes a file from the owner's bundle after the close", status: 404, run: () => tusCall(srv, 'DELETE', w.closed.done) },
    // The revoked key's bundle: no new bytes.
    { route: 'POST /api/v1/upload/:token', what: "append to a revoked key's bundle", status: 401, run: () => upload(srv, file, { path: `/api/v1/upload/${w.revoked.token}` }) },
    { route: 'POST /api/v1/tus/', what: "tus append to a revoked key's bundle", status: 401, run: () => tusNew('/api/v1/tus/', { upload_token: w.revoked.token }) },
    { route: 'PATCH /api/v1/tus/:id', what: "bytes to an append of a revoked key's bundle", status: 401, run: () => patchOpen(w.revoked.open) },
  ];
}
