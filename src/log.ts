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

/** JSON logs on stderr; tokens, passwords and keys are never passed to the logger. */
export function createLogger(level: string, destination = pino.destination({ fd: 2, sync: false })): Logger {
  return pino({ level, base: { pid: process.pid }, redact: { paths: [...REDACT_PATHS], censor: '[redacted]' } }, destination);
}
