import { fork, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import type { Logger } from 'pino';
import type { Notifier } from '../sd-notify.ts';

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
  const gatherings = new Map<number, { from: number; askId: number; expect: number; parts: unknown[]; timer: NodeJS.Timeout }>();
  let nextGathering = 1;

  const finishGathering = (id: number): void => {
    const g = gatherings.get(id);
    if (!g) return;
    gatherings.delete(id);
    clearTimeout(g.timer);
    send(children.get(g.from), { t: 'metrics-all', id: g.askId, parts: g.parts });
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
          gatherings.set(id, { from: index, askId: m.id, expect: targets.length, parts: [], timer });
          for (const [, c] of targets) send(c, { t: 'metrics-get', id, from: index });
        } else if (m.t === 'metrics-part') {
          const g = gatherings.get(m.id);
          if (!g) return;
          g.parts.push(m.part);
          if (g.parts.length >= g.expect) finishGathering(m.id);
        }
      });
      child.on('exit', (code, signal) => {
        if (children.get(index) === child) children.delete(index);
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
    for (const c of children.values()) c.kill('SIGHUP');
  });

  try {
    if (port === 0) port = await freePort(opts.host);
    await start(0);
    await Promise.all(Array.from({ length: opts.workers - 1 }, (_, i) => start(i + 1)));
    serving = true;
    log.info({ workers: opts.workers, port }, 'all workers listening');
    void opts.notifier?.ready(`${opts.workers} workers serving on port ${port}`);
  } catch (err) {
    log.error({ err }, 'a worker failed to start');
    stop('SIGTERM', 1);
  }
  return done;
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
