import type { Logger } from 'pino';

export interface Hit {
  /** Requests counted in the current window, this one included. */
  readonly count: number;
  /** Milliseconds until the window resets. */
  readonly resetMs: number;
}

/** Counts requests per key in fixed windows that start at a key's first request. */
export interface RateStore {
  readonly kind: 'memory' | 'redis';
  hit(key: string, windowMs: number): Promise<Hit>;
  /**
   * Takes back one hit of the current window (never below 0; nothing once the window ended): for
   * counters that reserve an attempt before knowing whether it counts (see verify-access.ts).
   */
  undo(key: string): Promise<void>;
  /**
   * The current window's count without spending (0 and resetMs 0 when no window runs): for budgets
   * that are asked before a request and spent only by some answers (content misses).
   */
  peek(key: string): Promise<Hit>;
  /** Resolves when the store answers (readiness); the memory store always does. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

/** In-process store: exact for one process (the embedded default runs one). */
export function createMemoryRateStore(now: () => number = Date.now): RateStore {
  const windows = new Map<string, { count: number; resetAt: number }>();
  let sweeps = 0;
  return {
    kind: 'memory',
    async hit(key, windowMs) {
      const t = now();
      // Drop finished windows now and then so idle keys do not accumulate.
      if (++sweeps % 10_000 === 0) for (const [k, w] of windows) if (w.resetAt <= t) windows.delete(k);
      let w = windows.get(key);
      if (!w || w.resetAt <= t) {
        w = { count: 0, resetAt: t + windowMs };
        windows.set(key, w);
      }
      w.count++;
      return { count: w.count, resetMs: w.resetAt - t };
    },
    async undo(key) {
      const w = windows.get(key);
      if (w && w.resetAt > now() && w.count > 0) w.count--;
    },
    async peek(key) {
      const w = windows.get(key);
      const t = now();
      return w && w.resetAt > t ? { count: w.count, resetMs: w.resetAt - t } : { count: 0, resetMs: 0 };
    },
    ping: async () => {},
    close: async () => windows.clear(),
  };
}

/**
 * Run only before ARGV's deadline (milliseconds on Redis's clock): a command that waited in a frozen
 * or paused Redis past the time its request gave up on it (and went through uncounted) must not count
 * when Redis resumes. Such a command answers {-1, 0}.
 */
const LATE = `
local t = redis.call('TIME')
if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > tonumber(ARGV[2]) then return {-1, 0} end`;

// One atomic round trip: count, start the window on the first hit, report the time left.
const HIT_SCRIPT = `${LATE}
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]); ttl = tonumber(ARGV[1]) end
return {n, ttl}`;

// Never DECR a missing key: it would come back as -1 with no expiry, a window that never ends.
const UNDO_SCRIPT = `${LATE}
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n > 0 then return redis.call('DECR', KEYS[1]) end
return 0`;

// Both in one round trip; a key without expiry (PTTL -1) cannot be made by HIT_SCRIPT.
const PEEK_SCRIPT = `
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then return {0, 0} end
return {n, ttl}`;

/** How long a request waits for Redis before it is let through uncounted. */
const REDIS_ANSWER_MS = 250;

/**
 * `p`, or a timeout once `ms` have passed in which this process could have read an answer. A timer
 * that fires late shows that this process itself was stalled (a GC pause, a starved CPU): the
 * command may not even have been written yet, so Redis gets another `ms`, up to four times `ms` in
 * all. An on-time timer still waits one more turn of the event loop (setImmediate runs after
 * pending I/O), so an answer already in the socket is taken instead of being counted as an outage.
 */
function answerWithin<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const start = performance.now();
    let settled = false;
    let timer: NodeJS.Timeout;
    const arm = (): void => {
      const due = performance.now() + ms;
      timer = setTimeout(() => {
        const now = performance.now();
        if (now - due > ms / 2 && now - start < 3 * ms) return arm();
        setImmediate(() => settle(() => reject(new Error(`Redis did not answer within ${Math.round(now - start)} ms`))));
      }, ms);
    };
    const settle = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      fn();
    };
    arm();
    p.then((v) => settle(() => resolve(v)), (err: unknown) => settle(() => reject(err)));
  });
}

/**
 * Redis store shared by every process and machine. Commands are never queued while disconnected,
 * and a request waits at most REDIS_ANSWER_MS for an answer, so a Redis outage surfaces as an error
 * within ~250 ms instead of a hang. `prefix` namespaces every key (the app uses `sluice:<database
 * instance id>:`). ioredis is loaded here, not at start: a server without REDIS_URL never pays its
 * memory.
 */
export async function createRedisRateStore(url: string, log: Logger, prefix: string, onError: () => void = () => {}): Promise<RateStore> {
  const { Redis } = await import('ioredis');
  const redis = new Redis(url, {
    // Only a backstop: it drops commands a frozen Redis never answers. Requests stop waiting far
    // sooner (answerWithin), and ioredis's own timer cannot tell a stall of this process from Redis's.
    commandTimeout: 5000,
    connectTimeout: 1000,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: (times) => Math.min(times * 200, 2000),
    lazyConnect: false,
    // Every API request spends budget here: the hits of one event-loop turn (many, under load) go
    // out in one write instead of one each.
    enableAutoPipelining: true,
  });
  let lastError = 0;
  redis.on('error', (err: Error) => {
    if (Date.now() - lastError > 10_000) log.error({ err: err.message }, 'redis error');
    lastError = Date.now();
  });
  // The first connection gets up to a second; after that an outage fails fast (no offline queue).
  let firstConnect: Promise<void> | null = new Promise<void>((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      firstConnect = null;
      resolve();
    };
    const timer = setTimeout(done, 1000);
    timer.unref();
    redis.once('ready', done);
  });
  redis.defineCommand('sluiceHit', { numberOfKeys: 1, lua: HIT_SCRIPT });
  redis.defineCommand('sluiceUndo', { numberOfKeys: 1, lua: UNDO_SCRIPT });
  redis.defineCommand('sluicePeek', { numberOfKeys: 1, lua: PEEK_SCRIPT });
  const run = redis as unknown as {
    sluiceHit(key: string, windowMs: number, deadline: number): Promise<[number, number]>;
    sluiceUndo(key: string, unused: number, deadline: number): Promise<unknown>;
    sluicePeek(key: string): Promise<[number, number]>;
  };
  // Redis's clock minus ours, read at each (re)connection: deadlines are stamped on Redis's clock,
  // so clocks of several machines need not agree.
  let offsetMs = 0;
  const readOffset = (): void => {
    const before = Date.now();
    redis.time().then(([sec, usec]) => {
      const after = Date.now();
      offsetMs = Number(sec) * 1000 + Math.floor(Number(usec) / 1000) - (before + after) / 2;
    }, () => {});
  };
  redis.on('ready', readOffset);
  /**
   * The latest moment (Redis's clock) a command sent now may still run: the longest its request
   * waits (answerWithin: four times REDIS_ANSWER_MS when this process itself stalls, as the command
   * may not even be written before then).
   */
  const deadline = (): number => Math.ceil(Date.now() + offsetMs + 4 * REDIS_ANSWER_MS);
  /** Every failed command is reported (metrics) before the caller decides to fail open. */
  const counted = async <T>(p: Promise<T>): Promise<T> => {
    try {
      return await answerWithin(p, REDIS_ANSWER_MS);
    } catch (err) {
      onError();
      throw err;
    }
  };
  return {
    kind: 'redis',
    async hit(key, windowMs) {
      if (firstConnect) await firstConnect;
      const [count, resetMs] = await counted(run.sluiceHit(prefix + key, windowMs, deadline()));
      if (count < 0) throw new Error('Redis ran the count after its deadline');
      return { count, resetMs };
    },
    async undo(key) {
      if (firstConnect) await firstConnect;
      await counted(run.sluiceUndo(prefix + key, 0, deadline()));
    },
    async peek(key) {
      if (firstConnect) await firstConnect;
      const [count, resetMs] = await counted(run.sluicePeek(prefix + key));
      return { count, resetMs };
    },
    async ping() {
      if (firstConnect) await firstConnect;
      await counted(redis.ping());
    },
    close: async () => {
      redis.disconnect();
    },
  };
}
