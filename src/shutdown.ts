import type { Logger } from 'pino';
import type { Db } from './db/client.ts';
import type { HttpServer } from './http/server.ts';
import type { MailTransport } from './mail/transport.ts';
import type { RateStore } from './state/rate-store.ts';
import type { BlobStore } from './storage/blob-store.ts';
import type { Hasher } from './storage/hasher.ts';
import type { Background } from './util/background.ts';
import type { WebhookDelivery } from './notify/webhook-delivery.ts';
import type { BatchedCounts } from './db/download-counts.ts';
import type { Sampler } from './metrics/history.ts';
import type { HashQueue } from './abuse/hash-queue.ts';

/**
 * What start-up has opened so far, each closed once: by `shutdown`, or by `closeAfterFailure` when a
 * later start-up step fails. The fields filled late start out in-process or null.
 */
export interface Opened {
  readonly db: Db;
  readonly hasher: Hasher;
  /** In-process until REDIS_URL's store is connected. */
  rateStore: RateStore;
  readonly mailTransport: MailTransport;
  background: Background | null;
  webhooks: WebhookDelivery | null;
  blobs: BlobStore | null;
  /** The console overview's sampler (metrics/history.ts). */
  sampler: Sampler | null;
  /** Files the console hashes on an operator's request (abuse/hash-queue.ts). */
  consoleHashing: HashQueue | null;
}

/**
 * Stops accepting, lets in-flight requests finish for up to `graceMs`, aborts the rest (their parts
 * removed), then closes what start-up opened, each phase bounded.
 */
export async function shutdown(o: {
  log: Logger;
  graceMs: number;
  sweepTimer: NodeJS.Timeout;
  server: HttpServer;
  blobs: BlobStore;
  downloadCounts: BatchedCounts;
  viewCounts: BatchedCounts;
  opened: Opened;
}): Promise<void> {
  const { log, server, blobs, opened } = o;
  clearInterval(o.sweepTimer);
  server.stopListening();
  const idle = async (ms: number): Promise<void> => {
    const deadline = Date.now() + ms;
    while (server.inflight() > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  };
  await idle(o.graceMs);
  if (server.inflight() > 0) {
    log.warn({ aborted: server.abortInflight() }, 'shutdown grace period over: aborting requests still in flight');
    await idle(5000);
  }
  // Abort handlers unlink without waiting; make sure no part of ours outlives the process.
  await phase(log, 'temp parts', () => blobs.removeOwnTemps());
  await phase(log, 'download counts', () => o.downloadCounts.flush());
  await phase(log, 'view counts', () => o.viewCounts.flush());
  await phase(log, 'background work', async () => opened.background?.close());
  await phase(log, 'webhook deliveries', async () => opened.webhooks?.close());
  await phase(log, 'console history', async () => opened.sampler?.close());
  await phase(log, 'console hashing', async () => opened.consoleHashing?.close());
  await phase(log, 'mail', async () => opened.mailTransport.close());
  await phase(log, 'database', () => opened.db.close());
  await phase(log, 'redis', () => opened.rateStore.close());
  await phase(log, 'hash workers', () => opened.hasher.close());
  await phase(log, 'storage', () => blobs.close());
}

/** Start-up failed: closes what it had opened, without the grace and bounds of a shutdown. */
export async function closeAfterFailure(opened: Opened): Promise<void> {
  await opened.background?.close();
  await opened.webhooks?.close();
  await opened.sampler?.close();
  opened.consoleHashing?.close();
  opened.mailTransport.close();
  await opened.db.close().catch(() => {});
  await opened.rateStore.close();
  await opened.hasher.close();
  await opened.blobs?.close();
}

/** One shutdown phase: bounded, and a failure is logged without stopping the phases after it. */
async function phase(log: Logger, name: string, fn: () => Promise<unknown>, ms = 5000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
  });
  try {
    await Promise.race([fn(), timeout]);
  } catch (err) {
    log.warn({ err, phase: name }, 'shutdown phase failed');
  } finally {
    clearTimeout(timer);
  }
}
