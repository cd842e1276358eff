import net from 'node:net';
import fs from 'node:fs';

/** What clamd said of one stream. */
export type Verdict = { readonly kind: 'clean' } | { readonly kind: 'found'; readonly name: string };

/** One file streamed to clamd (INSTREAM) as it arrives. */
export interface ScanStream {
  /**
   * Sends a copy of `chunk` (the caller may reuse its memory at once). False: clamd is behind, send
   * no more until onDrain. Bytes past the scan limit are not sent (see Scanner.maxBytes).
   */
  write(chunk: Uint8Array): boolean;
  onDrain(fn: () => void): void;
  /** Ends the stream and waits for the verdict; rejects with ScanError when clamd could not answer. */
  finish(): Promise<Verdict>;
  /** Drops the connection; safe at any time, more than once. */
  abort(): void;
  /** Set once the connection failed (the upload can be refused at once, before its end). */
  readonly failed: Error | null;
}

export interface Scanner {
  /** Bytes of each file clamd scans: its StreamMaxLength. The rest of a larger file is not scanned. */
  readonly maxBytes: number;
  open(onFail?: (err: Error) => void): ScanStream;
}

export class ScanError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ScanError';
  }
}

/** clamd's own default StreamMaxLength (25M). */
export const CLAMD_DEFAULT_STREAM_MAX = 25 * 1024 * 1024;
/** Frames queued on the socket beyond this make write() say "wait": memory per scan stays bounded. */
const QUEUE_BYTES = 1 << 20;
/** clamd answers INSTREAM chunks of at most this size in one frame each (its StreamMaxLength bounds the sum). */
const FRAME_BYTES = 1 << 20;
/** A verdict slower than this (after the last byte) counts as clamd unreachable. */
const VERDICT_TIMEOUT_MS = 120_000;

/**
 * clamd's StreamMaxLength from its configuration file (`StreamMaxLength 100M`, units k/K, m/M, none:
 * bytes); clamd's default when the file or the line is missing. clamd answers a stream that passes
 * the limit with an error instead of a verdict, so the scanner never sends more than this.
 */
export function streamMaxLength(confPath: string): number {
  let text: string;
  try {
    text = fs.readFileSync(confPath, 'utf8');
  } catch {
    return CLAMD_DEFAULT_STREAM_MAX;
  }
  let value = CLAMD_DEFAULT_STREAM_MAX;
  for (const line of text.split('\n')) {
    const m = /^\s*StreamMaxLength\s+(\d+)\s*([kKmMgG]?)[bB]?\s*$/.exec(line);
    if (!m) continue;
    const unit = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 }[m[2]!.toLowerCase() as '' | 'k' | 'm' | 'g'];
    value = Number(m[1]) * unit;
  }
  // 0 means "no limit" to clamd; its protocol caps a stream at 4 GB anyway.
  return value === 0 ? 4 * 1024 ** 3 - 1 : value;
}

/** `unix:///run/clamav/clamd.ctl` or `tcp://host:3310` as net.connect options. */
export function clamdAddress(url: string): net.NetConnectOpts {
  const u = new URL(url);
  if (u.protocol === 'unix:') return { path: decodeURIComponent(u.pathname) };
  return { host: u.hostname.replace(/^\[|\]$/g, ''), port: Number(u.port) };
}

/** Parses clamd's reply to INSTREAM (`stream: OK`, `stream: Eicar-Signature FOUND`, `… ERROR`). */
export function parseReply(reply: string): Verdict {
  const r = reply.replace(/\0/g, '').trim();
  const found = /^stream: (.+) FOUND$/.exec(r);
  if (found) return { kind: 'found', name: found[1]! };
  if (r === 'stream: OK') return { kind: 'clean' };
  throw new ScanError(`clamd: ${r || 'no answer'}`);
}

export function createScanner(opts: { url: string; maxBytes: number }): Scanner {
  const address = clamdAddress(opts.url);
  return {
    maxBytes: opts.maxBytes,
    open(onFail) {
      const socket = net.connect(address);
      let failed: Error | null = null;
      let sent = 0;
      let ended = false;
      const replies: Buffer[] = [];
      let closed = false;
      let settle: (() => void) | null = null;
      const fail = (err: Error): void => {
        if (failed) return;
        failed = err instanceof ScanError ? err : new ScanError(`clamd unreachable: ${err.message}`, { cause: err });
        onFail?.(failed);
        settle?.();
      };
      socket.setNoDelay(true);
      socket.on('data', (b: Buffer) => replies.push(b));
      socket.on('error', fail);
      socket.on('close', () => {
        closed = true;
        // An answer before our last frame means clamd gave up on the stream (size limit, error).
        if (!ended && !failed) fail(new ScanError(`clamd closed the stream: ${Buffer.concat(replies).toString('latin1').replace(/\0/g, '').trim() || 'no answer'}`));
        settle?.();
      });
      socket.write('zINSTREAM\0');
      const frame = (data: Uint8Array): void => {
        const buf = Buffer.allocUnsafe(4 + data.length);
        buf.writeUInt32BE(data.length, 0);
        buf.set(data, 4);
        socket.write(buf);
      };
      return {
        get failed() {
          return failed;
        },
        write(chunk) {
          if (failed || ended || closed) return true;
          const room = opts.maxBytes - sent;
          if (room <= 0) return true;
          const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
          for (let at = 0; at < part.length; at += FRAME_BYTES) frame(part.subarray(at, at + FRAME_BYTES));
          sent += part.length;
          return socket.writableLength < QUEUE_BYTES;
        },
        onDrain(fn) {
          if (failed || closed || socket.writableLength < QUEUE_BYTES) return void setImmediate(fn);
          const go = (): void => {
            socket.off('drain', go);
            socket.off('close', go);
            fn();
          };
          socket.on('drain', go);
          socket.on('close', go);
        },
        async finish() {
          if (!ended && !failed) {
            ended = true;
            socket.end(Buffer.alloc(4)); // the zero-length frame: end of stream
          }
          await new Promise<void>((resolve) => {
            settle = resolve;
            if (closed || failed) resolve();
          });
          settle = null;
          if (failed) throw failed;
          return parseReply(Buffer.concat(replies).toString('latin1'));
        },
        abort() {
          ended = true;
          socket.destroy();
        },
      };
    },
  };
}

/**
 * Runs `finish` with a bound: a clamd that accepts the stream but never answers must not hold an
 * upload forever.
 */
export async function verdictWithin(stream: ScanStream, ms = VERDICT_TIMEOUT_MS): Promise<Verdict> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      stream.abort();
      reject(new ScanError(`clamd gave no verdict within ${ms / 1000} s`));
    }, ms);
  });
  try {
    return await Promise.race([stream.finish(), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
