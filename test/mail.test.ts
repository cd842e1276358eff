import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { simpleParser } from 'mailparser';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { startMailSink, type MailSink } from './helpers/smtp.ts';
import { freePort } from './helpers/services.ts';
import { call, uploaded } from './helpers/http.ts';
import { createSealer } from '../src/util/sealer.ts';
import { retryDelaySeconds } from '../src/mail/outbox.ts';
import { loadConfig, ConfigError } from '../src/config.ts';
import { waitFor } from './helpers/wait.ts';

describe('mail and billing units', () => {
  test('sealed values open only with the same secret, purpose and context, and detect tampering', () => {
    const a = createSealer(Buffer.from('x'.repeat(40)), 'p1');
    const sealed = a.seal('sk_secret', 'ctx');
    assert.ok(!sealed.includes(Buffer.from('sk_secret')));
    assert.equal(a.open(sealed, 'ctx'), 'sk_secret');
    assert.notDeepEqual(a.seal('sk_secret', 'ctx'), sealed, 'a fresh IV each time');
    assert.throws(() => a.open(sealed, 'other'));
    assert.throws(() => createSealer(Buffer.from('x'.repeat(40)), 'p2').open(sealed, 'ctx'));
    assert.throws(() => createSealer(Buffer.from('y'.repeat(40)), 'p1').open(sealed, 'ctx'));
    const flipped = Buffer.from(sealed);
    flipped[flipped.length - 1]! ^= 1;
    assert.throws(() => a.open(flipped, 'ctx'));
  });

  test('outbox retry delays grow exponentially from 30 s and stop at one hour', () => {
    assert.deepEqual([1, 2, 3, 4, 7, 8, 20].map(retryDelaySeconds), [30, 60, 120, 240, 1920, 3600, 3600]);
  });

  test('Stripe and mail settings are validated together, one problem per line', () => {
    const problems = (env: Record<string, string>): string[] => {
      try {
        loadConfig(env, '/tmp');
        return [];
      } catch (err) {
        assert.ok(err instanceof ConfigError);
        return err.problems;
      }
    };
    assert.deepEqual(problems({ STRIPE_SECRET_KEY: 'sk_test_a', STRIPE_WEBHOOK_SECRET: 'whsec_b', STRIPE_PRICE_MAX_ONCE: 'price_1' }), []);
    assert.match(problems({ STRIPE_SECRET_KEY: 'sk_test_a' }).join('\n'), /STRIPE_WEBHOOK_SECRET/);
    assert.match(problems({ STRIPE_SECRET_KEY: 'pk_test_a', STRIPE_WEBHOOK_SECRET: 'whsec_b' }).join('\n'), /STRIPE_SECRET_KEY/);
    assert.match(problems({ STRIPE_PRICE_STARTER_MONTHLY: 'price_1' }).join('\n'), /STRIPE_SECRET_KEY is not/);
    assert.match(problems({ STRIPE_SECRET_KEY: 'sk_test_a', STRIPE_WEBHOOK_SECRET: 'whsec_b', STRIPE_PRICE_POWER_ONCE: 'prod_1' }).join('\n'), /STRIPE_PRICE_POWER_ONCE/);
    assert.match(problems({ SMTP_URL: 'http://mail' }).join('\n'), /SMTP_URL/);
    assert.match(problems({ STRIPE_API_URL: 'not a url' }).join('\n'), /STRIPE_API_URL/);
  });
});

/** Uploads one file with a notify_email and downloads it once: one notification mail is due. Returns its URL. */
async function downloadOnce(srv: TestServer, email: string, name: string): Promise<string> {
  const b = await uploaded(srv, [{ name, data: 'hello' }], { fields: { notify_email: email } });
  const r = await call(srv, 'GET', b.files[0].download_url);
  assert.equal(r.status, 200);
  return b.files[0].download_url;
}

const outboxEmpty = async (srv: TestServer): Promise<boolean> => (await srv.sql`select count(*)::int as n from mail_outbox`)[0]!.n === 0;

for (const backend of backends()) {
  describe(`mail by default: .eml files in DATA_DIR/outbox; billing not configured (${backend})`, () => {
    let srv: TestServer;
    before(async () => {
      srv = await startServer(backend);
    });
    after(() => srv?.close());

    test('without Stripe settings the pages say billing is not configured, and the webhook answers 503', async () => {
      const page = await call(srv, 'GET', '/api-keys');
      assert.equal(page.status, 200);
      assert.match(page.text, /Billing is not configured/);
      assert.match(page.text, /Starter/, 'the plans are still listed');
      const body = new URLSearchParams({ email: 'a@b.example', choice: 'starter:monthly' }).toString();
      const form = { 'content-type': 'application/x-www-form-urlencoded' };
      assert.equal((await call(srv, 'POST', '/api-keys', { headers: form, body })).status, 503);
      const hook = await call(srv, 'POST', '/api-keys/webhook', { headers: { 'content-type': 'application/json' }, body: '{}' });
      assert.equal(hook.status, 503);
      assert.equal(hook.json.success, false);
      assert.match((await call(srv, 'GET', '/api-keys/portal')).text, /not configured/);
      // No page promises a payment or a portal that cannot exist here.
      for (const path of ['/api-keys/success?session_id=cs_test_whatever', `/api-keys/portal/open?token=${'A'.repeat(43)}`]) {
        const r = await call(srv, 'GET', path);
        assert.equal(r.status, 503, path);
        assert.match(r.text, /not configured/, path);
        assert.doesNotMatch(r.text, /http-equiv="refresh"|Continue to Stripe/, path);
      }
    });

    test('a notification is written as a parseable .eml file with text and HTML bodies', async () => {
      await downloadOnce(srv, 'eml@example.com', 'report <1>.pdf');
      const dir = path.join(srv.dataDir, 'outbox');
      await waitFor('an .eml file', () => fs.existsSync(dir) && fs.readdirSync(dir).some((f) => f.endsWith('.eml')));
      // The row goes once the file is written.
      await waitFor('the outbox row removed', () => outboxEmpty(srv));
      const [file] = fs.readdirSync(dir).filter((f) => f.endsWith('.eml'));
      const mail = await simpleParser(fs.readFileSync(path.join(dir, file!)));
      assert.equal(mail.to && !Array.isArray(mail.to) ? mail.to.value[0]?.address : '', 'eml@example.com');
      assert.match(mail.subject ?? '', /downloaded/);
      assert.match(mail.text ?? '', /report <1>\.pdf/);
      assert.ok(mail.html && mail.html.includes('report &lt;1&gt;.pdf'), 'HTML body escapes the file name');
      assert.ok(!(mail.text ?? '').includes('127.0.0.1'), 'no downloader address');
    });
  });

  describe(`mail over SMTP: an outage is retried, never lost (${backend})`, () => {
    let srv: TestServer;
    let port: number;
    let smtp: MailSink | undefined;
    before(async () => {
      port = await freePort();
      srv = await startServer(backend, { SMTP_URL: `smtp://127.0.0.1:${port}`, MAIL_FROM: 'Sluice <n@sluice.test>' });
    });
    after(async () => {
      await srv?.close();
      await smtp?.close();
    });

    test('a mail that failed while the SMTP server was down is delivered once it is back', async () => {
      const url = await downloadOnce(srv, 'later@example.com', 'late.txt');
      const row = await waitFor('a failed attempt recorded', async () => {
        const [r] = await srv.sql`select attempts, last_error, next_attempt_at > now() + interval '20 seconds' as backed_off from mail_outbox`;
        return r !== undefined && Number(r.attempts) >= 1 && r.last_error !== null ? r : null;
      });
      assert.equal(row!.backed_off, true, 'the next attempt waits (30 s after the first failure)');
      assert.match(String(row!.last_error), /ECONNREFUSED|connect/i);

      smtp = await startMailSink(port);
      // the back-off elapses; the next kick of the loop (another download here) delivers every due mail
      await srv.sql`update mail_outbox set next_attempt_at = now()`;
      assert.equal((await call(srv, 'GET', url)).status, 200);
      const [mail] = await smtp.waitFor((m) => /late\.txt/.test(m.text ?? ''));
      assert.equal(mail!.from?.value[0]?.address, 'n@sluice.test');
      assert.ok(mail!.html, 'an HTML body too');
      await waitFor('the outbox emptied', () => outboxEmpty(srv));
      assert.equal(smtp.mails.length, 1, 'one mail: the second download is inside the 10-minute window');
    });
  });
}
