// Every way `sluice send` and `sluice get` can end, as one table: the exit status a script branches
// on and the one line a person reads. `--help` prints the same table.

export const EXIT = {
  OK: 0,
  USAGE: 1,
  UNREACHABLE: 2,
  REFUSED: 3,
  RATE_LIMITED: 4,
  TOO_LARGE: 5,
  PASSWORD: 6,
  MISMATCH: 7,
  INTERRUPTED: 130,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

export const EXIT_HELP = `Exit status:
  0  done
  1  usage: a bad option, a missing file, a link that is not a share link
  2  the server could not be reached, or failed (no answer, 5xx)
  3  the server refused (any other 4xx: no such bundle, a vanity name taken, …)
  4  rate limited: the message says when to try again
  5  over the size cap of the bundle or the plan
  6  wrong or missing password
  7  a download did not match (size, or the encrypted data failed to decrypt)
  130 interrupted (Ctrl-C): run the same command again to resume`;

/** A failure that ends the command with `exit` and prints `message` on one line. */
export class ClientFailure extends Error {
  constructor(
    readonly exit: ExitCode,
    message: string,
  ) {
    super(message);
  }
}

/** "in 12 minutes (at 14:05 UTC)" from a Retry-After value in seconds. */
export function retryText(retryAfter: string | null, now = Date.now()): string {
  const s = Number(retryAfter);
  if (!(s > 0)) return 'try again later';
  const at = new Date(now + s * 1000).toISOString().slice(11, 16);
  const wait = s < 120 ? `${Math.ceil(s)} seconds` : s < 7200 ? `${Math.ceil(s / 60)} minutes` : `${Math.ceil(s / 3600)} hours`;
  return `try again in ${wait} (at ${at} UTC)`;
}

/** What an answer's status and JSON error mean for the client. */
export function failureOf(status: number, body: string, retryAfter: string | null, doing: string): ClientFailure {
  let code = '';
  let error = '';
  try {
    const o = JSON.parse(body) as { code?: unknown; error?: unknown };
    if (typeof o.code === 'string') code = o.code;
    if (typeof o.error === 'string') error = o.error;
  } catch {
    // Not JSON (a proxy's page): the status says enough.
  }
  const said = error ? `: ${error}` : '';
  if (status === 429) return new ClientFailure(EXIT.RATE_LIMITED, `${doing}: rate limited, ${retryText(retryAfter)}`);
  if (status === 413 || code === 'SIZE_EXCEEDED' || code === 'UPLOAD_TOO_LARGE') {
    return new ClientFailure(EXIT.TOO_LARGE, `${doing}: over the size cap${said}`);
  }
  if (code === 'WRONG_PASSWORD') return new ClientFailure(EXIT.PASSWORD, `${doing}: wrong password`);
  if (status >= 400 && status < 500) return new ClientFailure(EXIT.REFUSED, `${doing}: refused (HTTP ${status})${said}`);
  return new ClientFailure(EXIT.UNREACHABLE, `${doing}: the server failed (HTTP ${status})${said}`);
}

/** A network error (refused, reset, timed out, unknown host) as a failure. */
export function unreachable(err: unknown, server: string, doing: string): ClientFailure {
  const cause = (err as { cause?: { code?: string; message?: string } })?.cause;
  const why = cause?.code ?? cause?.message ?? (err instanceof Error ? err.message : String(err));
  return new ClientFailure(EXIT.UNREACHABLE, `${doing}: cannot reach ${server} (${why})`);
}
