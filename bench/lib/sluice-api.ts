// The little of the upload response the benches read, and clean-up between runs.
import http from 'node:http';
import { rm } from 'node:fs/promises';
import { removeLargeFiles, type Target } from './targets.ts';
import { largeFiles, settleDisk } from './files.ts';

export interface UploadedFile {
  id: string | number;
  name?: string;
  size?: number;
}

export interface UploadReply {
  short_code?: string;
  upload_token?: string;
  files: UploadedFile[];
}

export function asUploadReply(json: unknown): UploadReply | undefined {
  if (typeof json !== 'object' || json === null) return undefined;
  const files = (json as { files?: unknown }).files;
  if (!Array.isArray(files)) return undefined;
  return json as UploadReply;
}

function httpDelete(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'DELETE', headers, agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * Frees the disk after a run. Sluice: delete each bundle through its API (keeps its db consistent), then sweep
 * any large file left in DATA_DIR outside the embedded db. Baselines: every uploaded file in DIR. Then waits for the
 * disk to settle (settleDisk).
 */
export async function cleanupUploads(target: Target, replies: readonly unknown[]): Promise<void> {
  if (!target.name.startsWith('sluice')) {
    await removeLargeFiles(target.dir, 0);
    return settleDisk(target.dir);
  }
  for (const json of replies) {
    const reply = asUploadReply(json);
    if (!reply?.short_code || !reply.upload_token) continue;
    const status = await httpDelete(`${target.baseUrl}/api/v1/bundle/${reply.short_code}`, {
      'x-upload-token': reply.upload_token,
    }).catch(() => 0);
    if (status !== 200) console.warn(`  (sluice DELETE bundle ${reply.short_code} answered ${status})`);
  }
  // A DELETE answers once the rows are gone and removes the bytes right after: give that a moment.
  const until = performance.now() + 5000;
  let left = await largeFiles(target.dir, 1024 * 1024, ['pg']);
  while (left.length > 0 && performance.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    left = await largeFiles(target.dir, 1024 * 1024, ['pg']);
  }
  for (const p of left) await rm(p, { force: true });
  if (left.length > 0) console.warn(`  (removed ${left.length} file(s) >= 1 MiB that Sluice left in DATA_DIR)`);
  await settleDisk(target.dir);
}
