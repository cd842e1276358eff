import { fork, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import type { Logger } from 'pino';
import { AggregatorRegistry } from 'prom-client';
import type { Notifier } from './sd-notify.ts';
import { ensurePortFree } from '../http/port-free.ts';
import { stderrClosed } from '../log.ts';

/**
 * Messages between the supervisor and its worker processes (Node's IPC channel).
 *   worker → supervisor: `listening` once its server accepts; `metrics-ask` to gather every worker's metrics
 *   supervisor → worker: `metrics-get` (answer with `metrics-part`), `metrics-all` (the gathered parts)
 */
export type WorkerMsg =
  | { t: 'listening'; port: number }
  | { t: 'metrics-ask'; id: number }
  | { t: 'metrics-part'; id: number; part: unknown };
export type SupervisorMsg =
  | { t: 'metrics-get'; id: number; from: number }
  /** `id` is the asking worker's own id from its `metrics-ask`. */
  | { t: 'metrics-all'; id: number; parts: unknown[] };

export interface SuperviseOptions {
  readonly workers: number;
  readonly host: string;
  readonly port: number;
  readonly log: Logger;
  /** The environment workers inherit (plus PORT and SLUICE_WORKER_INDEX). */
  readonly env: NodeJS.ProcessEnv;
  /** systemd readiness (READY/STOPPING). */
  readonly notifier?: Notifier;
  /** How long one metrics gathering waits for slow workers. */
  readonly metricsTimeoutMs?: number;
  /** Called once every worker listens, with the port they share. */
  readonly listening?: (port: number) => void;
  /** Started from a terminal: SIGHUP (the terminal closed) stops the workers instead of being passed on. */
  readonly hangUpStops?: boolean;
}

const RESTART_DELAY_MS = 1000;
const MAX_RESTARTS_PER_MINUTE = 5;

/**
 * `WORKERS=N`: runs N copies of `sluice serve` as child processes on one port (the kernel spreads
 * connections over them with SO_REUSEPORT, which uWS sets, but only for a given port: with PORT=0
 * the supervisor picks a free port first). Worker 0 starts first: it migrates, sweeps crash
 * leftovers and runs the periodic sweeper. A worker that dies is restarted; one that keeps dying stops the whole server (exit 1) so
 * systemd restarts it. SIGTERM/SIGINT are passed on and the supervisor exits when every worker has
 * drained; SIGHUP is passed on. A worker whose supervisor disappears shuts itself down.
 */
export async function supervise(opts: SuperviseOptions): Promise<number> {
  const { log } = opts;
  const children = new Map<number, ChildProcess>();
  const restarts: number[] = [];
  let port = opts.port;
  let stopping = false;
  /** Every worker listened once: from then on a death (even before listening again) is restarted. */
  let serving = false;
  let exitCode = 0;
  let resolveDone: (code: number) => void = () => {};
  const done = new Promise<number>((r) => (resolveDone = r));
  const gatherings = new Map<
    number,
    { from: number; askId: number; waiting: Set<ChildProcess>; parts: Array<{ by: ChildProcess; part: unknown }>; timer: NodeJS.Timeout }
  >();
  let nextGathering = 1;
  /** Each live worker's part from the latest gathering (what a scrape last saw of it). */
  const lastParts = new Map<number, unknown>();
  /**
   * The counters and histograms of workers that died, as last seen: kept in every later gathering,
   * so the summed series stay monotonic across a restart instead of dropping, which Prometheus would
   * read as a reset of the whole sum (a spurious jump in rate()). What a dead worker counted after
   * the last scrape is lost: an undercount, never a reset.
   */
  const retired: unknown[] = [];
  let merging = false;
  /**
   * Adds a dead worker's last part. Past a few, they are merged into one (bounded however often
   * workers die); the parts stay listed until their merge replaces them, so no gathering misses them.
   */
  const retire = (part: unknown): void => {
    retired.push(monotonicOnly(part));
    if (retired.length <= 4 || merging) return;
    merging = true;
    const parts = retired.slice();
    AggregatorRegistry.aggregate(parts as Parameters<typeof AggregatorRegistry.aggregate>[0])
      .getMetricsAsJSON()
      .then(
        (merged) => void retired.splice(0, parts.length, merged),
        (err: unknown) => log.warn({ err }, 'merging retired worker metrics failed'),
      )
      .finally(() => (merging = false));
  };

  const finishGathering = (id: number): void => {
    const g = gatherings.get(id);
    if (!g) return;
    gatherings.delete(id);
    clearTimeout(g.timer);
    send(children.get(g.from), { t: 'metrics-all', id: g.askId, parts: [...g.parts.map((p) => p.part), ...retired] });
  };

  const start = (index: number): Promise<void> =>
    new Promise((resolve, reject) => {
      const child = fork(process.argv[1]!, ['serve'], {
        execArgv: process.execArgv,
        env: { ...opts.env, PORT: String(port), SLUICE_WORKER_INDEX: String(index) },
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      });
      children.set(index, child);
      let listening = false;
      child.on('message', (m: WorkerMsg) => {
        if (m.t === 'listening') {
          listening = true;
          resolve();
        } else if (m.t === 'metrics-ask') {
          // Every live worker contributes once; the asker gets whatever arrived within the timeout.
          const id = nextGathering++;
          const targets = [...children.entries()].filter(([, c]) => c.connected);
          const timer = setTimeout(() => finishGathering(id), opts.metricsTimeoutMs ?? 2000);
          gatherings.set(id, { from: index, askId: m.id, waiting: new Set(targets.map(([, c]) => c)), parts: [], timer });
          for (const [, c] of targets) send(c, { t: 'metrics-get', id, from: index });
        } else if (m.t === 'metrics-part') {
          const g = gatherings.get(m.id);
          if (!g || !g.waiting.delete(child)) return;
          g.parts.push({ by: child, part: m.part });
          lastParts.set(index, m.part);
          if (g.waiting.size === 0) finishGathering(m.id);
        }
      });
      child.on('exit', (code, signal) => {
        if (children.get(index) === child) children.delete(index);
        const last = lastParts.get(index);
        lastParts.delete(index);
        if (last !== undefined) retire(last);
        for (const [id, g] of gatherings) {
          // Its part in a gathering still open is now counted through `retired` (not twice), and
          // a gathering still waiting for it stops waiting.
          g.parts = g.parts.filter((p) => p.by !== child);
          if (g.waiting.delete(child) && g.waiting.size === 0) finishGathering(id);
        }
        if (!listening) reject(new Error(`worker ${index} exited before listening (${signal ?? `code ${code}`})`));
        if (stopping) {
          // A worker still starting when the signal came dies of it, with nothing in flight.
          if (code !== 0 && signal !== 'SIGTERM' && signal !== 'SIGINT') exitCode = 1;
          if (children.size === 0) resolveDone(exitCode);
          return;
        }
        if (!serving) return; // a worker failing at first start fails the start (see below)
        log.error({ worker: index, code, signal, listening }, 'worker exited unexpectedly; restarting it');
        const now = Date.now();
        restarts.push(now);
        while (restarts.length && restarts[0]! < now - 60_000) restarts.shift();
        if (restarts.length > MAX_RESTARTS_PER_MINUTE) {
          log.fatal('workers keep exiting; stopping the server');
          stop('SIGTERM', 1);
          return;
        }
        // A replacement that dies before listening comes back through this handler: counted above.
        setTimeout(() => {
          if (!stopping) start(index).catch((err: unknown) => log.warn({ err, worker: index }, 'worker restart failed'));
        }, RESTART_DELAY_MS);
      });
    });

  const stop = (signal: NodeJS.Signals, code = 0): void => {
    if (stopping) return;
    stopping = true;
    exitCode = code;
    log.info({ signal, workers: children.size }, 'stopping workers');
    void opts.notifier?.stopping();
    for (const c of children.values()) c.kill(signal);
    if (children.size === 0) resolveDone(exitCode);
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGHUP', () => {
    // Its terminal closed: the supervisor stops its workers and ends, as SIGTERM would.
    if (opts.hangUpStops) {
      if (process.stderr.isTTY) stderrClosed();
      return stop('SIGHUP');
    }
    for (const c of children.values()) c.kill('SIGHUP');
  });

  // Taken by another server: refused before any worker starts (main prints why and exits 1).
  if (port !== 0) await ensurePortFree(opts.host, port);
  try {
    if (port === 0) port = await freePort(opts.host);
    await start(0);
    await Promise.all(Array.from({ length: opts.workers - 1 }, (_, i) => start(i + 1)));
    serving = true;
    log.info({ workers: opts.workers, port }, 'all workers listening');
    opts.listening?.(port);
    void opts.notifier?.ready(`${opts.workers} workers serving on port ${port}`);
  } catch (err) {
    log.error({ err }, 'a worker failed to start');
    stop('SIGTERM', 1);
  }
  return done;
}

/**
 * The counters and histograms of a worker's metrics part (prom-client's JSON: an array of
 * metrics with a `type`): gauges describe a live process and die with it.
 */
function monotonicOnly(part: unknown): unknown {
  if (!Array.isArray(part)) return [];
  return part.filter((m: { type?: string }) => m?.type === 'counter' || m?.type === 'histogram');
}

/** A port the kernel considers free right now (bound once, then released for the workers). */
function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, host, () => {
      const { port } = probe.address() as net.AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

function send(child: ChildProcess | undefined, msg: SupervisorMsg): void {
  if (child?.connected) child.send(msg, (err) => void err);
}
