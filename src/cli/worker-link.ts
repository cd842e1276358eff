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
    gatherMetrics: () =>
      new Promise((resolve) => {
        const id = nextId++;
        waiting.set(id, resolve);
        post({ t: 'metrics-ask', id });
      }),
    serveMetrics: (fn) => {
      local = fn;
    },
    onSupervisorGone: (fn) => {
      proc.once('disconnect', fn);
    },
  };
}
