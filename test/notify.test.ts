import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import pino from 'pino';
import { backends, type TestServer } from './helpers/server.ts';
import { serverWithMailSink, type MailSink } from './helpers/smtp.ts';
import { call, uploaded } from './helpers/http.ts';
import type { Sql } from '../src/db/sql.ts';
import { database } from './helpers/database.ts';
import { createSealer } from '../src/util/sealer.ts';
import { createOutbox, type Outbox } from '../src/mail/outbox.ts';
import { createMailTransport } from '../src/mail/transport.ts';
import { createDownloadNotifier, NOTIFY_WINDOW_MS } from '../src/notify/downloads.ts';
import { waitFor } from './helpers/wait.ts';
import { addressKey, mailboxOf, unsubscribe } from '../src/notify/recipients.ts';

const MIN = 60_000;

for (const backend of backends()) {
  describe(`notify_email batching with an injected clock (${backend})`, () => {
    let env: Awaited<ReturnType<typeof database>>;
    let sql: Sql;
    let outbox: Outbox;
    const sealer = createSealer(Buffer.from('s'.repeat(40)), 'mail-outbox');
    let clock = Date.parse('2026-11-22T10:00:00Z');
    before(async () => {
      env = await database(backend);
      sql = env.db.sql;
      // The transport is never used here: the test reads what was queued.
      outbox = createOutbox({ sql, sealer, transport: createMailTransport({ smtpUrl: undefined, dataDir: env.dataDir }), from: 'x@y', log: pino({ level: 'silent' }) });
    });
    after(() => env?.drop());

    const notifier = () =>
      createDownloadNotifier({
        sql, outbox, log: pino({ level: 'silent' }), baseUrl: 'https://s.example', now: () => new Date(clock),
        unsubscribeUrl: (key) => `https://s.example/unsubscribe?a=${key}&s=sig`,
      });
    async function bundle(code: string, email: string | null): Promise<number> {
      const [b] = await sql<{ id: number }[]>`
        insert into bundles (short_code, upload_token_hash, notify_email, max_size_bytes)
        values (${code}, ${randomBytes(32)}, ${email}, 1000) returning id`;
      return b!.id;
    }
    type Queued = { to: string; subject: string; text: string; html: string; headers: Record<string, string> };
    async function queued(): Promise<Queued[]> {
      const rows = await sql<{ to_addr: string; subject: string; body: Uint8Array }[]>`select to_addr, subject, body from mail_outbox order by id`;
      await sql`delete from mail_outbox`;
      return rows.map((r) => ({ to: r.to_addr, subject: r.subject, ...(JSON.parse(sealer.open(r.body, 'mail-outbox')) as Omit<Queued, 'to' | 'subject'>) }));
    }

    test('the first download is mailed at once; later ones within 10 minutes go out together in one mail', async () => {
      const n = notifier();
      const id = await bundle('Batch', 'owner@example.com');
      await n.downloaded(id, 'owner@example.com', 'a.txt');
      assert.equal(await n.flush(), 1);
      const [first, ...none] = await queued();
      assert.equal(none.length, 0);
      assert.equal(first!.to, 'owner@example.com');
      assert.match(first!.text, /2026-11-22 10:00:00 UTC {2}file named "a\.txt"/);

      clock += 1 * MIN;
      await n.downloaded(id, 'owner@example.com', 'b.txt');
      clock += 4 * MIN;
      await n.downloaded(id, 'owner@example.com', 'c.txt');
      assert.equal(await n.flush(), 0, 'within the window: nothing');
      clock += 4 * MIN + 59_000;
      assert.equal(await n.flush(), 0, 'one second before the window ends: nothing');
      clock += 1000;
      assert.equal(await n.flush(), 1);
      const [batch] = await queued();
      assert.match(batch!.subject, /2 files were downloaded from Batch/);
      assert.match(batch!.text, /10:01:00 UTC {2}file named "b\.txt"[\s\S]*10:05:00 UTC {2}file named "c\.txt"/);
      assert.equal(await n.flush(), 0, 'nothing left');
      clock += NOTIFY_WINDOW_MS * 3;
      assert.equal(await n.flush(), 0, 'no downloads, no mail');
    });

    test('bundles are independent; a bundle without notify_email records nothing', async () => {
      const n = notifier();
      const a = await bundle('Indp1', 'a@example.com');
      const b = await bundle('Indp2', 'b@example.com');
      const c = await bundle('Indp3', null);
      await n.downloaded(a, 'a@example.com', 'x');
      await n.downloaded(b, 'b@example.com', 'y');
      await n.downloaded(c, null, 'z');
      assert.equal((await sql`select count(*)::int as n from download_events where bundle_id = ${c}`)[0]!.n, 0);
      assert.equal(await n.flush(), 2);
      assert.deepEqual((await queued()).map((m) => m.to).sort(), ['a@example.com', 'b@example.com']);
    });

    test('one mailbox gets at most 20 mails a UTC day across all bundles, whatever its spelling or +tag; the next day it gets mail again', async () => {
      const n = notifier();
      const ids: number[] = [];
      for (let i = 0; i < 25; i++) {
        const email = i % 3 === 0 ? `victim+${i}@example.com` : i % 3 === 1 ? 'Victim@Example.com' : ' victim@example.com';
        ids.push(await bundle(`Cap${String(i).padStart(2, '0')}`, email));
        await n.downloaded(ids[i]!, email, `f${i}`);
      }
      assert.equal(await n.flush(), 20);
      assert.equal((await queued()).length, 20);
      assert.equal((await sql`select count(*)::int as n from download_events`)[0]!.n, 0, 'downloads past the cap are dropped, not kept');
      clock += 24 * 3_600_000;
      await n.downloaded(ids[0]!, ' victim@example.com', 'next day');
      assert.equal(await n.flush(), 1);
      assert.equal((await queued()).length, 1);
    });

    test('the uploader\'s text is quoted as a file name on one line; the mail carries one-click unsubscribe headers and link', async () => {
      const n = notifier();
      const id = await bundle('Spam1', 'x@example.com');
      await n.downloaded(id, 'x@example.com', 'URGENT your account is locked\r\nverify at https://evil.example <b>now</b>');
      await n.downloaded(id, 'x@example.com', 'Spam1.zip', 3);
      assert.equal(await n.flush(), 1);
      const [m] = await queued();
      assert.match(m!.text, /UTC {2}file named "URGENT your account is locked verify at https:\/\/evil\.example <b>now<\/b>"\n/);
      assert.match(m!.text, /UTC {2}all 3 files as Spam1\.zip\n/);
      assert.match(m!.text, /File names are shown as the uploader gave them/);
      assert.match(m!.html, /file named <code>&quot;URGENT[^<]*&lt;b&gt;now&lt;\/b&gt;&quot;<\/code>/);
      const key = createHash('sha256').update('x@example.com').digest('hex');
      const url = `https://s.example/unsubscribe?a=${key}&s=sig`;
      assert.ok(m!.text.includes(url) && m!.html.includes(url.replace('&', '&amp;')));
      assert.deepEqual(m!.headers, { 'List-Unsubscribe': `<${url}>`, 'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click' });
    });

    test('an unsubscribed mailbox gets no mail at any +tag; a link sent for a tagged address before tags were folded still holds', async () => {
      const n = notifier();
      await unsubscribe(sql, addressKey('gone+news@example.com'));
      const legacy = createHash('sha256').update('old+tag@example.com').digest('hex');
      await unsubscribe(sql, legacy);
      for (const [code, email] of [['Uns01', 'gone@example.com'], ['Uns02', 'GONE+x@example.com'], ['Uns03', 'old+tag@example.com']] as const) {
        await n.downloaded(await bundle(code, email), email, 'f');
      }
      assert.equal(await n.flush(), 0);
      assert.deepEqual(await queued(), []);
      assert.equal(mailboxOf(' A.B+c+d@Example.COM '), 'a.b@example.com');
      assert.equal(mailboxOf('+x@example.com'), '+x@example.com', 'no local part left: kept as typed');
    });

    test('concurrent flushes (several workers) queue one mail per bundle', async () => {
      const n = notifier();
      const id = await bundle('Concu', 'c@example.com');
      for (let i = 0; i < 5; i++) await n.downloaded(id, 'c@example.com', `f${i}`);
      const counts = await Promise.all([n.flush(), notifier().flush(), notifier().flush()]);
      assert.equal(counts.reduce((s, x) => s + x, 0), 1);
      const mails = await queued();
      assert.equal(mails.length, 1);
      assert.match(mails[0]!.subject, /5 files/);
    });
  });

  describe(`notify_email end to end: which downloads count (${backend})`, () => {
    let srv: TestServer;
    let smtp: MailSink;
    serverWithMailSink(backend, (s, m) => ([srv, smtp] = [s, m]));
    const events = async (): Promise<string[]> => (await srv.sql`select what from download_events order by id`).map((r) => r.what as string);

    test('GET downloads are mailed (what and when, no IP); HEAD and partial ranges are not; later ones wait for the window', async () => {
      const b = await uploaded(srv, [{ name: 'one.txt', data: '0123456789' }, { name: 'two.txt', data: 'abc' }], { fields: { notify_email: 'watch@example.com' } });
      const [one, two] = b.files;
      assert.equal((await call(srv, 'HEAD', one.download_url)).status, 200);
      assert.equal((await call(srv, 'GET', one.download_url, { headers: { range: 'bytes=0-3' } })).status, 206);
      assert.equal((await call(srv, 'GET', `/d/${one.id}`)).status, 200);
      const [first] = await smtp.waitFor((m) => /watch@example\.com/.test(JSON.stringify(m.to)));
      // Had the HEAD or the short range counted, they would be in this first mail with the GET.
      assert.equal((first!.text ?? '').match(/one\.txt/g)?.length, 1, `HEAD and a range that stops short do not count: ${first!.text}`);
      assert.match(first!.subject ?? '', new RegExp(b.short_code));
      assert.ok(!/127\.0\.0\.1|::1/.test(`${first!.text}${first!.html}`), 'no downloader address');

      // within the window: recorded, not mailed
      assert.equal((await call(srv, 'GET', two.download_url, { headers: { range: 'bytes=1-' } })).status, 206, 'a range reaching the end counts');
      assert.equal((await call(srv, 'GET', `/zip/${b.short_code}`)).status, 200);
      await waitFor('both downloads recorded', async () => (await events()).length === 2);
      assert.deepEqual(await events(), ['two.txt', `${b.short_code}.zip`]);

      // ten minutes pass; the next download (or the 30 s poll) sends the batch
      await srv.sql`update bundle_notifications set last_sent_at = last_sent_at - interval '10 minutes'`;
      assert.equal((await call(srv, 'GET', one.download_url)).status, 200);
      const [, second] = await smtp.waitFor((m) => /watch@example\.com/.test(JSON.stringify(m.to)), 2);
      // A mail sent within the window would be this second one, without the later download in it.
      assert.match(second!.text ?? '', /two\.txt[\s\S]*\.zip[\s\S]*one\.txt/);
      assert.match(second!.subject ?? '', /3 files were downloaded/);
      await waitFor('the mailed events consumed', async () => (await events()).length === 0);
    });

    test('the unsubscribe link: GET asks, a one-click POST (RFC 8058) unsubscribes, and no mail goes to that address from any bundle', async () => {
      const b = await uploaded(srv, [{ name: 'u.txt', data: 'u' }], { fields: { notify_email: 'Leave@Example.com' } });
      assert.equal((await call(srv, 'GET', b.files[0].download_url)).status, 200);
      const [m] = await smtp.waitFor((x) => /leave@example\.com/i.test(JSON.stringify(x.to)));
      const header = (name: string): string => m!.headerLines.find((h) => h.key === name)?.line.replace(/^[^:]*:\s*/, '') ?? '';
      assert.equal(header('list-unsubscribe-post'), 'List-Unsubscribe=One-Click');
      const url = /^<(.*)>$/.exec(header('list-unsubscribe'))?.[1] ?? '';
      const path = url.replace(/^http:\/\/[^/]+/, '');
      assert.match(path, /^\/unsubscribe\?a=[0-9a-f]{64}&s=[\w-]{43}$/);
      assert.ok((m!.text ?? '').includes(url), 'the link is in the text too');
      const page = await call(srv, 'GET', path);
      assert.equal(page.status, 200);
      assert.match(page.text, /<form method="post"/);
      assert.equal((await srv.sql`select count(*)::int as n from mail_unsubscribes`)[0]!.n, 0, 'GET alone changes nothing');
      const forged = await call(srv, 'POST', path.slice(0, -1) + (path.endsWith('A') ? 'B' : 'A'), { body: 'List-Unsubscribe=One-Click', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
      assert.equal(forged.status, 404);
      const post = await call(srv, 'POST', path, { body: 'List-Unsubscribe=One-Click', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
      assert.equal(post.status, 200);
      assert.equal((await srv.sql`select count(*)::int as n from mail_unsubscribes`)[0]!.n, 1);
      // Another bundle, the same address in other letters: downloads are not mailed.
      const other = await uploaded(srv, [{ name: 'v.txt', data: 'v' }], { fields: { notify_email: 'leave@example.COM' } });
      assert.equal((await call(srv, 'GET', other.files[0].download_url)).status, 200);
      // The checkpoint: a download from a subscribed address, recorded and mailed after that one.
      const later = await uploaded(srv, [{ name: 'w.txt', data: 'w' }], { fields: { notify_email: 'stay@example.com' } });
      assert.equal((await call(srv, 'GET', later.files[0].download_url)).status, 200);
      await smtp.waitFor((x) => /stay@example\.com/.test(JSON.stringify(x.to)));
      assert.equal(smtp.mails.filter((x) => /leave@example\.com/i.test(JSON.stringify(x.to))).length, 1, 'only the mail before the unsubscribe');
      assert.equal((await srv.sql`select count(*)::int as n from download_events`)[0]!.n, 0, 'the event was consumed, not mailed');
    });
  });
}
