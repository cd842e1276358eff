import path from 'node:path';
import net from 'node:net';
import { resembles } from './util/similar.ts';
import { isEmail } from './util/names.ts';
import { MAX_OBJECT_BYTES } from './util/s3-sizes.ts';
import { createEnvReader, type EnvReader } from './util/env-reader.ts';

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
  /** WEBHOOK_ALLOW_PRIVATE=1: webhooks may reach loopback and private addresses (tests, intranets). */
  readonly webhookAllowPrivate: boolean;
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
  /** CONSOLE_SAMPLE_SECONDS: how often the console overview samples this node's traffic (the cluster's figures: every 6th). */
  readonly consoleSampleMs: number;
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
  // Every name read here: an unknown variable a typo away from one of them is warned about. The steps
  // read in a fixed order, the order in which problems are listed and near names are tried.
  const read = createEnvReader(env, problems);
  const { host, port, baseUrl, baseUrlFollowsPort, trustProxy } = networkSettings(read, problems);
  const logLevel = (read.str('LOG_LEVEL') ?? 'info').toLowerCase();
  if (!LOG_LEVELS.includes(logLevel)) problems.push(`LOG_LEVEL: expected one of ${LOG_LEVELS.join(', ')}`);
  const secret = read.str('SECRET');
  if (secret !== undefined && secret.length < 32) problems.push('SECRET: must be at least 32 characters');
  const { databaseUrl, redisUrl, workers, workerIndex } = processSettings(read, problems);
  const { stripePrices, stripeSecretKey, stripeWebhookSecret } = stripeSettings(env, read, problems);
  const { s3Access, s3, anonMaxBundleBytes } = storageSettings(read, problems);
  const { mailFrom, abuseEmail, clamdUrl } = mailAndAbuseSettings(read, problems);

  const config: Config = {
    host,
    port,
    baseUrl,
    baseUrlFollowsPort,
    dataDir: path.resolve(cwd, read.str('DATA_DIR') ?? './data'),
    s3,
    s3Access,
    databaseUrl,
    redisUrl,
    secret,
    trustProxy,
    workers,
    workerIndex,
    smtpUrl: read.url('SMTP_URL', ['smtp:', 'smtps:']),
    mailFrom,
    abuseEmail,
    clamdUrl,
    webhookAllowPrivate: read.oneOf('WEBHOOK_ALLOW_PRIVATE', ['0', '1'], '0') === '1',
    clamdConf: path.resolve(cwd, read.str('CLAMD_CONF') ?? '/etc/clamav/clamd.conf'),
    stripeSecretKey,
    stripeWebhookSecret,
    stripeApiUrl: read.url('STRIPE_API_URL', ['http:', 'https:']),
    stripePrices,
    rateLimitAnonPerHour: read.int('RATE_LIMIT_ANON_PER_HOUR', 60, 1),
    rateLimitContentPerMinute: read.int('RATE_LIMIT_CONTENT_PER_MINUTE', 1200, 1),
    rateLimitContentMissesPerHour: read.int('RATE_LIMIT_CONTENT_MISSES_PER_HOUR', 120, 1),
    anonMaxBundleBytes,
    anonExpiryDays: read.int('ANON_EXPIRY_DAYS', 3, 1, 3650),
    logLevel,
    sweepIntervalMs: read.int('SWEEP_INTERVAL_SECONDS', 300, 1, 86400) * 1000,
    shutdownGraceMs: read.int('SHUTDOWN_GRACE_SECONDS', 30, 0, 3600) * 1000,
    downloadStallMs: read.int('DOWNLOAD_STALL_TIMEOUT_SECONDS', 60, 1, 3600) * 1000,
    consoleSampleMs: read.int('CONSOLE_SAMPLE_SECONDS', 10, 1, 60) * 1000,
    notifySocket: read.str('NOTIFY_SOCKET'),
    logFormat: read.oneOf('LOG_FORMAT', LOG_FORMATS, 'auto'),
    // Last: every setting above has been read, so `known` is complete.
    warnings: misspelt(env, read.known),
  };
  if (problems.length > 0) throw new ConfigError(problems);
  return Object.freeze(config);
}

/** HOST, PORT, BASE_URL (or the default origin naming the port) and TRUST_PROXY. */
function networkSettings(read: EnvReader, problems: string[]) {
  const host = read.str('HOST') ?? '0.0.0.0';
  if (net.isIP(host) === 0 && host !== 'localhost') problems.push(`HOST: expected an IP address, got ${JSON.stringify(host)}`);
  const port = read.int('PORT', 8080, 0, 65535);
  const explicitBaseUrl = read.url('BASE_URL', ['http:', 'https:']);
  // Links are BASE_URL + a path: a query or a fragment would land in the middle of every one.
  if (explicitBaseUrl !== undefined && /[?#]/.test(explicitBaseUrl)) problems.push('BASE_URL: must not carry a query or a fragment');
  const baseUrl = (explicitBaseUrl ?? `http://localhost:${port}`).replace(/\/+$/, '');
  const trustProxy = (read.str('TRUST_PROXY') ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  for (const entry of trustProxy) {
    const [addr, bits] = entry.split('/');
    const family = net.isIP(addr ?? '');
    const max = family === 6 ? 128 : 32;
    if (family === 0 || (bits !== undefined && (!/^\d+$/.test(bits) || Number(bits) > max))) {
      problems.push(`TRUST_PROXY: ${JSON.stringify(entry)} is not an IP address or CIDR`);
    }
  }
  return { host, port, baseUrl, baseUrlFollowsPort: explicitBaseUrl === undefined, trustProxy };
}

/** The database, Redis and how many worker processes share them. */
function processSettings(read: EnvReader, problems: string[]) {
  const databaseUrl = read.url('DATABASE_URL', ['postgres:', 'postgresql:']);
  const redisUrl = read.url('REDIS_URL', ['redis:', 'rediss:']);
  // Several processes need state they can share: real PostgreSQL (the embedded database serves
  // one process) and Redis (in-process rate limits would give each worker its own budget).
  const shared = databaseUrl !== undefined && redisUrl !== undefined;
  // One by default, as the operator contract says; each worker holds its own database pool.
  const workers = read.int('WORKERS', 1, 1, 256);
  if (workers > 1 && !shared) {
    problems.push(
      `WORKERS: ${workers} processes need DATABASE_URL and REDIS_URL (the embedded database and in-process rate limits serve one process)`,
    );
  }
  const workerIndexRaw = read.str('SLUICE_WORKER_INDEX');
  const workerIndex = workerIndexRaw === undefined ? null : read.int('SLUICE_WORKER_INDEX', 0, 0, 255);
  return { databaseUrl, redisUrl, workers, workerIndex };
}

/** The Stripe keys and the price of each plan (STRIPE_PRICE_<PLAN>_<MONTHLY|ONCE>). */
function stripeSettings(env: NodeJS.ProcessEnv, read: EnvReader, problems: string[]) {
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
  const stripeSecretKey = read.str('STRIPE_SECRET_KEY');
  const stripeWebhookSecret = read.str('STRIPE_WEBHOOK_SECRET');
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
  return { stripePrices, stripeSecretKey, stripeWebhookSecret };
}

/** The SDK's S3 variables, STORAGE_URL, and the largest bundle, which S3 bounds. */
function storageSettings(read: EnvReader, problems: string[]) {
  const accessKeyId = read.str('AWS_ACCESS_KEY_ID');
  const secretAccessKey = read.str('AWS_SECRET_ACCESS_KEY');
  const sessionToken = read.str('AWS_SESSION_TOKEN');
  if ((accessKeyId === undefined) !== (secretAccessKey === undefined)) {
    problems.push('AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: set both or neither');
  }
  const s3Access: S3Access = Object.freeze({
    credentials: accessKeyId && secretAccessKey ? { accessKeyId, secretAccessKey, ...(sessionToken ? { sessionToken } : {}) } : undefined,
    region: read.str('AWS_REGION') ?? read.str('AWS_DEFAULT_REGION') ?? 'us-east-1',
    endpoint: read.url('AWS_ENDPOINT_URL_S3', ['http:', 'https:']) ?? read.url('AWS_ENDPOINT_URL', ['http:', 'https:']),
    partBufferBytes: read.int('S3_PART_BUFFER_MIB', 24, 16, 65536) * 1024 * 1024,
  });
  const storage = read.str('STORAGE_URL');
  const s3 = storage === undefined ? null : parseStorageUrl('STORAGE_URL', storage, s3Access, problems);
  const anonMaxBundleBytes = read.int('ANON_MAX_BUNDLE_BYTES', 1073741824, 1);
  if (s3 && anonMaxBundleBytes > MAX_OBJECT_BYTES) problems.push(`ANON_MAX_BUNDLE_BYTES: with STORAGE_URL a file can hold at most ${MAX_OBJECT_BYTES} bytes (10,000 parts of an S3 multipart upload)`);
  return { s3Access, s3, anonMaxBundleBytes };
}

/** The sender of our mails, where abuse reports go, and the clamd that scans new files. */
function mailAndAbuseSettings(read: EnvReader, problems: string[]) {
  const mailFrom = read.str('MAIL_FROM') ?? 'Sluice <sluice@localhost>';
  if (!/^[^\r\n]*@[^\r\n]*$/.test(mailFrom)) problems.push('MAIL_FROM: expected an address such as "Sluice <sluice@example.com>"');
  const abuseEmail = read.str('ABUSE_EMAIL');
  if (abuseEmail !== undefined && !isEmail(abuseEmail)) problems.push('ABUSE_EMAIL: expected an e-mail address');
  const clamdUrl = read.url('CLAMD_URL', ['unix:', 'tcp:']);
  if (clamdUrl !== undefined && URL.canParse(clamdUrl)) {
    const u = new URL(clamdUrl);
    if (u.protocol === 'unix:' && (u.host !== '' || u.pathname.length < 2)) problems.push('CLAMD_URL: expected unix:///absolute/path/to/clamd.ctl');
    if (u.protocol === 'tcp:' && (u.hostname === '' || u.port === '')) problems.push('CLAMD_URL: expected tcp://host:port');
  }
  return { mailFrom, abuseEmail, clamdUrl };
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
