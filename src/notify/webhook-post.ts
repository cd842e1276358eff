import { Agent, request } from 'undici';
import { Webhook } from 'standardwebhooks';
import type { DueEvent } from '../db/webhooks.ts';
import { vettedAddresses } from '../util/public-address.ts';
import type { Sealer } from '../util/sealer.ts';
import { secretContext } from './webhooks.ts';

/** What a delivery needs of the server: the secrets' sealer, and whether private addresses may be called. */
export interface PostDeps {
  readonly sealer: Sealer;
  readonly allowPrivate: boolean;
}

const CONNECT_TIMEOUT_MS = 5_000;
const REQUEST_TIMEOUT_MS = 15_000;
/** Of a receiver's answer, only this much is read. */
const ANSWER_READ_BYTES = 64 * 1024;

/**
 * POSTs the event, signed as Standard Webhooks says, to an address checked now (not only when the
 * endpoint was registered), connecting to that very address so a second lookup cannot swap it.
 * Redirects are not followed. Returns the status.
 */
export async function post(deps: PostDeps, e: DueEvent): Promise<number> {
  const url = new URL(e.url);
  const [addr] = await vettedAddresses(url.hostname, deps.allowPrivate);
  const secret = deps.sealer.open(e.secret_sealed, secretContext(Number(e.webhook_id)));
  const at = new Date();
  const agent = new Agent({
    connect: {
      timeout: CONNECT_TIMEOUT_MS,
      lookup: (_host, opts, cb) => (opts.all ? cb(null, [addr!]) : cb(null, addr!.address, addr!.family)),
    },
  });
  try {
    const res = await request(url, {
      method: 'POST',
      dispatcher: agent,
      body: e.body,
      headers: {
        'content-type': 'application/json',
        'user-agent': 'Sluice-Webhooks/1',
        'webhook-id': e.id,
        'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
        'webhook-signature': new Webhook(secret).sign(e.id, at, e.body),
      },
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    let read = 0;
    for await (const chunk of res.body) {
      read += (chunk as Buffer).length;
      if (read >= ANSWER_READ_BYTES) break;
    }
    res.body.destroy();
    return res.statusCode;
  } finally {
    void agent.close().catch(() => {});
  }
}
