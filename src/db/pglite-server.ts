import net from 'node:net';
import type { PGlite } from '@electric-sql/pglite';

/**
 * Serves the embedded PGlite to several PostgreSQL wire-protocol connections on a Unix socket (the
 * server's pool, the CLI, other workers, tests).
 *
 * PGlite is ONE backend session. A connection's extended-protocol exchange (Parse, Bind, Execute,
 * Sync) lives in that session's unnamed statement and portal, so another connection's messages
 * must never run in the middle of it: pglite-socket 0.2.17 queues every message on its own, and
 * under load one connection's Execute ran another's portal ("portal does not exist", or silently
 * the other query's rows). Here each connection's messages run in batches that end at a Sync, a
 * simple Query or a Flush, one batch at a time, and the session stays with a connection while it
 * is inside a transaction block or between a Flush and its Sync. A connection that goes away has
 * its unfinished extended query and transaction rolled back and its prepared statements closed.
 */
export interface PgliteServer {
  close(): Promise<void>;
}

interface Conn {
  readonly sock: net.Socket;
  /** Received bytes not yet framed into whole messages. */
  pending: Buffer;
  /** Whole messages of the batch being collected. */
  collected: Buffer[];
  /** Batches ready to run, in order; each notes its last message type. */
  readonly batches: Array<{ bytes: Buffer; last: string }>;
  started: boolean;
  closed: boolean;
  /** Mid extended query: its last batch ended with a Flush. */
  flushed: boolean;
  /** Named prepared statements it made: they live in the shared session until closed. */
  readonly statements: Set<string>;
}

const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;
const CANCEL_REQUEST = 80877102;
/** No client of ours sends a message anywhere near this; a larger length is a broken stream. */
const MAX_MESSAGE = 1 << 30;
const BATCH_ENDS = new Set(['S', 'Q', 'H']);
const SYNC = Buffer.from([0x53, 0, 0, 0, 4]);
/** Execute on a portal nobody creates: the error makes the Sync after it roll back, not commit. */
const FAIL = message('E', Buffer.concat([Buffer.from('sluice: abandoned\0'), Buffer.alloc(4)]));

export interface PgliteServerOptions {
  /**
   * Called with every NotificationResponse the session produces. PGlite is one session, so a
   * NOTIFY reaches the host only through the output of whichever connection committed it; this
   * is how the host hears of changes made over the socket (the CLI, an operator's psql). The
   * host must have run LISTEN on the session for PostgreSQL to produce them.
   */
  readonly onNotification?: (channel: string, payload: string) => void;
}

export async function servePglite(pg: PGlite, socketPath: string, opts: PgliteServerOptions = {}): Promise<PgliteServer> {
  const conns = new Set<Conn>();
  /** Connections with batches waiting, in arrival order. */
  const waiting: Conn[] = [];
  /** The connection the session belongs to until its transaction or extended query ends. */
  let owner: Conn | null = null;
  let running = false;

  const notified = opts.onNotification;
  const run = (bytes: Buffer, out: ((chunk: Uint8Array) => void) | null): Promise<void> => {
    const scan = notified ? notificationScanner(notified) : null;
    return pg.runExclusive(() =>
      pg.execProtocolRawStream(new Uint8Array(bytes), {
        onRawData: (d) => {
          scan?.(d);
          out?.(d);
        },
      }),
    );
  };

  async function pump(): Promise<void> {
    if (running) return;
    running = true;
    try {
      for (;;) {
        let conn: Conn | undefined;
        if (owner) {
          if (owner.batches.length === 0) return; // the session waits for its owner's next batch
          conn = owner;
        } else {
          conn = waiting.shift();
          if (!conn) return;
          if (conn.batches.length === 0) continue;
        }
        const batch = conn.batches.shift()!;
        const c = conn;
        if (batch.last === 'cleanup') {
          await cleanUp(c, batch.bytes);
          continue;
        }
        await run(batch.bytes, (d) => {
          if (!c.closed && !c.sock.destroyed) c.sock.write(Buffer.from(d));
        }).catch(() => c.sock.destroy());
        c.flushed = batch.last === 'H';
        owner = c.flushed || pg.isInTransaction() ? c : null;
        if (c.batches.length > 0 && owner !== c && !waiting.includes(c)) waiting.push(c);
      }
    } finally {
      running = false;
    }
  }

  /**
   * Leaves the session as if the vanished connection had never been there: an extended query it
   * left open is failed and synced (rolled back, as PostgreSQL does when a client dies before its
   * Sync), its prepared statements are closed, and a transaction block it held is rolled back.
   */
  async function cleanUp(c: Conn, bytes: Buffer): Promise<void> {
    if (bytes.length > 0) await run(bytes, null).catch(() => {});
    if (owner === c) {
      if (pg.isInTransaction()) await run(query('ROLLBACK'), null).catch(() => {});
      owner = null;
    }
    c.flushed = false;
  }

  /** What cleanUp runs for `c`, built when it closes. */
  function cleanupBytes(c: Conn): Buffer {
    const parts: Buffer[] = [];
    if (c.flushed) parts.push(FAIL, SYNC);
    for (const name of c.statements) parts.push(message('C', Buffer.from(`S${name}\0`)));
    if (c.statements.size > 0) parts.push(SYNC);
    return Buffer.concat(parts);
  }

  function frame(c: Conn): void {
    for (;;) {
      const buf = c.pending;
      if (!c.started) {
        if (buf.length < 8) return;
        const len = buf.readInt32BE(0);
        const code = buf.readInt32BE(4);
        if (code === SSL_REQUEST || code === GSSENC_REQUEST) {
          c.sock.write('N');
          c.pending = buf.subarray(8);
          continue;
        }
        if (code === CANCEL_REQUEST || len < 8 || len > MAX_MESSAGE) {
          c.sock.destroy(); // cancelling is not supported; anything else is not PostgreSQL
          return;
        }
        if (buf.length < len) return;
        c.started = true;
        c.pending = buf.subarray(len);
        enqueue(c, Buffer.from(buf.subarray(0, len)), 'startup');
        continue;
      }
      if (buf.length < 5) return;
      const type = String.fromCharCode(buf[0]!);
      const len = buf.readInt32BE(1);
      if (len < 4 || len > MAX_MESSAGE) {
        c.sock.destroy();
        return;
      }
      if (buf.length < 1 + len) return;
      const message = buf.subarray(0, 1 + len);
      c.pending = buf.subarray(1 + len);
      if (type === 'X') {
        c.sock.end(); // Terminate: the session is shared, so it is not passed on
        return;
      }
      // Named statements outlive the connection in the shared session: note them, to close them later.
      if (type === 'P' || type === 'C') {
        const body = message.subarray(5);
        if (type === 'P') {
          const name = body.subarray(0, body.indexOf(0)).toString('utf8');
          if (name !== '') c.statements.add(name);
        } else if (body[0] === 0x53) c.statements.delete(body.subarray(1, body.indexOf(0, 1)).toString('utf8'));
      }
      c.collected.push(Buffer.from(message));
      if (BATCH_ENDS.has(type)) {
        const bytes = Buffer.concat(c.collected);
        c.collected = [];
        enqueue(c, bytes, type);
      }
    }
  }

  function enqueue(c: Conn, bytes: Buffer, last: string): void {
    c.batches.push({ bytes, last });
    if (owner !== c && !waiting.includes(c)) waiting.push(c);
    void pump();
  }

  const server = net.createServer((sock) => {
    const c: Conn = {
      sock, pending: Buffer.alloc(0), collected: [], batches: [], started: false, closed: false, flushed: false, statements: new Set(),
    };
    conns.add(c);
    sock.setNoDelay(true);
    sock.on('data', (d: Buffer) => {
      c.pending = c.pending.length === 0 ? d : Buffer.concat([c.pending, d]);
      frame(c);
    });
    sock.on('error', () => {});
    sock.on('close', () => {
      c.closed = true;
      conns.delete(c);
      // Batches it queued are dropped; one that is running finishes first (the queue is serial).
      c.batches.length = 0;
      if (c.started) enqueue(c, cleanupBytes(c), 'cleanup');
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    close: () =>
      new Promise<void>((resolve) => {
        for (const c of conns) c.sock.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * Follows backend messages across output chunks (a run's output starts and ends on message
 * boundaries) and reports each NotificationResponse ('A': pid, channel, payload). Other messages
 * are skipped by their length without being copied.
 */
function notificationScanner(emit: (channel: string, payload: string) => void): (chunk: Uint8Array) => void {
  const head = Buffer.alloc(5);
  let headFill = 0;
  let bodyLeft = 0;
  let body: Buffer[] | null = null;
  return (chunk) => {
    let i = 0;
    while (i < chunk.length) {
      if (bodyLeft > 0) {
        const n = Math.min(bodyLeft, chunk.length - i);
        body?.push(Buffer.from(chunk.subarray(i, i + n)));
        i += n;
        bodyLeft -= n;
      } else {
        head[headFill++] = chunk[i++]!;
        if (headFill < 5) continue;
        headFill = 0;
        bodyLeft = head.readInt32BE(1) - 4;
        body = head[0] === 0x41 ? [] : null;
      }
      if (bodyLeft === 0 && body) {
        const b = Buffer.concat(body);
        body = null;
        const channelEnd = b.indexOf(0, 4);
        const payloadEnd = b.indexOf(0, channelEnd + 1);
        if (channelEnd > 0 && payloadEnd > channelEnd) {
          try {
            emit(b.toString('utf8', 4, channelEnd), b.toString('utf8', channelEnd + 1, payloadEnd));
          } catch {
            // a listener's failure must not break the query whose output carried the announcement
          }
        }
      }
    }
  };
}

function message(type: string, body: Buffer): Buffer {
  const msg = Buffer.alloc(5 + body.length);
  msg.write(type, 0, 'latin1');
  msg.writeInt32BE(4 + body.length, 1);
  body.copy(msg, 5);
  return msg;
}

/** A simple-protocol Query message. */
const query = (text: string): Buffer => message('Q', Buffer.from(`${text}\0`, 'utf8'));
