import pino, { type Logger } from 'pino';

/**
 * Credential-bearing fields, censored if one ever reaches the logger. A safety net only: code
 * logs route patterns and request ids, never paths, query strings, headers or bodies.
 */
const SECRET_KEYS = [
  'authorization',
  '["x-upload-token"]',
  '["x-access-token"]',
  'cookie',
  'password',
  'access_password',
  'token',
  'upload_token',
  'access_token',
  'secret',
  'apiKey',
  'api_key',
  't',
];
export const REDACT_PATHS: readonly string[] = [
  ...SECRET_KEYS,
  ...SECRET_KEYS.map((k) => (k.startsWith('[') ? `*${k}` : `*.${k}`)),
  ...SECRET_KEYS.map((k) => (k.startsWith('[') ? `*.headers${k}` : `*.headers.${k}`)),
  ...SECRET_KEYS.map((k) => (k.startsWith('[') ? `*.query${k}` : `*.query.${k}`)),
  'url',
  '*.url',
];

type Destination = ReturnType<typeof pino.destination>;
const stderrDestinations = new Set<Destination>();
let stderrGone = false;

/** Drops what is written from now on: pino does so on EPIPE, and the same holds once stderr's terminal is gone. */
function mute(dest: Destination): void {
  const noop = (): void => {};
  Object.assign(dest, { write: () => true, flushSync: noop, end: noop, destroy: noop });
}

/**
 * The terminal stderr writes to has closed (its writes fail with EIO): logs have nowhere to go and are
 * dropped. Left alone, the flush at exit would retry such a write forever and the process never end.
 */
export function stderrClosed(): void {
  stderrGone = true;
  for (const d of stderrDestinations) mute(d);
}

function stderrDestination(): Destination {
  const dest = pino.destination({ fd: 2, sync: false });
  stderrDestinations.add(dest);
  dest.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EIO' || err.code === 'EPIPE') mute(dest);
  });
  return dest;
}

/** JSON logs on stderr; tokens, passwords and keys are never passed to the logger. */
export function createLogger(level: string, destination: Destination = stderrDestination()): Logger {
  return pino({ level, base: { pid: process.pid }, redact: { paths: [...REDACT_PATHS], censor: '[redacted]' } }, destination);
}

const LEVEL_NAMES: Record<number, string> = { 10: 'trace', 20: 'debug', 30: 'info', 40: 'warn', 50: 'error', 60: 'fatal' };
const PLUMBING = new Set(['level', 'time', 'pid', 'hostname', 'msg']);

/**
 * LOG_FORMAT=text (the default on a terminal): each JSON record as one short line, "12:00:01 warn
 * message key=value". Machines read the JSON format; this one is for a person watching the server.
 */
export function textDestination(out: { write(s: string): unknown } = process.stderr): { write(line: string): void } {
  return {
    write(line) {
      if (stderrGone && out === process.stderr) return;
      let rec: Record<string, unknown>;
      try {
        rec = JSON.parse(line) as Record<string, unknown>;
      } catch {
        out.write(line);
        return;
      }
      const time = new Date(typeof rec.time === 'number' ? rec.time : Date.now()).toTimeString().slice(0, 8);
      const level = LEVEL_NAMES[rec.level as number] ?? String(rec.level);
      const fields = Object.entries(rec)
        .filter(([k]) => !PLUMBING.has(k))
        .map(([k, v]) => `${k}=${k === 'err' && v && typeof v === 'object' ? JSON.stringify((v as { message?: unknown }).message) : JSON.stringify(v)}`);
      out.write(`${time} ${level.padEnd(5)} ${String(rec.msg ?? '')}${fields.length ? `  ${fields.join(' ')}` : ''}\n`);
    },
  };
}
