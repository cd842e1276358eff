import { execFile } from 'node:child_process';
import type { Logger } from 'pino';

/** Tells systemd (Type=notify) that the server is ready or stopping; a no-op outside systemd. */
export interface Notifier {
  ready(status: string): Promise<void>;
  stopping(): Promise<void>;
}

/**
 * Node cannot send on a Unix datagram socket, so messages go through the `systemd-notify` binary
 * (part of systemd itself, no native addon). It is a child of ours, so the unit needs
 * NotifyAccess=all; since systemd 246 it waits (BARRIER=1) until PID 1 has processed the message,
 * so the message is attributed to the unit even though the sender exits right after. Failures are
 * logged, never fatal: without READY=1 systemd's TimeoutStartSec reports the problem.
 */
export function createNotifier(socket: string | undefined, log: Logger, bin = 'systemd-notify'): Notifier {
  const send = (args: string[]): Promise<void> =>
    new Promise((resolve) => {
      if (socket === undefined) return resolve();
      execFile(bin, args, { env: { NOTIFY_SOCKET: socket }, timeout: 10_000 }, (err, _out, stderr) => {
        if (err) log.warn({ err: err.message, stderr: stderr.trim(), args }, 'systemd-notify failed');
        resolve();
      });
    });
  return {
    ready: (status) => send(['--ready', `--status=${status}`]),
    stopping: () => send(['STOPPING=1', '--status=draining in-flight requests']),
  };
}
