import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { backends, startServer, type TestServer } from './helpers/server.ts';
import { startStripeDouble, signedEvent, type StripeDouble } from './helpers/stripe-double.ts';
import { startMailSink, type MailSink } from './helpers/smtp.ts';
import { DAY_MS, KEY_RE } from './access-util.ts';
import { bearer, call, type Res } from './helpers/http.ts';
import { logCheckpoint, logOf } from './upload-util.ts';
import { waitFor } from './helpers/wait.ts';

const WHSEC = 'whsec_testsecret123';
const PRICES = {
  STRIPE_PRICE_STARTER_MONTHLY: 'price_starter_m',
  STRIPE_PRICE_STARTER_ONCE: 'price_starter_o',
  STRIPE_PRICE_POWER_MONTHLY: 'price_power_m',
  STRIPE_PRICE_POWER_ONCE: 'price_power_o',
  STRIPE_PRICE_MAX_MONTHLY: 'price_max_m',
  STRIPE_PRICE_PREMIUM_MONTHLY: 'price_premium_m',
};
const FORM = { 'content-type': 'application/x-www-form-urlencoded' };
const keyIn = (text: string): string | undefined => /sk_[A-Za-z0-9]{43}/.exec(text)?.[0];

let seq = 0;
/** A paid Checkout Session object as Stripe sends it in checkout.session.completed. */
function paidSession(o: { mode: 'subscription' | 'payment'; plan: string; email: string; id?: string }): Record<string, unknown> {
  seq++;
  return {
    id: o.id ?? `cs_test_${Date.now()}_${seq}`,
    object: 'checkout.session',
    mode: o.mode,
    payment_status: 'paid',
    status: 'complete',
    customer: `cus_${seq}_${Date.now()}`,
    customer_details: { email: o.email },
    customer_email: o.email,
    subscription: o.mode === 'subscription' ? `sub_${seq}_${Date.now()}` : null,
    metadata: { plan: o.plan },
  };
}

for (const backend of backends()) {
  describe(`billing: checkout, webhook, key reveal, subscription life cycle, portal (${backend})`, () => {
    let srv: TestServer;
    let stripe: StripeDouble;
    let smtp: MailSink;
    before(async () => {
      stripe = await startStripeDouble();
      smtp = await startMailSink();
      srv = await startServer(backend, {
        STRIPE_SECRET_KEY: 'sk_test_sluice',
        STRIPE_WEBHOOK_SECRET: WHSEC,
        STRIPE_API_URL: stripe.url,
        SMTP_URL: smtp.url,
        MAIL_FROM: 'Sluice Test <billing@sluice.test>',
        BASE_URL: 'https://files.example.test',
        ...PRICES,
      });
    });
    after(async () => {
      await srv?.close();
      await stripe?.close();
      await smtp?.close();
    });

    const post = (path: string, body: string, headers: Record<string, string> = FORM): Promise<Res> =>
      call(srv, 'POST', path, { headers, body });
    const deliver = (ev: { payload: string; headers: Record<string, string> }): Promise<Res> =>
      post('/api-keys/webhook', ev.payload, ev.headers);
    /** Completes a checkout through the webhook and returns the key from the buyer's inbox. */
    async function buy(mode: 'subscription' | 'payment', plan: string, email: string): Promise<{ key: string; session: Record<string, unknown> }> {
      const session = paidSession({ mode, plan, email });
      const r = await deliver(signedEvent(WHSEC, 'checkout.session.completed', session));
      assert.equal(r.status, 200, r.text);
      const [mail] = await smtp.waitFor((m) => m.to !== undefined && JSON.stringify(m.to).includes(email));
      const key = keyIn(mail!.text ?? '');
      assert.ok(key, mail!.text);
      await outboxDrained();
      return { key, session };
    }
    /**
     * Every queued mail has been handed to the SMTP sink (a row goes once delivered). Mails are queued
     * in the transaction of the request that causes them, so after its answer this is the checkpoint
     * for "no mail came of it". (The embedded database also has one session for all connections: a
     * test queries it only once the outbox is done.)
     */
    const outboxDrained = (): Promise<boolean> =>
      waitFor('the mail outbox to drain', async () =>
        (await srv.sql<{ n: number }[]>`select count(*)::int as n from mail_outbox where failed_at is null`)[0]!.n === 0);
    const usage = (key: string) => call(srv, 'GET', '/api/v1/my/usage', { headers: bearer(key) });

    test('the plan page lists every plan with price and limits from the plan table, under the strict CSP', async () => {
      const r = await call(srv, 'GET', '/api-keys');
      assert.equal(r.status, 200);
      assert.match(String(r.headers['content-type']), /^text\/html/);
      assert.match(String(r.headers['content-security-policy']), /script-src 'self'/);
      // The form's 303 leads to Checkout: browsers check form-action against that redirect too.
      assert.match(String(r.headers['content-security-policy']), /form-action 'self' https:\/\/checkout\.stripe\.com https:\/\/billing\.stripe\.com;/);
      for (const s of ['Starter', 'Power', 'Max', 'Premium', 'US$5.00', 'US$25.00', 'US$45.00', 'US$19.99', '5 GB', '50 GB', '100 GB', '10 GB', '300', '1200', 'never expire']) {
        assert.ok(r.text.includes(s), `${s} on the page`);
      }
      assert.ok(!r.text.includes('not configured'));
      // Anonymous uploads take a password too: it is no reason to buy a key.
      assert.ok(!/password/i.test(r.text.replace(/<input[^>]*>/g, '')), 'no password feature listed');
      assert.equal(r.headers['x-ratelimit-limit'], undefined, 'pages spend no API budget');
      // max has no one-time price configured: its pass button is disabled, premium's too
      assert.match(r.text, /value="max:once" form="buy" disabled/);
      assert.doesNotMatch(r.text, /value="starter:monthly" form="buy" disabled/);
    });

    test('submitting creates a Checkout Session (subscription or payment) and redirects 303 to it', async () => {
      stripe.calls.length = 0;
      const r = await post('/api-keys', new URLSearchParams({ email: 'buyer@example.com', choice: 'power:monthly' }).toString());
      assert.equal(r.status, 303, r.text);
      assert.match(String(r.headers.location), /^https:\/\/checkout\.stripe\.test\/c\/pay\/cs_test_/);
      const c = stripe.calls.at(-1)!;
      assert.equal(c.path, '/v1/checkout/sessions');
      assert.equal(c.auth, 'Bearer sk_test_sluice');
      assert.equal(c.form.mode, 'subscription');
      assert.equal(c.form['line_items[0][price]'], 'price_power_m');
      assert.equal(c.form['line_items[0][quantity]'], '1');
      assert.equal(c.form['metadata[plan]'], 'power');
      assert.equal(c.form.customer_email, 'buyer@example.com');
      assert.equal(c.form.success_url, 'https://files.example.test/api-keys/success?session_id={CHECKOUT_SESSION_ID}');

      const once = await post('/api-keys', new URLSearchParams({ email: 'buyer@example.com', choice: 'starter:once' }).toString());
      assert.equal(once.status, 303);
      assert.equal(stripe.calls.at(-1)!.form.mode, 'payment');
      assert.equal(stripe.calls.at(-1)!.form['line_items[0][price]'], 'price_starter_o');
    });

    test('a bad e-mail, an unknown plan or an unpriced option is refused without calling Stripe', async () => {
      stripe.calls.length = 0;
      for (const [email, choice] of [['nope', 'starter:monthly'], ['a@b.example', 'gold:monthly'], ['a@b.example', 'max:once'], ['a@b.example', 'starter:weekly']]) {
        const r = await post('/api-keys', new URLSearchParams({ email: email!, choice: choice! }).toString());
        assert.equal(r.status, 400, `${email} ${choice}`);
        assert.match(String(r.headers['content-type']), /^text\/html/);
      }
      assert.equal(stripe.calls.length, 0);
    });

    test('a form post from another site is refused with 403: no checkout, no mail, no portal session', async () => {
      stripe.calls.length = 0;
      const mails = smtp.mails.length;
      const email = `cross-${Date.now()}@example.com`;
      const forms: Array<[string, string]> = [
        ['/api-keys', new URLSearchParams({ email, choice: 'starter:monthly' }).toString()],
        ['/api-keys/portal', new URLSearchParams({ email }).toString()],
        ['/api-keys/portal/open', new URLSearchParams({ token: 'A'.repeat(43) }).toString()],
      ];
      for (const [path, body] of forms) {
        for (const from of [{ 'sec-fetch-site': 'cross-site' }, { origin: 'https://evil.example' }] as Array<Record<string, string>>) {
          const r = await post(path, body, { ...FORM, ...from });
          assert.equal(r.status, 403, `${path} ${JSON.stringify(from)}`);
          assert.match(String(r.headers['content-type']), /^text\/html/);
        }
      }
      // The same checkout from our own page goes through.
      const own = await post('/api-keys', forms[0]![1], { ...FORM, 'sec-fetch-site': 'same-origin', origin: 'https://files.example.test' });
      assert.equal(own.status, 303, own.text);
      assert.equal(stripe.calls.length, 1);
      await outboxDrained();
      assert.equal(smtp.mails.length, mails);
    });

    test('a form post of the wrong type or size is a 4xx page and logs no unhandled rejection', async () => {
      const mark = logOf(srv).text.length;
      for (const path of ['/api-keys', '/api-keys/portal', '/api-keys/portal/open']) {
        const r = await post(path, 'a'.repeat(20_000), { 'content-type': 'text/plain' });
        assert.ok(r.status >= 400 && r.status < 500, `${path}: ${r.status}`);
        assert.match(String(r.headers['content-type']), /^text\/html/);
      }
      await logCheckpoint(srv);
      assert.doesNotMatch(logOf(srv).text.slice(mark), /unhandled rejection/);
    });

    test('Stripe being down answers 502 with a page, not a stack trace', async () => {
      stripe.failWith = 500;
      try {
        const r = await post('/api-keys', new URLSearchParams({ email: 'a@b.example', choice: 'starter:monthly' }).toString());
        assert.equal(r.status, 502);
        assert.match(r.text, /payment provider/);
      } finally {
        stripe.failWith = null;
      }
    });

    test('the webhook refuses a missing, wrong, stale or future-dated signature with 400 and changes nothing', async () => {
      const ev = signedEvent(WHSEC, 'checkout.session.completed', paidSession({ mode: 'payment', plan: 'starter', email: 'x@example.com' }));
      const before = (await srv.sql`select count(*)::int as n from api_keys`)[0]!.n;
      assert.equal((await post('/api-keys/webhook', ev.payload, { 'content-type': 'application/json' })).status, 400);
      const wrong = signedEvent('whsec_other', 'checkout.session.completed', paidSession({ mode: 'payment', plan: 'starter', email: 'x@example.com' }));
      assert.equal((await deliver(wrong)).status, 400);
      const stale = signedEvent(WHSEC, 'checkout.session.completed', paidSession({ mode: 'payment', plan: 'starter', email: 'x@example.com' }), {
        timestamp: Math.floor(Date.now() / 1000) - 301,
      });
      assert.equal((await deliver(stale)).status, 400);
      // Validly signed, but dated beyond the tolerance ahead: refused like a stale one.
      // 302: a whole second past the 300 s tolerance, however late in its second the request lands.
      for (const ahead of [302, 10 * 365 * 86_400]) {
        const future = signedEvent(WHSEC, 'checkout.session.completed', paidSession({ mode: 'payment', plan: 'starter', email: 'x@example.com' }), {
          timestamp: Math.ceil(Date.now() / 1000) + ahead,
        });
        const r = await deliver(future);
        assert.equal(r.status, 400, `t = now + ${ahead} s: ${r.text}`);
      }
      // a body altered after signing
      assert.equal((await post('/api-keys/webhook', ev.payload.replace('starter', 'premium'), ev.headers)).status, 400);
      assert.equal((await srv.sql`select count(*)::int as n from api_keys`)[0]!.n, before);
      assert.equal((await srv.sql`select count(*)::int as n from stripe_events`)[0]!.n, 0);
    });

    test('a signed event that is not a usable event is 400 (Stripe stops retrying), not 500, and changes nothing', async () => {
      const session = paidSession({ mode: 'payment', plan: 'starter', email: 'x@example.com' });
      const bad = [
        signedEvent(WHSEC, 'checkout.session.completed', session, { id: 'evt_\u0000nul' }),
        signedEvent(WHSEC, 'checkout.session.completed', session, { created: 1e20 }),
        signedEvent(WHSEC, 'checkout.session.completed', { ...session, customer_details: { email: 'a\u0000b@example.com' } }),
      ];
      for (const ev of bad) {
        const r = await deliver(ev);
        assert.equal(r.status, 400, `${ev.payload.slice(0, 120)} -> ${r.status}`);
      }
      assert.equal((await srv.sql`select count(*)::int as n from stripe_events`)[0]!.n, 0);
      assert.equal((await srv.sql`select count(*)::int as n from api_keys`)[0]!.n, 0);
    });

    test('a webhook body over 1 MiB is refused with 413', async () => {
      const big = JSON.stringify({ id: 'evt_big', pad: 'x'.repeat(1024 * 1024 + 10) });
      const r = await post('/api-keys/webhook', big, { 'content-type': 'application/json', 'stripe-signature': 't=1,v1=00' });
      assert.equal(r.status, 413);
      assert.equal((await srv.sql`select count(*)::int as n from stripe_events`)[0]!.n, 0);
    });

    test('subscription: paid checkout mints a key, mails it, shows it once; duplicates never mint a second', async () => {
      const email = `sub-${Date.now()}@example.com`;
      const session = paidSession({ mode: 'subscription', plan: 'starter', email });
      const ev = signedEvent(WHSEC, 'checkout.session.completed', session);
      // the same event five times at once, and the same session under another event id
      const replies = await Promise.all([...Array(5)].map(() => deliver(ev)));
      const other = await deliver(signedEvent(WHSEC, 'checkout.session.completed', session));
      for (const r of [...replies, other]) assert.equal(r.status, 200, r.text);
      const [mail] = await smtp.waitFor((m) => JSON.stringify(m.to).includes(email));
      assert.match(mail!.subject ?? '', /Starter API key/);
      assert.equal(mail!.from?.value[0]?.address, 'billing@sluice.test');
      assert.ok(mail!.html && mail!.html.includes(keyIn(mail!.text ?? '')!), 'HTML body carries the key too');
      const key = keyIn(mail!.text ?? '')!;
      assert.match(key, KEY_RE);
      await outboxDrained();
      assert.equal(smtp.mails.filter((m) => JSON.stringify(m.to).includes(email)).length, 1, 'one mail');
      const rows = await srv.sql`select api_key_id from purchases where checkout_session_id = ${session.id as string}`;
      assert.equal(rows.length, 1);
      assert.equal((await srv.sql`select count(*)::int as n from api_keys where owner_email = ${email}`)[0]!.n, 1);

      // the key works
      const u = await usage(key);
      assert.equal(u.status, 200, u.text);
      assert.equal(u.json.key.rate_limit_per_hour, 300);

      // two concurrent reveals: exactly one shows the key, and never again afterwards
      const url = `/api-keys/success?session_id=${session.id as string}`;
      const pages = await Promise.all([call(srv, 'GET', url), call(srv, 'GET', url)]);
      const shown = pages.filter((p) => keyIn(p.text) !== undefined);
      assert.equal(shown.length, 1);
      assert.equal(keyIn(shown[0]!.text), key);
      assert.equal(shown[0]!.headers['cache-control'], 'no-store');
      const later = await call(srv, 'GET', url);
      assert.equal(later.status, 200);
      assert.equal(keyIn(later.text), undefined);
      assert.match(later.text, /already shown/);
      const [p] = await srv.sql`select key_sealed from purchases where checkout_session_id = ${session.id as string}`;
      assert.equal(p!.key_sealed, null, 'nothing left to reveal');
      assert.equal((await srv.sql`select count(*)::int as n from mail_outbox`)[0]!.n, 0, 'delivered mail leaves the outbox');
    });

    test('no plaintext key rests in the database; an unrevealed key is dropped after its hour', async () => {
      const email = `hour-${Date.now()}@example.com`;
      const { key, session } = await buy('payment', 'power', email);
      const dump = JSON.stringify(await srv.sql`select p.*, k.* from purchases p join api_keys k on k.id = p.api_key_id where p.email = ${email}`);
      assert.ok(!dump.includes(key) && !dump.includes(key.slice(3)), 'plaintext not stored');
      await srv.sql`update purchases set reveal_until = now() - interval '1 second' where checkout_session_id = ${session.id as string}`;
      const page = await call(srv, 'GET', `/api-keys/success?session_id=${session.id as string}`);
      assert.equal(keyIn(page.text), undefined);
      assert.match(page.text, /already shown/);
    });

    test('a success page before the webhook says the payment is being confirmed and reloads, 30 times at most', async () => {
      const r = await call(srv, 'GET', '/api-keys/success?session_id=cs_test_notyet');
      assert.equal(r.status, 200);
      assert.match(r.text, /<meta http-equiv="refresh" content="3; url=\/api-keys\/success\?session_id=cs_test_notyet&amp;n=1">/);
      const later = await call(srv, 'GET', '/api-keys/success?session_id=cs_test_notyet&n=29');
      assert.match(later.text, /content="3; url=\/api-keys\/success\?session_id=cs_test_notyet&amp;n=30"/);
      for (const n of ['30', '31', '99999999999999999999']) {
        const last = await call(srv, 'GET', `/api-keys/success?session_id=cs_test_notyet&n=${n}`);
        assert.equal(last.status, 200);
        assert.doesNotMatch(last.text, /http-equiv="refresh"/, `n=${n}: a session that never was does not reload forever`);
        assert.match(last.text, /arrives by e-mail/);
      }
      assert.equal((await call(srv, 'GET', '/api-keys/success?session_id=../etc')).status, 404);
    });

    test('one-time pass: a 30-day key that ends in 401', async () => {
      const { key } = await buy('payment', 'starter', `pass-${Date.now()}@example.com`);
      const [k] = await srv.sql`select id, expires_at from api_keys where prefix = ${key.slice(0, 12)}`;
      const days = (new Date(k!.expires_at).getTime() - Date.now()) / DAY_MS;
      assert.ok(days > 29.9 && days <= 30, `expires in ${days} days`);
      assert.equal((await usage(key)).status, 200);
      // 30 days pass
      await srv.sql`update api_keys set expires_at = now() - interval '1 second' where id = ${k!.id}`;
      assert.equal((await usage(key)).status, 401);
    });

    test('subscription life cycle: payment failure grace, recovery, plan change, cancellation to 401', async () => {
      const { key, session } = await buy('subscription', 'starter', `life-${Date.now()}@example.com`);
      const sub = session.subscription as string;
      const t0 = Math.floor(Date.now() / 1000);
      const expiresAt = async (): Promise<Date | null> =>
        (await srv.sql`select expires_at from api_keys where prefix = ${key.slice(0, 12)}`)[0]!.expires_at;
      const invoice = (type: string, created: number) =>
        deliver(signedEvent(WHSEC, type, { id: `in_${created}`, object: 'invoice', parent: { type: 'subscription_details', subscription_details: { subscription: sub } } }, { created }));
      const subEvent = (type: string, status: string, price: string, created: number) =>
        deliver(signedEvent(WHSEC, type, { id: sub, object: 'subscription', status, items: { data: [{ price: { id: price } }] } }, { created }));

      assert.equal((await invoice('invoice.payment_failed', t0 + 1)).status, 200);
      const grace = await expiresAt();
      assert.ok(grace, 'grace period set');
      const graceDays = (grace.getTime() - Date.now()) / DAY_MS;
      assert.ok(graceDays > 6.9 && graceDays <= 7, `grace ${graceDays} days`);
      assert.equal((await usage(key)).status, 200, 'still works during the grace period');
      // a second failure does not extend it
      assert.equal((await invoice('invoice.payment_failed', t0 + 2)).status, 200);
      assert.equal((await expiresAt())!.getTime(), grace.getTime());
      // paid again: no end
      assert.equal((await invoice('invoice.paid', t0 + 3)).status, 200);
      assert.equal(await expiresAt(), null);
      // an older failure delivered late changes nothing
      assert.equal((await invoice('invoice.payment_failed', t0 + 1)).status, 200);
      assert.equal(await expiresAt(), null);

      // plan change in the portal
      assert.equal((await subEvent('customer.subscription.updated', 'active', 'price_power_m', t0 + 4)).status, 200);
      assert.equal((await usage(key)).json.key.rate_limit_per_hour, 1200);
      assert.equal((await srv.sql`select plan from api_keys where prefix = ${key.slice(0, 12)}`)[0]!.plan, 'power');

      // cancellation ends the key now
      assert.equal((await subEvent('customer.subscription.deleted', 'canceled', 'price_power_m', t0 + 5)).status, 200);
      assert.equal((await usage(key)).status, 401);
      // nothing revives it, not even a newer "active" update
      assert.equal((await subEvent('customer.subscription.updated', 'active', 'price_power_m', t0 + 6)).status, 200);
      assert.equal((await invoice('invoice.paid', t0 + 7)).status, 200);
      assert.equal((await usage(key)).status, 401);
    });

    test('a cancellation delivered before its checkout is refused with 503 until the purchase exists', async () => {
      const email = `early-${Date.now()}@example.com`;
      const session = paidSession({ mode: 'subscription', plan: 'starter', email });
      const sub = session.subscription as string;
      const t0 = Math.floor(Date.now() / 1000);
      const cancel = signedEvent(WHSEC, 'customer.subscription.deleted',
        { id: sub, object: 'subscription', status: 'canceled', metadata: { plan: 'starter' }, items: { data: [] } }, { created: t0 + 5 });
      // Someone else's subscription on the same Stripe account: acknowledged and ignored.
      const foreign = await deliver(signedEvent(WHSEC, 'customer.subscription.deleted',
        { id: 'sub_not_ours', object: 'subscription', status: 'canceled', items: { data: [] } }, { created: t0 + 5 }));
      assert.equal(foreign.status, 200, foreign.text);
      const early = await deliver(cancel);
      assert.equal(early.status, 503, early.text);
      assert.equal((await srv.sql`select count(*)::int as n from stripe_events where id = ${cancel.id}`)[0]!.n, 0, 'not recorded: Stripe retries it');
      assert.equal((await deliver(signedEvent(WHSEC, 'checkout.session.completed', session, { created: t0 + 1 }))).status, 200);
      const [mail] = await smtp.waitFor((m) => JSON.stringify(m.to).includes(email));
      const key = keyIn(mail!.text ?? '')!;
      assert.equal((await usage(key)).status, 200);
      // Stripe's retry of the cancellation now ends the key.
      assert.equal((await deliver(cancel)).status, 200);
      assert.equal((await usage(key)).status, 401);
    });

    test('a subscription past its grace period: the key expires', async () => {
      const { key, session } = await buy('subscription', 'max', `grace-${Date.now()}@example.com`);
      const created = Math.floor(Date.now() / 1000);
      const r = await deliver(
        signedEvent(WHSEC, 'customer.subscription.updated', { id: session.subscription, object: 'subscription', status: 'past_due', items: { data: [] } }, { created }),
      );
      assert.equal(r.status, 200);
      assert.equal((await usage(key)).status, 200);
      await srv.sql`update api_keys set expires_at = now() - interval '1 second' where prefix = ${key.slice(0, 12)}`; // 7 days pass
      assert.equal((await usage(key)).status, 401);
    });

    test('existing bundles of an expired key stay reachable until their own expiry', async () => {
      const { key, session } = await buy('subscription', 'starter', `bundle-${Date.now()}@example.com`);
      const { multipart } = await import('./helpers/multipart.ts');
      const { body, contentType } = multipart([{ name: 'files[]', filename: 'kept.txt', data: Buffer.from('kept') }]);
      const up = await call(srv, 'POST', '/api/v1/upload', { headers: { 'content-type': contentType, ...bearer(key) }, body });
      assert.ok(up.status === 200 || up.status === 201, up.text);
      await deliver(signedEvent(WHSEC, 'customer.subscription.deleted', { id: session.subscription, object: 'subscription', status: 'canceled' }));
      assert.equal((await usage(key)).status, 401);
      const got = await call(srv, 'GET', up.json.files[0].download_url);
      assert.equal(got.status, 200);
      assert.equal(got.text, 'kept');
    });

    test('portal: the same answer for any address; a known one gets a single-use link that opens the Billing Portal', async () => {
      const email = `portal-${Date.now()}@example.com`;
      const { session } = await buy('subscription', 'premium', email);
      const unknown = await post('/api-keys/portal', new URLSearchParams({ email: `nobody-${Date.now()}@example.com` }).toString());
      const known = await post('/api-keys/portal', new URLSearchParams({ email: email.toUpperCase() }).toString());
      assert.equal(unknown.status, 200);
      assert.equal(known.status, 200);
      assert.equal(unknown.text, known.text, 'the page never tells whether the address bought something');

      const [mail] = await smtp.waitFor((m) => JSON.stringify(m.to).toLowerCase().includes(email) && /billing link/.test(m.subject ?? ''));
      const link = /https:\/\/files\.example\.test(\/api-keys\/portal\/open\?token=([A-Za-z0-9_-]{43}))/.exec(mail!.text ?? '');
      assert.ok(link, mail!.text);
      const token = link[2]!;
      await outboxDrained();
      const [stored] = await srv.sql`select count(*)::int as n from portal_tokens where token_hash = sha256(${token}::bytea)`;
      assert.equal(stored!.n, 1, 'stored as its SHA-256 only');

      // opening the link shows a button (a mail scanner's GET does not spend it)
      const opened = await call(srv, 'GET', link[1]!);
      assert.equal(opened.status, 200);
      assert.match(opened.text, /Continue to Stripe/);
      stripe.calls.length = 0;
      const go = await post('/api-keys/portal/open', new URLSearchParams({ token }).toString());
      assert.equal(go.status, 303, go.text);
      assert.match(String(go.headers.location), /^https:\/\/billing\.stripe\.test\/p\/session\//);
      assert.equal(stripe.calls[0]!.path, '/v1/billing_portal/sessions');
      assert.equal(stripe.calls[0]!.form.customer, session.customer);
      assert.equal(stripe.calls[0]!.form.return_url, 'https://files.example.test/api-keys');
      // single use
      assert.equal((await post('/api-keys/portal/open', new URLSearchParams({ token }).toString())).status, 410);
      assert.equal(stripe.calls.length, 1);
      // no mail ever went to the unknown address: checked once a later link for the buyer is in (a link
      // is requested after the answer, and the outbox sends in queue order)
      await post('/api-keys/portal', new URLSearchParams({ email }).toString());
      await smtp.waitFor((m) => JSON.stringify(m.to).toLowerCase().includes(email) && /billing link/.test(m.subject ?? ''), 2);
      assert.ok(!smtp.mails.some((m) => JSON.stringify(m.to).includes('nobody-')));
    });

    test('an expired portal link does not open the portal', async () => {
      const email = `portal-exp-${Date.now()}@example.com`;
      await buy('subscription', 'starter', email);
      await post('/api-keys/portal', new URLSearchParams({ email }).toString());
      const [mail] = await smtp.waitFor((m) => JSON.stringify(m.to).includes(email) && /billing link/.test(m.subject ?? ''));
      const token = /token=([A-Za-z0-9_-]{43})/.exec(mail!.text ?? '')![1]!;
      await outboxDrained();
      await srv.sql`update portal_tokens set expires_at = now() - interval '1 second'`;
      assert.equal((await post('/api-keys/portal/open', new URLSearchParams({ token }).toString())).status, 410);
    });

    test('unhandled event types are acknowledged; an unpaid async session mints nothing until it succeeds', async () => {
      assert.equal((await deliver(signedEvent(WHSEC, 'customer.created', { id: 'cus_x', object: 'customer' }))).status, 200);
      const email = `async-${Date.now()}@example.com`;
      const s = { ...paidSession({ mode: 'payment', plan: 'starter', email }), payment_status: 'unpaid' };
      assert.equal((await deliver(signedEvent(WHSEC, 'checkout.session.completed', s))).status, 200);
      assert.equal((await srv.sql`select count(*)::int as n from purchases where email = ${email}`)[0]!.n, 0);
      const paid = { ...s, payment_status: 'paid' };
      assert.equal((await deliver(signedEvent(WHSEC, 'checkout.session.async_payment_succeeded', paid))).status, 200);
      assert.equal((await srv.sql`select count(*)::int as n from purchases where email = ${email}`)[0]!.n, 1);
    });
  });
}
