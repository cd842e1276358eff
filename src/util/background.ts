import type { Logger } from 'pino';

export interface BackgroundTask {
  readonly name: string;
  /** At most this often; 0: every tick. */
  readonly everyMs: number;
  run(): Promise<unknown>;
}

export interface Background {
  /** Run a tick soon (e.g. right after a mail was queued) instead of waiting for the next one. */
  kick(): void;
  /** A kick at most once per `ms` (for frequent triggers such as downloads). */
  kickSoon(ms?: number): void;
  /** Stops ticking and waits for a running tick to finish. */
  close(): Promise<void>;
}

/**
 * One loop for periodic work (mail outbox, download notifications, billing housekeeping): ticks every
 * `tickMs`, never overlaps itself, and a failing task is logged and retried on a later tick.
 */
export function startBackground(opts: { tasks: readonly BackgroundTask[]; tickMs: number; log: Logger }): Background {
  const lastRun = new Map<string, number>();
  let running: Promise<void> | null = null;
  let again = false;
  let closed = false;

  const tick = async (): Promise<void> => {
    for (const task of opts.tasks) {
      if (closed) return;
      const now = Date.now();
      if (now - (lastRun.get(task.name) ?? 0) < task.everyMs) continue;
      lastRun.set(task.name, now);
      try {
        await task.run();
      } catch (err) {
        opts.log.error({ err, task: task.name }, 'background task failed');
      }
    }
  };
  const kick = (): void => {
    if (closed) return;
    if (running) {
      again = true;
      return;
    }
    running = tick().finally(() => {
      running = null;
      if (again) {
        again = false;
        kick();
      }
    });
  };
  const timer = setInterval(kick, opts.tickMs);
  timer.unref();
  kick();
  let soon: NodeJS.Timeout | null = null;
  return {
    kick,
    kickSoon(ms = 1000) {
      if (soon || closed) return;
      soon = setTimeout(() => {
        soon = null;
        kick();
      }, ms);
      soon.unref();
    },
    async close() {
      closed = true;
      clearInterval(timer);
      if (soon) clearTimeout(soon);
      await running;
    },
  };
}
