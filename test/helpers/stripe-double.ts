import http from 'node:http';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import Stripe from 'stripe';

/** One request the double answered: method, path and the decoded form fields (`a[b][0][c]` keys kept flat). */
export interface StripeCall {
  readonly method: string;
  readonly path: string;
  readonly form: Record<string, string>;
  readonly auth: string | undefined;
}

export interface StripeDouble {
  readonly url: string;
  readonly calls: StripeCall[];
  /** When set, every API call answers this status with a Stripe error body. */
  failWith: number | null;
  close(): Promise<void>;
}

/**
 * A local stand-in for the few Stripe API endpoints Sluice calls (Checkout Sessions, Billing Portal
 * Sessions), reached through STRIPE_API_URL. It never talks to Stripe.
 */
export async function startStripeDouble(): Promise<StripeDouble> {
  const calls: StripeCall[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      const form = Object.fromEntries(new URLSearchParams(body));
      const path = (req.url ?? '').split('?')[0]!;
      calls.push({ method: req.method ?? '', path, form, auth: req.headers.authorization });
      const reply = (status: number, obj: unknown): void => {
        res.writeHead(status, { 'content-type': 'application/json', 'request-id': `req_${randomBytes(6).toString('hex')}` });
        res.end(JSON.stringify(obj));
      };
      if (double.failWith !== null) return reply(double.failWith, { error: { type: 'api_error', message: 'test double failure' } });
      if (req.method === 'POST' && path === '/v1/checkout/sessions') {
        const id = `cs_test_${randomBytes(12).toString('hex')}`;
        return reply(200, {
          id, object: 'checkout.session', mode: form.mode, url: `https://checkout.stripe.test/c/pay/${id}`,
          customer_email: form.customer_email, metadata: { plan: form['metadata[plan]'], billing: form['metadata[billing]'] },
        });
      }
      if (req.method === 'POST' && path === '/v1/billing_portal/sessions') {
        const id = `bps_${randomBytes(12).toString('hex')}`;
        return reply(200, { id, object: 'billing_portal.session', customer: form.customer, url: `https://billing.stripe.test/p/session/${id}` });
      }
      reply(404, { error: { type: 'invalid_request_error', message: `no such endpoint in the double: ${req.method} ${path}` } });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const double: StripeDouble = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    calls,
    failWith: null,
    close: () => new Promise((r) => server.close(() => r())),
  };
  return double;
}

const signer = new Stripe('sk_test_signing_only');

/** A Stripe event as the webhook receives it, signed with the library's own test-header helper. */
export function signedEvent(
  secret: string,
  type: string,
  object: Record<string, unknown>,
  o: { id?: string; created?: number; timestamp?: number } = {},
): { id: string; payload: string; headers: Record<string, string> } {
  const id = o.id ?? `evt_${randomBytes(12).toString('hex')}`;
  const payload = JSON.stringify({
    id, object: 'event', api_version: '2025-01-01', type, created: o.created ?? Math.floor(Date.now() / 1000),
    livemode: false, pending_webhooks: 1, data: { object },
  });
  const header = signer.webhooks.generateTestHeaderString({ payload, secret, timestamp: o.timestamp });
  return { id, payload, headers: { 'stripe-signature': header, 'content-type': 'application/json' } };
}
