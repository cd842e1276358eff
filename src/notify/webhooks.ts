import { randomBytes, randomInt } from 'node:crypto';
import { AppError } from '../errors.ts';
import type { Sql } from '../db/sql.ts';
import { EVENT_TYPES, insertWebhook, type EventType } from '../db/webhooks.ts';
import type { Sealer } from '../util/sealer.ts';
import { vettedAddresses } from '../util/public-address.ts';

/** Endpoints one API key may have. */
export const MAX_WEBHOOKS_PER_KEY = 10;

/** What a webhook secret is sealed under: only its own row opens it. */
export const secretContext = (webhookId: number): string => `webhook:${webhookId}`;

const invalid = (message: string): AppError => new AppError('INVALID_WEBHOOK', message);

/** The endpoint's URL, checked: http or https, no credentials, and (unless allowed) only public addresses. */
export async function checkWebhookUrl(raw: unknown, allowPrivate: boolean): Promise<string> {
  if (typeof raw !== 'string' || raw.length > 2048 || !URL.canParse(raw)) throw invalid('url: expected an http or https URL');
  const url = new URL(raw);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid('url: expected an http or https URL');
  if (url.username !== '' || url.password !== '') throw invalid('url: credentials in the URL are not taken; sign-in is the webhook signature');
  try {
    await vettedAddresses(url.hostname, allowPrivate);
  } catch (err) {
    throw invalid(`url: ${(err as Error).message}`);
  }
  return url.href;
}

function checkEvents(raw: unknown): EventType[] {
  if (raw === undefined) return [...EVENT_TYPES];
  if (!Array.isArray(raw) || raw.length === 0) throw invalid(`events: expected a list of ${EVENT_TYPES.join(', ')}`);
  const unknown = raw.find((e) => !(EVENT_TYPES as readonly unknown[]).includes(e));
  if (unknown !== undefined) throw invalid(`events: ${JSON.stringify(unknown)} is not an event (${EVENT_TYPES.join(', ')})`);
  return [...new Set(raw as EventType[])];
}

/** Registers an endpoint of key `apiKeyId`; returns its id and its secret, shown this once. */
export async function registerWebhook(
  deps: { sql: Sql; sealer: Sealer; allowPrivate: boolean },
  apiKeyId: number,
  body: { url?: unknown; events?: unknown },
): Promise<{ id: number; secret: string }> {
  const url = await checkWebhookUrl(body.url, deps.allowPrivate);
  const events = checkEvents(body.events);
  const id = randomInt(1, 2 ** 48);
  // Standard Webhooks: "whsec_" and the base64 of the key bytes.
  const secret = `whsec_${randomBytes(24).toString('base64')}`;
  const added = await insertWebhook(deps.sql, { id, apiKeyId, url, events, secretSealed: deps.sealer.seal(secret, secretContext(id)) }, MAX_WEBHOOKS_PER_KEY);
  if (!added) throw new AppError('TOO_MANY_WEBHOOKS', `A key has at most ${MAX_WEBHOOKS_PER_KEY} webhook endpoints: delete one first`);
  return { id, secret };
}
