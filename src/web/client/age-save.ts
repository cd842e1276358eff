// Saving decrypted files from the share page. With a service worker (age-sw.ts) the browser's own
// download streams the plaintext to disk, for files of any size; without one (some private modes),
// only small files are decrypted, in memory, and anything bigger is refused with the shell command.
import { downloadZip } from 'client-zip';
import { decryptStream, failure } from './age-core.ts';
import type { Job, JobStatus } from './age-sw.ts';

export interface SaveItem {
  readonly url: string;
  readonly name: string;
  readonly type: string;
  /** Plaintext size. */
  readonly size: number;
}

/** The most a browser without a service worker decrypts, in memory, per download. */
export const IN_MEMORY_MAX = 200 * 1024 * 1024;

let worker: Promise<ServiceWorker | null> | null = null;

/** The active service worker of scope /e2e/, registered once; null where there is none. */
function serviceWorker(): Promise<ServiceWorker | null> {
  worker ??= (async () => {
    const url = document.getElementById('share')?.getAttribute('data-sw');
    if (!url || !('serviceWorker' in navigator) || !window.ReadableStream) return null;
    try {
      const reg = await navigator.serviceWorker.register(url, { scope: '/e2e/' });
      const sw = reg.active ?? reg.waiting ?? reg.installing;
      if (!sw) return null;
      if (sw.state !== 'activated') {
        await new Promise<void>((resolve) => {
          const check = (): void => {
            if (sw.state === 'activated' || sw.state === 'redundant') resolve();
          };
          sw.addEventListener('statechange', check);
          check();
        });
      }
      return reg.active;
    } catch {
      return null;
    }
  })();
  return worker;
}

export async function saveDecrypted(items: readonly SaveItem[], zipName: string | null, key: string): Promise<{ ok: boolean; message: string }> {
  const what = zipName ?? items[0]!.name;
  const sw = await serviceWorker();
  if (sw) return viaWorker(sw, items, zipName, key);
  const total = items.reduce((n, it) => n + it.size, 0);
  if (total > IN_MEMORY_MAX) {
    return {
      ok: false,
      message: `This browser cannot save decrypted files bigger than 200 MB (it allows no service worker here, for example in a private window). Open the link in a normal window, or download “${what}” with curl and decrypt it with age.`,
    };
  }
  try {
    let blob: Blob;
    if (zipName === null) {
      const res = await fetch(items[0]!.url);
      blob = await new Response(await decryptStream(key, res.body!)).blob();
    } else {
      const files = await Promise.all(items.map(async (it) => ({ name: it.name, input: await new Response(await decryptStream(key, (await fetch(it.url)).body!)).blob() })));
      blob = await downloadZip(files).blob();
    }
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = what;
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
    return { ok: true, message: `Saved “${what}”, decrypted.` };
  } catch (err) {
    return { ok: false, message: `“${what}” could not be decrypted: ${failure(err)}. Nothing was saved.` };
  }
}

function viaWorker(sw: ServiceWorker, items: readonly SaveItem[], zipName: string | null, key: string): Promise<{ ok: boolean; message: string }> {
  const bytes = crypto.getRandomValues(new Uint8Array(18));
  const id = btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_');
  const job: Job = { type: 'job', id, key, items: items.map((it) => ({ url: new URL(it.url, window.location.href).href, name: it.name })), zipName };
  const what = zipName ?? items[0]!.name;
  return new Promise((resolve) => {
    const ch = new MessageChannel();
    ch.port1.onmessage = (e: MessageEvent<JobStatus | { state: 'queued' }>) => {
      const s = e.data;
      // The worker has the job: this navigation is answered by it with the download.
      if (s.state === 'queued') window.location.assign(`/e2e/${id}`);
      else if (s.state === 'done') resolve({ ok: true, message: `Saved “${what}”, decrypted.` });
      else if (s.state === 'failed') {
        resolve({ ok: false, message: `“${s.name}” could not be decrypted: ${s.reason}. The download was stopped; delete any partial file.` });
      }
    };
    sw.postMessage(job, [ch.port2]);
  });
}
