import type { Logger } from 'pino';
import type { Sql } from '../db/sql.ts';
import { claimDueEvents, recordAttempt, type DueEvent } from '../db/webhooks.ts';
import type { Sealer } from '../util/sealer.ts';

/**
 * Seconds before the next attempt after attempt n (1-based) failed; past the list, the event is given
 * up. The schedule Standard Webhooks suggests: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h (27 h in all).
 */
const RETRY_SECONDS = [5, 300, 1800, 7200, 18000, 36000, 36000];
/** An endpoint whose every attempt failed this long is disabled, saying why. */
const DISABLE_AFTER_HOURS = 72;
/** A claimed event is left alone this long: longer than any delivery may take. */
const LEASE_SECONDS = 60;
const CONCURRENCY = 8;

export interface WebhookDelivery {
  /** Look for due events now, not at the next tick. */
  kick(): void;
  /** Stops claiming; waits for deliveries in flight. */
  close(): Promise<void>;
}

interface DeliveryDeps {
  readonly sql: Sql;
  readonly sealer: Sealer;
  readonly log: Logger;
  readonly allowPrivate: boolean;
  readonly tickMs?: number;
}

/**
 * Delivers the outbox of webhook events (at least once; the webhook-id is the same on every attempt):
 * claims due events, up to CONCURRENCY in flight, each on its own, so a slow or broken receiver holds
 * up nobody else's events and nothing else of the server.
 */
export function startWebhookDelivery(deps: DeliveryDeps): WebhookDelivery {
  const inflight = new Map<Promise<void>, number>();
  let closed = false;
  let claiming: Promise<void> | null = null;
  const claim = async (): Promise<void> => {
    try {
      // An endpoint with a delivery in flight gets no other until it ends: a slow one holds one slot.
      const busy = [...new Set(inflight.values())];
      for (const e of await claimDueEvents(deps.sql, CONCURRENCY - inflight.size, LEASE_SECONDS, busy)) {
        const p: Promise<void> = deliver(deps, e)
          .catch((err: unknown) => deps.log.error({ err, webhookId: e.webhook_id }, 'webhook attempt not recorded'))
          .finally(() => {
            inflight.delete(p);
            kick();
          });
        inflight.set(p, Number(e.webhook_id));
      }
    } catch (err) {
      deps.log.warn({ err }, 'webhook events not claimed');
    }
  };
  const kick = (): void => {
    if (closed || claiming || inflight.size >= CONCURRENCY) return;
    claiming = claim().finally(() => (claiming = null));
  };
  const timer = setInterval(kick, deps.tickMs ?? 1000);
  timer.unref();
  return {
    kick,
    async close() {
      closed = true;
      clearInterval(timer);
      await claiming;
      await Promise.all(inflight.keys());
    },
  };
}

/** One attempt at one event, recorded whatever happens. */
async function deliver(deps: DeliveryDeps, e: DueEvent): Promise<void> {
  let status: number | null = null;
  let error: string | null = null;
  try {
    // The HTTP client and the signer load with the first delivery: a server with no webhooks never
    // carries them, and undici is the largest package an idle server would otherwise hold.
    const { post } = await import('./webhook-post.ts');
    status = await post(deps, e);
    if (status < 200 || status > 299) error = `the receiver answered HTTP ${status}`;
  } catch (err) {
    error = (err as Error).message.slice(0, 300);
  }
  const delivered = error === null;
  const retrySeconds = delivered ? null : (RETRY_SECONDS[e.attempts - 1] ?? null);
  await recordAttempt(deps.sql, e, { status, error, delivered, retrySeconds, disableAfterHours: DISABLE_AFTER_HOURS });
}
