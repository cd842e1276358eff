// Ctrl-C (or SIGTERM) during a transfer: the transfer is stopped cleanly (tus keeps what the server
// has; a download keeps its part file), the terminal is given back, and the command ends with 130.
import { ClientFailure, EXIT } from './failure.ts';

export interface Interruption {
  /** `work`, or a failure with status 130 once a signal came and `stop` has run. */
  race<T>(work: Promise<T>, stop: () => Promise<void>): Promise<T>;
  close(): void;
}

const MESSAGE = 'interrupted: run the same command again to resume';

export function interruption(): Interruption {
  const waiting = new Set<() => void>();
  let signalled = false;
  const onSignal = (): void => {
    // Between transfers (or on a second Ctrl-C) nothing needs stopping: every step is saved already.
    if (signalled || waiting.size === 0) {
      process.stderr.write(`\n${MESSAGE}\n`);
      process.exit(EXIT.INTERRUPTED);
    }
    signalled = true;
    for (const w of waiting) w();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return {
    race(work, stop) {
      return new Promise((resolve, reject) => {
        const cancel = (): void => {
          stop()
            .catch(() => {})
            .then(() => reject(new ClientFailure(EXIT.INTERRUPTED, MESSAGE)));
        };
        waiting.add(cancel);
        work.then(resolve, reject).finally(() => waiting.delete(cancel));
      });
    },
    close() {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}
