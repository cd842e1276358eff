import pino, { type Logger } from 'pino';

/** JSON logs on stderr; tokens, passwords and keys are never passed to the logger. */
export function createLogger(level: string): Logger {
  return pino({ level, base: { pid: process.pid } }, pino.destination({ fd: 2, sync: false }));
}
