import type { SupervisorMsg, WorkerMsg } from './supervise.ts';

/** A worker process's side of the IPC channel to its supervisor (see supervise.ts). */
export interface WorkerLink {
  readonly index: number;
  /** Tells the supervisor this worker accepts connections on `port`. */
  listening(port: number): void;
  /** Every live worker's metrics (prom-client JSON, this one's included), for one aggregated scrape. */
  gatherMetrics(): Promise<unknown[]>;
  /** How this worker answers the supervisor's requests for its metrics. */
  serveMetrics(local: () => Promise<unknown>): void;
  /** Runs once when the supervisor is gone (killed or exited): the worker should shut down. */
  onSupervisorGone(fn: () => void): void;
}

/** Longer than the supervisor's own wait for slow workers (2 s). */
const GATHER_TIMEOUT_MS = 3000;

export function createWorkerLink(proc: NodeJS.Process, index: number): WorkerLink {
  const post = (msg: WorkerMsg): void => {
    if (proc.connected) proc.send?.(msg, undefined, {}, (err: Error | null) => void err);
  };
  const waiting = new Map<number, (parts: unknown[]) => void>();
  let nextId = 1;
  let local: () => Promise<unknown> = async () => null;

  proc.on('message', (m: SupervisorMsg) => {
    if (m.t === 'metrics-get') {
      local().then(
        (part) => post({ t: 'metrics-part', id: m.id, part }),
        () => post({ t: 'metrics-part', id: m.id, part: [] }),
      );
    } else if (m.t === 'metrics-all') {
      waiting.get(m.id)?.(m.parts);
      waiting.delete(m.id);
    }
  });

  return {
    index,
    listening: (port) => post({ t: 'listening', port }),
    gatherMetrics: async () => {
      // Without the supervisor (gone, or too slow) a scrape still answers, with this worker's figures.
      const mine = async (): Promise<unknown[]> => [await local()];
      if (!proc.connected) return mine();
      const id = nextId++;
      const all = await new Promise<unknown[] | null>((resolve) => {
        const timer = setTimeout(() => {
          waiting.delete(id);
          resolve(null);
        }, GATHER_TIMEOUT_MS);
        waiting.set(id, (parts) => {
          clearTimeout(timer);
          resolve(parts);
        });
        post({ t: 'metrics-ask', id });
      });
      return all ?? mine();
    },
    serveMetrics: (fn) => {
      local = fn;
    },
    onSupervisorGone: (fn) => {
      if (!proc.connected) return fn();
      proc.once('disconnect', fn);
    },
  };
}
