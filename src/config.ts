import path from 'node:path';
import net from 'node:net';
import { resembles } from './util/similar.ts';
import { isEmail } from './util/names.ts';
import { MAX_OBJECT_BYTES } from './util/s3-sizes.ts';

/** Everything the process is configured with. Only this module reads process.env. */
export interface Config {
  readonly host: string;
  readonly port: number;
  readonly baseUrl: string;
  /** BASE_URL is unset: the default origin names the port actually bound (PORT=0 picks one at listen). */
  readonly baseUrlFollowsPort: boolean;
  readonly dataDir: string;
  /** STORAGE_URL: null keeps files on disk under DATA_DIR; otherwise an S3 bucket (see storage/s3/client.ts). */
  readonly s3: S3Location | null;
  /** The SDK's variables (AWS_REGION, AWS_ENDPOINT_URL_S3, the key pair), for a bucket named elsewhere than STORAGE_URL. */
  readonly s3Access: S3Access;
  readonly databaseUrl: string | undefined;
  readonly redisUrl: string | undefined;
  readonly secret: string | undefined;
  readonly trustProxy: readonly string[];
  readonly workers: number;
  /** Set by the supervisor in each worker process it starts (SLUICE_WORKER_INDEX); null otherwise. */
  readonly workerIndex: number | null;
  readonly smtpUrl: string | undefined;
  readonly mailFrom: string;
  /** ABUSE_EMAIL: where new abuse reports are mailed, in batches; unset: reports are only listed by the CLI. */
  readonly abuseEmail: string | undefined;
  /** CLAMD_URL (`unix:///path` or `tcp://host:port`): every new file is scanned by clamd; unset: no scanning. */
  readonly clamdUrl: string | undefined;
  /** CLAMD_CONF: clamd's configuration file, read for its StreamMaxLength (how much of a file clamd scans). */
  readonly clamdConf: string;
  readonly stripeSecretKey: string | undefined;
  readonly stripeWebhookSecret: string | undefined;
  readonly stripeApiUrl: string | undefined;
  readonly stripePrices: Readonly<Record<string, string>>;
  readonly rateLimitAnonPerHour: number;
  /** Web content requests (/<code>, /d/, /zip/, previews, cards, /u/) per client address and minute. */
  readonly rateLimitContentPerMinute: number;
  /** Content requests answered 404 per client address and hour; past it, every content path is 429. */
  readonly rateLimitContentMissesPerHour: number;
  readonly anonMaxBundleBytes: number;
  readonly anonExpiryDays: number;
  readonly logLevel: string;
  readonly sweepIntervalMs: number;
  /** How long SIGTERM/SIGINT lets in-flight requests finish before aborting them. */
  readonly shutdownGraceMs: number;
  /** A response whose client takes no byte for this long is closed (slow-reader defence). */
  readonly downloadStallMs: number;
  /** Set by systemd for Type=notify units: where READY=1 and STOPPING=1 go. */
  readonly notifySocket: string | undefined;
  /** LOG_FORMAT: `auto` is short text lines on a terminal and JSON otherwise (systemd, files, pipes). */
  readonly logFormat: 'auto' | 'json' | 'text';
  /** Start-up warnings that stop nothing: a variable that looks like a misspelt setting. */
  readonly warnings: readonly string[];
}

/** Where an S3 store keeps its objects, and how to reach it. */
export interface S3Location extends S3Access {
  readonly bucket: string;
  /** '' or a prefix ending in '/'. */
  readonly prefix: string;
}

/** How to reach an S3 server, from the SDK's standard variables. */
export interface S3Access {
  /** AWS_REGION (AWS_DEFAULT_REGION); us-east-1 when unset, which S3-compatible servers accept. */
  readonly region: string;
  /** AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL; with one set, requests use path-style addressing. */
  readonly endpoint: string | undefined;
  /**
   * AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN); when unset, the SDK's own
   * provider chain (a profile, an instance or container role).
   */
  readonly credentials: { readonly accessKeyId: string; readonly secretAccessKey: string; readonly sessionToken?: string } | undefined;
  /**
   * S3_PART_BUFFER_MIB, in bytes: what the part buffers of all uploads of the process may hold
   * together, the parts being filled included, before uploads wait for one to come back.
   */
  readonly partBufferBytes: number;
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
const LOG_FORMATS = ['auto', 'json', 'text'] as const;
/** Common variables of a shell or service manager that are one edit from a setting (HOME, HOST). */
const NOT_SETTINGS = new Set(['HOME', 'PATH', 'USER', 'SHELL', 'TERM', 'LANG', 'PWD', 'OLDPWD', 'LOGNAME', 'MAIL', 'TZ', 'NODE_ENV', 'CI']);

/** Pure: builds a frozen Config from an env map, reporting every problem at once. */
export function loadConfig(env: NodeJS.ProcessEnv, cwd = process.cwd()): Config {
  const problems: string[] = [];
  // Every name read here: an unknown variable a typo away from one of them is warned about.
  const known = new Set<string>();
  const str = (name: string): string | undefined => {
    known.add(name);
    const v = env[name];
    return v === undefined || v.trim() === '' ? undefined : v.trim();
  };
  const int = (name: string, dflt: number, min: number, max = Number.MAX_SAFE_INTEGER): number => {
    const v = str(name);
    if (v === undefined) return dflt;
    if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > max) {
      problems.push(`${name}: expected a whole number from ${min} to ${max}, got ${JSON.stringify(v)}`);
      return dflt;
    }
    return Number(v);
  };
  const url = (name: string, protocols: string[]): string | undefined => {
    const v = str(name);
    if (v === undefined) return undefined;
    try {
      const u = new URL(v);
      if (!protocols.includes(u.protocol)) problems.push(`${name}: expected a ${protocols.join(' or ')} URL`);
    } catch {
      problems.push(`${name}: not a valid URL`);
    }
    return v;
  };

  const oneOf = <T extends string>(name: string, allowed: readonly T[], dflt: T): T => {
    const v = str(name)?.toLowerCase();
    if (v === undefined) return dflt;
    if ((allowed as readonly string[]).includes(v)) return v as T;
    problems.push(`${name}: expected one of ${allowed.join(', ')}, got ${JSON.stringify(v)}`);
    return dflt;
  };

  const host = str('HOST') ?? '0.0.0.0';
  if (net.isIP(host) === 0 && host !== 'localhost') problems.push(`HOST: expected an IP address, got ${JSON.stringify(host)}`);
  const port = int('PORT', 8080, 0, 65535);
  const explicitBaseUrl = url('BASE_URL', ['http:', 'https:']);
  // Links are BASE_URL + a path: a query or a fragment would land in the middle of every one.
  if (explicitBaseUrl !== undefined && /[?#]/.test(explicitBaseUrl)) problems.push('BASE_URL: must not carry a query or a fragment');
  const baseUrl = (explicitBaseUrl ?? `http://localhost:${port}`).replace(/\/+$/, '');
  const trustProxy = (str('TRUST_PROXY') ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  for (const entry of trustProxy) {
    const [addr, bits] = entry.split('/');
    const family = net.isIP(addr ?? '');
    const max = family === 6 ? 128 : 32;
    if (family === 0 || (bits !== undefined && (!/^\d+$/.test(bits) || Number(bits) > max))) {
      problems.push(`TRUST_PROXY: ${JSON.stringify(entry)} is not an IP address or CIDR`);
    }
  }
  const logLevel = (str('LOG_LEVEL') ?? 'info').toLowerCase();
  if (!LOG_LEVELS.includes(logLevel)) problems.push(`LOG_LEVEL: expected one of ${LOG_LEVELS.join(', ')}`);
  const secret = str('SECRET');
  if (secret !== undefined && secret.length < 32) problems.push('SECRET: must be at least 32 characters');

  const databaseUrl = url('DATABASE_URL', ['postgres:', 'postgresql:']);
  const redisUrl = url('REDIS_URL', ['redis:', 'rediss:']);
  // Several processes need state they can share: real PostgreSQL (the embedded database serves
  // one process) and Redis (in-process rate limits would give each worker its own budget).
  const shared = databaseUrl !== undefined && redisUrl !== undefined;
  // One by default, as the operator contract says; each worker holds its own database pool.
  const workers = int('WORKERS', 1, 1, 256);
  if (workers > 1 && !shared) {
    problems.push(
      `WORKERS: ${workers} processes need DATABASE_URL and REDIS_URL (the embedded database and in-process rate limits serve one process)`,
    );
  }
  const workerIndexRaw = str('SLUICE_WORKER_INDEX');
  const workerIndex = workerIndexRaw === undefined ? null : int('SLUICE_WORKER_INDEX', 0, 0, 255);

  const stripePrices: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) {
    const m = /^STRIPE_PRICE_(STARTER|POWER|MAX|PREMIUM)_(MONTHLY|ONCE)$/.exec(k);
    // A misspelt price (STRIPE_PRICE_POWER_WEEKLY) would leave a plan silently unsold.
    if (!m && k.startsWith('STRIPE_PRICE_') && v && v.trim()) {
      problems.push(`${k}: not a price setting; expected STRIPE_PRICE_<STARTER|POWER|MAX|PREMIUM>_<MONTHLY|ONCE>`);
    }
    if (m && v && v.trim()) {
      if (!/^price_[A-Za-z0-9_]+$/.test(v.trim())) problems.push(`${k}: expected a Stripe price id (price_…)`);
      stripePrices[`${m[1]!.toLowerCase()}_${m[2]!.toLowerCase()}`] = v.trim();
    }
  }
  const stripeSecretKey = str('STRIPE_SECRET_KEY');
  const stripeWebhookSecret = str('STRIPE_WEBHOOK_SECRET');
  if (stripeSecretKey !== undefined && !/^(sk|rk)_(test|live)_\w+$/.test(stripeSecretKey)) {
    problems.push('STRIPE_SECRET_KEY: expected a Stripe secret or restricted key (sk_test_…, sk_live_…, rk_…)');
  }
  if (stripeWebhookSecret !== undefined && !/^whsec_\w+$/.test(stripeWebhookSecret)) {
    problems.push('STRIPE_WEBHOOK_SECRET: expected a webhook signing secret (whsec_…)');
  }
  if ((stripeSecretKey === undefined) !== (stripeWebhookSecret === undefined)) {
    problems.push('STRIPE_SECRET_KEY and STRIPE_WEBHOOK_SECRET: set both or neither');
  }
  if (stripeSecretKey === undefined && Object.keys(stripePrices).length > 0) {
    problems.push('STRIPE_PRICE_*: prices are set but STRIPE_SECRET_KEY is not');
  }
  const accessKeyId = str('AWS_ACCESS_KEY_ID');
  const secretAccessKey = str('AWS_SECRET_ACCESS_KEY');
  const sessionToken = str('AWS_SESSION_TOKEN');
  if ((accessKeyId === undefined) !== (secretAccessKey === undefined)) {
    problems.push('AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: set both or neither');
  }
  const s3Access: S3Access = Object.freeze({
    credentials: accessKeyId && secretAccessKey ? { accessKeyId, secretAccessKey, ...(sessionToken ? { sessionToken } : {}) } : undefined,
    region: str('AWS_REGION') ?? str('AWS_DEFAULT_REGION') ?? 'us-east-1',
    endpoint: url('AWS_ENDPOINT_URL_S3', ['http:', 'https:']) ?? url('AWS_ENDPOINT_URL', ['http:', 'https:']),
    partBufferBytes: int('S3_PART_BUFFER_MIB', 24, 16, 65536) * 1024 * 1024,
  });
  const storage = str('STORAGE_URL');
  const s3 = storage === undefined ? null : parseStorageUrl('STORAGE_URL', storage, s3Access, problems);
  const anonMaxBundleBytes = int('ANON_MAX_BUNDLE_BYTES', 1073741824, 1);
  if (s3 && anonMaxBundleBytes > MAX_OBJECT_BYTES) problems.push(`ANON_MAX_BUNDLE_BYTES: with STORAGE_URL a file can hold at most ${MAX_OBJECT_BYTES} bytes (10,000 parts of an S3 multipart upload)`);
  const mailFrom = str('MAIL_FROM') ?? 'Sluice <sluice@localhost>';
  if (!/^[^\r\n]*@[^\r\n]*$/.test(mailFrom)) problems.push('MAIL_FROM: expected an address such as "Sluice <sluice@example.com>"');

  const abuseEmail = str('ABUSE_EMAIL');
  if (abuseEmail !== undefined && !isEmail(abuseEmail)) problems.push('ABUSE_EMAIL: expected an e-mail address');
  const clamdUrl = url('CLAMD_URL', ['unix:', 'tcp:']);
  if (clamdUrl !== undefined && URL.canParse(clamdUrl)) {
    const u = new URL(clamdUrl);
    if (u.protocol === 'unix:' && (u.host !== '' || u.pathname.length < 2)) problems.push('CLAMD_URL: expected unix:///absolute/path/to/clamd.ctl');
    if (u.protocol === 'tcp:' && (u.hostname === '' || u.port === '')) problems.push('CLAMD_URL: expected tcp://host:port');
  }

  const config: Config = {
    host,
    port,
    baseUrl,
    baseUrlFollowsPort: explicitBaseUrl === undefined,
    dataDir: path.resolve(cwd, str('DATA_DIR') ?? './data'),
    s3,
    s3Access,
    databaseUrl,
    redisUrl,
    secret,
    trustProxy,
    workers,
    workerIndex,
    smtpUrl: url('SMTP_URL', ['smtp:', 'smtps:']),
    mailFrom,
    abuseEmail,
    clamdUrl,
    clamdConf: path.resolve(cwd, str('CLAMD_CONF') ?? '/etc/clamav/clamd.conf'),
    stripeSecretKey,
    stripeWebhookSecret,
    stripeApiUrl: url('STRIPE_API_URL', ['http:', 'https:']),
    stripePrices,
    rateLimitAnonPerHour: int('RATE_LIMIT_ANON_PER_HOUR', 60, 1),
    rateLimitContentPerMinute: int('RATE_LIMIT_CONTENT_PER_MINUTE', 1200, 1),
    rateLimitContentMissesPerHour: int('RATE_LIMIT_CONTENT_MISSES_PER_HOUR', 120, 1),
    anonMaxBundleBytes,
    anonExpiryDays: int('ANON_EXPIRY_DAYS', 3, 1, 3650),
    logLevel,
    sweepIntervalMs: int('SWEEP_INTERVAL_SECONDS', 300, 1, 86400) * 1000,
    shutdownGraceMs: int('SHUTDOWN_GRACE_SECONDS', 30, 0, 3600) * 1000,
    downloadStallMs: int('DOWNLOAD_STALL_TIMEOUT_SECONDS', 60, 1, 3600) * 1000,
    notifySocket: str('NOTIFY_SOCKET'),
    logFormat: oneOf('LOG_FORMAT', LOG_FORMATS, 'auto'),
    // Last: every setting above has been read, so `known` is complete.
    warnings: misspelt(env, known),
  };
  if (problems.length > 0) throw new ConfigError(problems);
  return Object.freeze(config);
}

/**
 * s3://BUCKET or s3://BUCKET/PREFIX; bucket names as S3 allows them (3-63 of a-z 0-9 . -). `name`
 * is what a problem names (STORAGE_URL, or a command's flag); problems go to `problems`.
 */
export function parseStorageUrl(name: string, v: string, access: S3Access, problems: string[]): S3Location | null {
  const m = /^s3:\/\/([^/]+)(?:\/(.*))?$/.exec(v);
  if (!m) {
    problems.push(`${name}: expected s3://BUCKET or s3://BUCKET/PREFIX`);
    return null;
  }
  const bucket = m[1]!;
  const prefix = (m[2] ?? '').replace(/^\/+|\/+$/g, '');
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket)) {
    problems.push(`${name}: ${JSON.stringify(bucket)} is not a valid bucket name (3-63 characters of a-z, 0-9, '.' and '-')`);
  }
  if (/(^|\/)\.\.?(\/|$)|[\\\x00-\x1f]/.test(prefix)) problems.push(`${name}: the prefix must not hold . or .. segments or control characters`);
  return Object.freeze({ ...access, bucket, prefix: prefix ? `${prefix}/` : '' });
}

/** A bucket and prefix as one line, with the endpoint when it is not AWS (never the credentials). */
export function describeLocation(loc: S3Location): string {
  return `s3://${loc.bucket}${loc.prefix ? `/${loc.prefix.slice(0, -1)}` : ''}${loc.endpoint ? ` at ${loc.endpoint}` : ''}`;
}

/** A warning for each set variable that is no setting but one or two edits from one (DATABSE_URL, PROT). */
function misspelt(env: NodeJS.ProcessEnv, known: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined || known.has(name) || NOT_SETTINGS.has(name) || name.startsWith('STRIPE_PRICE_')) continue;
    const like = resembles(name, known);
    if (like !== null) out.push(`${name} is not a setting; did you mean ${like}? (it is ignored)`);
  }
  return out;
}
