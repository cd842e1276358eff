import { fork, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import type { Logger } from 'pino';
import { fromRoot } from '../paths.ts';

/** Why an image got no thumbnail. */
export type Refusal = 'too_large' | 'undecodable' | 'memory' | 'timeout' | 'crashed';
export type Rendered = { readonly bytes: Buffer } | { readonly none: Refusal; readonly detail?: string };

export interface Renderer {
  /** A WebP thumbnail of the image at `path`, long side `px`, or why there is none. */
  thumbnail(path: string, px: number): Promise<Rendered>;
  /** PNG bytes of our own SVG (a share card). */
  card(svg: string): Promise<Buffer>;
  /** The render process's pid while it runs (tests watch it). */
  pid(): number | undefined;
  close(): Promise<void>;
}

export interface RendererOptions {
  log: Logger;
  /** Memory the render process may take above its idle size before it is killed. */
  budgetBytes: number;
  /** Images whose header says decoding would take more are refused unread (default: budgetBytes). */
  headerBudgetBytes?: number;
  /** Images with more pixels are refused from the header. */
  maxPixels: number;
  /** Share cards' pixels (their SVG is ours). */
  cardPixels: number;
  timeoutMs?: number;
  /** How long an idle render process stays for the next job. */
  idleMs?: number;
  /** How often its memory is read while a job runs. */
  watchMs?: number;
  onRefused?: (reason: Refusal) => void;
}

type Answer = { id: number; bytes?: Uint8Array; none?: Refusal; detail?: string; error?: string };

interface Worker {
  readonly proc: ChildProcess;
  readonly ready: Promise<void>;
  /** Anonymous resident bytes once it had loaded the decoder: what "idle" is. */
  baseline: number;
  peak: number;
  killedFor?: Refusal;
  readonly jobs: Map<number, (a: Answer) => void>;
}

/** Anonymous resident memory of a process (what its decoders allocate), or null when unreadable. */
export function anonBytes(pid: number): number | null {
  try {
    const m = /RssAnon:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'latin1'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/**
 * Image decoding in a child process the server can kill. Its memory is read every few milliseconds
 * while a job runs, and past `budgetBytes` above its idle size the process is killed and the job
 * refused as 'memory': no header check can foresee every decoder, but this bound holds for all of them.
 * The process starts on the first job and leaves after `idleMs` without one.
 */
export function createRenderer(opts: RendererOptions): Renderer {
  const { log, budgetBytes } = opts;
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const idleMs = opts.idleMs ?? 30_000;
  const watchMs = opts.watchMs ?? 5;
  let current: Worker | undefined;
  let nextId = 1;
  let watch: NodeJS.Timeout | undefined;
  let idle: NodeJS.Timeout | undefined;

  const retire = (w: Worker): void => {
    if (current === w) current = undefined;
    if (w.proc.connected) w.proc.disconnect();
  };

  const kill = (w: Worker, reason: Refusal): void => {
    w.killedFor ??= reason;
    w.proc.kill('SIGKILL');
  };

  const watchTick = (): void => {
    const w = current;
    if (!w || w.jobs.size === 0) return;
    const anon = anonBytes(w.proc.pid!);
    // Unreadable memory cannot be bounded: fail closed.
    if (anon === null) return kill(w, 'memory');
    w.peak = Math.max(w.peak, anon - w.baseline);
    if (anon - w.baseline > budgetBytes) kill(w, 'memory');
  };

  const spawn = (): Worker => {
    const proc = fork(fromRoot('src/thumbs/render-worker.mjs'), [], {
      execArgv: [],
      serialization: 'advanced',
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      // Two malloc arenas: libvips threads would otherwise each keep one, and their pages, after a job.
      env: { ...process.env, MALLOC_ARENA_MAX: '2' },
    });
    const jobs = new Map<number, (a: Answer) => void>();
    let started!: () => void;
    let failed!: (err: Error) => void;
    const ready = new Promise<void>((resolve, reject) => {
      started = resolve;
      failed = reject;
    });
    ready.catch(() => {});
    const w: Worker = { proc, ready, baseline: 0, peak: 0, jobs };
    proc.on('message', (m: Answer & { ready?: boolean }) => {
      if (m.ready) {
        w.baseline = anonBytes(proc.pid!) ?? 0;
        started();
        return;
      }
      const settle = jobs.get(m.id);
      jobs.delete(m.id);
      settle?.(m);
    });
    proc.on('error', (err) => failed(err));
    proc.on('exit', (code, signal) => {
      failed(new Error(`render process exited (${signal ?? code}) before it was ready`));
      if (current === w) current = undefined;
      const reason = w.killedFor ?? 'crashed';
      if (jobs.size) log.warn({ reason, code, signal, peakMiB: Math.round(w.peak / 2 ** 20) }, 'render process stopped with jobs in progress');
      for (const settle of jobs.values()) settle({ id: 0, none: reason });
      jobs.clear();
    });
    // An idle render process must not keep the server alive (its channel is held only while jobs run).
    proc.unref();
    return w;
  };

  const afterJob = (w: Worker): void => {
    if (w.jobs.size) return;
    clearInterval(watch);
    watch = undefined;
    w.proc.channel?.unref();
    // Memory a decoder left behind would count against the next image: start afresh instead.
    const anon = anonBytes(w.proc.pid!);
    if (anon === null || anon - w.baseline > budgetBytes / 4) return retire(w);
    idle = setTimeout(() => retire(w), idleMs);
    idle.unref();
  };

  const run = async (job: Record<string, unknown>): Promise<Answer> => {
    clearTimeout(idle);
    if (current && !current.proc.connected) current = undefined;
    const w = (current ??= spawn());
    w.proc.channel?.ref();
    try {
      await w.ready;
    } catch (err) {
      log.error({ err }, 'render process did not start');
      return { id: 0, none: 'crashed' };
    }
    if (!w.proc.connected) return { id: 0, none: w.killedFor ?? 'crashed' };
    const id = nextId++;
    return new Promise<Answer>((resolve) => {
      const timer = setTimeout(() => kill(w, 'timeout'), timeoutMs);
      w.jobs.set(id, (a) => {
        clearTimeout(timer);
        resolve(a);
        afterJob(w);
      });
      watch ??= setInterval(watchTick, watchMs);
      w.proc.send({ ...job, id });
    });
  };

  return {
    async thumbnail(path, px) {
      const a = await run({ t: 'thumb', path, px, maxPixels: opts.maxPixels, budget: opts.headerBudgetBytes ?? budgetBytes });
      if (a.bytes) return { bytes: Buffer.from(a.bytes.buffer, a.bytes.byteOffset, a.bytes.byteLength) };
      const none = a.none ?? 'crashed';
      opts.onRefused?.(none);
      log.debug({ path, reason: none, detail: a.detail }, 'no preview');
      return { none, detail: a.detail };
    },
    async card(svg) {
      // A card is small; one that shared a killed process with an image bomb is drawn again.
      for (let attempt = 0; ; attempt++) {
        const a = await run({ t: 'card', svg, maxPixels: opts.cardPixels });
        if (a.bytes) return Buffer.from(a.bytes.buffer, a.bytes.byteOffset, a.bytes.byteLength);
        if (a.error !== undefined || attempt === 1) throw new Error(`share card not drawn: ${a.error ?? a.none}`);
      }
    },
    pid: () => current?.proc.pid,
    async close() {
      clearTimeout(idle);
      clearInterval(watch);
      const w = current;
      if (!w || w.proc.exitCode !== null || w.proc.signalCode !== null) return;
      const exited = new Promise((resolve) => w.proc.once('exit', resolve));
      w.proc.ref();
      retire(w);
      await exited;
    },
  };
}
