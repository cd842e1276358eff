// The service worker that saves decrypted files (scope /e2e/). The share page posts a job (the key,
// the ciphertext URLs, the names) and then navigates to /e2e/<job id>; this worker answers that
// navigation with a download whose body is decrypted as it streams, so a file of any size goes to
// disk without ever being held in memory. "Download all" is a store-only zip of the same streams.
import { downloadZip } from 'client-zip';
import { attachment, decryptStream, failure } from './age-core.ts';

export interface JobItem {
  readonly url: string;
  readonly name: string;
}

export interface Job {
  readonly type: 'job';
  readonly id: string;
  readonly key: string;
  readonly items: readonly JobItem[];
  /** Set for "download all": the zip's name. */
  readonly zipName: string | null;
}

/** What the worker tells the page through the job's port. */
export type JobStatus =
  | { readonly state: 'started' }
  | { readonly state: 'done' }
  | { readonly state: 'failed'; readonly name: string; readonly reason: string };

// Service-worker globals, typed here: the project's TypeScript setup knows the DOM only.
interface FetchEvent extends Event {
  readonly request: Request;
  respondWith(r: Promise<Response> | Response): void;
}
interface ExtendableEvent extends Event {
  waitUntil(p: Promise<unknown>): void;
}
const sw = self as unknown as {
  addEventListener(type: string, fn: (e: never) => void): void;
  skipWaiting(): Promise<void>;
  clients: { claim(): Promise<void> };
};

/** Jobs posted and not yet fetched; each is answered once. */
const jobs = new Map<string, { job: Job; port: MessagePort }>();

sw.addEventListener('install', () => void sw.skipWaiting());
sw.addEventListener('activate', (e: ExtendableEvent) => e.waitUntil(sw.clients.claim()));
sw.addEventListener('message', (e: MessageEvent) => {
  const job = e.data as Job;
  const port = e.ports[0];
  if (job?.type !== 'job' || !port) return;
  jobs.set(job.id, { job, port });
  // A job never fetched is dropped after a minute.
  setTimeout(() => jobs.delete(job.id), 60_000);
  port.postMessage({ state: 'queued' });
});
sw.addEventListener('fetch', (e: FetchEvent) => {
  const m = /\/e2e\/([A-Za-z0-9_-]{16,64})$/.exec(new URL(e.request.url).pathname);
  if (!m) return;
  const entry = jobs.get(m[1]!);
  jobs.delete(m[1]!);
  e.respondWith(answer(entry));
});

/** 204 keeps the page where it is: used when there is nothing to save. */
const nothing = (): Response => new Response(null, { status: 204 });

async function answer(entry: { job: Job; port: MessagePort } | undefined): Promise<Response> {
  if (!entry) return nothing();
  const { job, port } = entry;
  const report = (s: JobStatus): void => port.postMessage(s);
  try {
    if (job.zipName === null) {
      const item = job.items[0]!;
      const { body, size } = await open(job.key, item);
      report({ state: 'started' });
      return new Response(watch(body, item.name, report), {
        headers: { 'Content-Type': 'application/octet-stream', 'Content-Disposition': attachment(item.name), 'Content-Length': String(size) },
      });
    }
    report({ state: 'started' });
    const zip = downloadZip(entries(job, report));
    return new Response(watch(zip.body!, job.zipName, report), {
      headers: { 'Content-Type': 'application/zip', 'Content-Disposition': attachment(job.zipName) },
    });
  } catch (err) {
    report({ state: 'failed', name: job.items[0]?.name ?? '', reason: failure(err) });
    return nothing();
  }
}

/** One file's plaintext stream; rejects when it cannot be fetched or the key does not open it. */
async function open(key: string, item: JobItem): Promise<{ body: ReadableStream<Uint8Array>; size: number }> {
  const res = await fetch(item.url, { credentials: 'same-origin' });
  if (!res.ok || !res.body) throw new Error(`the server answered HTTP ${res.status}`);
  const plain = await decryptStream(key, res.body);
  return { body: plain, size: plain.size(Number(res.headers.get('Content-Length'))) };
}

/** The zip's entries, each opened only when the zip writer reaches it. */
async function* entries(job: Job, report: (s: JobStatus) => void): AsyncGenerator<{ name: string; input: ReadableStream<Uint8Array>; size: number }> {
  const used = new Set<string>();
  for (const item of job.items) {
    let opened;
    try {
      opened = await open(job.key, item);
    } catch (err) {
      report({ state: 'failed', name: item.name, reason: failure(err) });
      throw err;
    }
    yield { name: unique(item.name, used), input: watch(opened.body, item.name, report, false), size: opened.size };
  }
}

/** Two files of a bundle may share a name: a zip keeps both, the second as `name (2).ext`. */
function unique(name: string, used: Set<string>): string {
  let n = name;
  for (let i = 2; used.has(n); i++) n = name.replace(/(\.[^./]*)?$/, (ext) => ` (${i})${ext}`);
  used.add(n);
  return n;
}

/**
 * `body` passed through unchanged; its end or its failure is reported to the page. A failed stream
 * errors the download, so the browser marks it failed instead of keeping a short file.
 */
function watch(body: ReadableStream<Uint8Array>, name: string, report: (s: JobStatus) => void, last = true): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { done, value } = await reader.read();
        if (done) {
          controller.close();
          if (last) report({ state: 'done' });
        } else controller.enqueue(value);
      } catch (err) {
        report({ state: 'failed', name, reason: failure(err) });
        controller.error(err);
      }
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  }, { highWaterMark: 1 });
}
