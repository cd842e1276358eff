// `sluice send`: every file into one bundle through tus, one after another; the first creates the
// bundle with the options, the rest join it with its upload token. Each step is written to the
// command's state file before the next, so the same command run again goes on where it stopped.
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { authHeaders, call } from './http.ts';
import { ClientFailure, EXIT } from './failure.ts';
import { localFiles, passwordFrom } from './local-files.ts';
import { dropState, loadState, newState, spoolDirOf, stateFileFor, stateWriter, type FileState, type LocalFile, type SendState } from './send-state.ts';
import { sendThroughTus, type TusDone } from './tus-file.ts';
import { createProgress, type Progress } from './progress.ts';
import { encryptText, encryptToFile, newKey } from './age-files.ts';
import { MANIFEST_NAME, type Manifest } from '../util/age-manifest.ts';
import { cleanMimeType } from '../util/names.ts';
import { interruption, type Interruption } from './interrupt.ts';

export interface SendOptions {
  readonly origin: string;
  readonly key: string | null;
  readonly passwordFile: string | null;
  readonly expiresDays: number | null;
  readonly maxDownloads: number | null;
  readonly vanity: string | null;
  readonly encrypt: boolean;
  readonly stateDir: string;
  /** Where progress goes (stderr). */
  readonly out: NodeJS.WriteStream;
}

const digest = (s: string): string => createHash('sha256').update(s).digest('hex');

interface Run {
  readonly o: SendOptions;
  readonly st: SendState;
  readonly stateFile: string;
  readonly save: () => Promise<void>;
  readonly newBundle: Record<string, string>;
  readonly progress: Progress;
  readonly stop: Interruption;
}

/** Sends the files; resolves with the share link. */
export async function send(args: readonly string[], o: SendOptions): Promise<string> {
  const files = await localFiles(args);
  const password = o.passwordFile ? await passwordFrom(o.passwordFile) : null;
  // The same command is the same server, caller, options and files (as they are now on disk).
  const stateFile = stateFileFor(o.stateDir, {
    origin: o.origin, key: o.key && digest(o.key), password: password && digest(password),
    expires: o.expiresDays, max: o.maxDownloads, vanity: o.vanity, encrypt: o.encrypt,
    files: files.map((f) => [f.path, f.size, f.mtimeMs]),
  });
  const st = (await loadState(stateFile, files.length)) ?? newState(files.length);
  await reachable(o.origin);
  if (o.encrypt && !st.identity) Object.assign(st, await newKey().then((k) => ({ identity: k.identity, recipient: k.recipient })));
  const newBundle: Record<string, string> = {};
  if (password) newBundle.access_password = password;
  if (o.expiresDays !== null) newBundle.expires_in_days = String(o.expiresDays);
  if (o.maxDownloads !== null) newBundle.max_downloads = String(o.maxDownloads);
  if (o.vanity) newBundle.vanity = o.vanity;
  if (o.encrypt) newBundle.encrypted = '1';
  const run: Run = { o, st, stateFile, save: stateWriter(stateFile, st), newBundle, progress: createProgress({ total: files.reduce((n, f) => n + f.size, 0), out: o.out, verb: 'sent' }), stop: interruption() };
  try {
    for (const [i, f] of files.entries()) await sendFile(run, f, st.files[i]!, i);
    if (o.encrypt && st.manifest.fileId === null) await sendManifest(run, files);
  } finally {
    run.stop.close();
    run.progress.end();
  }
  await dropState(stateFile);
  return `${o.origin}${st.shareUrl}${st.identity ? `#key=${st.identity}` : ''}`;
}

/** Fails at once, with status 2, when nothing answers at `origin` (tus would retry for a minute). */
async function reachable(origin: string): Promise<void> {
  const res = await call(`${origin}/healthz`, {}, 'connecting');
  await res.body?.cancel();
}

async function sendFile(run: Run, f: LocalFile, fst: FileState, i: number): Promise<void> {
  if (fst.fileId !== null) return run.progress.skip(f.name, f.size);
  let source = f.path;
  let meta: Record<string, string> = { filename: f.name, filetype: cleanMimeType(undefined, f.name) };
  if (run.st.recipient) {
    // The ciphertext is made once and kept until the file is sent: the same bytes on every resume.
    const stored = `${i + 1}.age`;
    source = path.join(spoolDirOf(run.stateFile), stored);
    if (!fst.spooled) {
      await fs.mkdir(spoolDirOf(run.stateFile), { recursive: true, mode: 0o700 });
      run.progress.note(`encrypting ${f.name}`);
      await encryptToFile(f.path, source, run.st.recipient);
      Object.assign(fst, { spooled: true, tusUrl: null });
      await run.save();
    }
    meta = { filename: stored, filetype: 'application/octet-stream' };
  }
  const done = await transfer(run, fst, source, meta, f.name, f.size);
  fst.fileId = done.fileId;
  fst.tusUrl = null;
  await run.save();
  if (run.st.recipient) await fs.rm(source, { force: true });
}

/** Last, for an encrypted send: the real names, encrypted like the files (the share page reads it). */
async function sendManifest(run: Run, files: readonly LocalFile[]): Promise<void> {
  const manifest: Manifest = {
    sluice_manifest: 1,
    description: null,
    files: files.map((f, i) => ({ stored: `${i + 1}.age`, name: f.name, type: cleanMimeType(undefined, f.name), size: f.size })),
  };
  const bytes = await encryptText(JSON.stringify(manifest), run.st.recipient!);
  const done = await transfer(run, run.st.manifest, bytes, { filename: MANIFEST_NAME, filetype: 'application/octet-stream' }, 'the file list', 0);
  run.st.manifest.fileId = done.fileId;
  await run.save();
}

/** Offset the server holds of an upload an earlier run created (0 if it cannot tell). */
async function offsetOf(url: string): Promise<number> {
  const res = await call(url, { method: 'HEAD', headers: { 'Tus-Resumable': '1.0.0' } }, 'resuming').catch(() => null);
  const n = Number(res?.headers.get('upload-offset'));
  return res?.ok && Number.isSafeInteger(n) ? n : 0;
}

async function transfer(run: Run, fst: FileState, source: string | Buffer, meta: Record<string, string>, label: string, shownSize: number): Promise<TusDone> {
  const { st, progress } = run;
  const joining = st.uploadToken !== null;
  if (st.shareUrl !== null && !joining) throw new ClientFailure(EXIT.REFUSED, 'the server gave no upload token for the bundle: cannot add the other files');
  const size = typeof source === 'string' ? (await fs.stat(source)).size : source.length;
  const scale = (n: number): number => (size > 0 ? Math.round((n / size) * shownSize) : 0);
  progress.file(label, shownSize, fst.tusUrl ? scale(await offsetOf(fst.tusUrl)) : 0);
  const t = sendThroughTus({
    endpoint: `${run.o.origin}/api/v1/tus/`,
    source,
    metadata: joining ? { ...meta, upload_token: st.uploadToken! } : { ...meta, ...run.newBundle },
    headers: joining ? {} : authHeaders(run.o.key),
    resumeUrl: fst.tusUrl,
    label,
    urlKnown: (url) => {
      fst.tusUrl = url;
      // A failed write shows at the next save, which is awaited (the writer keeps its order).
      run.save().catch(() => {});
    },
    progress: (sent) => progress.at(scale(sent)),
  });
  const done = await run.stop.race(t.done, () => t.stop()).catch(async (err: unknown) => {
    // The bundle an earlier run made is gone (expired, deleted): this state can only fail again.
    if (joining && err instanceof ClientFailure && err.exit === EXIT.REFUSED) {
      await dropState(run.stateFile);
      throw new ClientFailure(err.exit, `${err.message}; the bundle is gone, so the same command now starts a new one`);
    }
    throw err;
  });
  progress.fileDone();
  if (!joining) {
    st.shareUrl = done.shareUrl;
    st.uploadToken = done.uploadToken;
  }
  return done;
}
