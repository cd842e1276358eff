// A TCP relay in front of a server, for tests of what crosses the network: it counts the bytes
// each way, and can cut, stall or hold back a connection like a network that goes away.
import net from 'node:net';

export interface Relay {
  readonly port: number;
  /** The connection that carries more than `bytes` upward from now on is destroyed (once). */
  cutNext(bytes: number): void;
  /**
   * The next request whose bytes match `request` has its answer held back, never forwarded: resolves
   * once that answer arrives (the server has done its work, and the client has not heard of it).
   */
  holdAnswer(request: RegExp): Promise<void>;
  cuts(): number;
  /** Bytes carried upward (client to server) and downward since the relay started or `reset()`. */
  up(): number;
  down(): number;
  reset(): void;
  /** Carries nothing more upward on the connection that passes `bytes` more (they are lost); resolves then. */
  stallUpAfter(bytes: number): Promise<void>;
  close(): void;
}

/**
 * A TCP relay in front of the server (BASE_URL names it, so upload URLs go through it too): it can
 * drop one connection mid-PATCH, like a network that goes away.
 */
export function relay(target: () => number): Promise<Relay> {
  let cuts = 0;
  let armed: number | null = null;
  let hold: { request: RegExp; heard: () => void } | null = null;
  let up = 0;
  let down = 0;
  let stall: { left: number; stalled: () => void } | null = null;
  const open = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target(), '127.0.0.1');
    let holding: (() => void) | null = null;
    let lost = false;
    for (const sock of [client, upstream]) {
      open.add(sock);
      sock.on('close', () => open.delete(sock));
    }
    client.on('data', (chunk: Buffer) => {
      if (armed !== null && (armed -= chunk.length) < 0) {
        armed = null;
        cuts++;
        client.destroy();
        upstream.destroy();
        return;
      }
      if (hold && hold.request.test(chunk.toString('latin1'))) {
        holding = hold.heard;
        hold = null;
      }
      if (lost) return;
      if (stall && (stall.left -= chunk.length) <= 0) {
        // The bytes past the mark are lost on the way, as on a network that went away: the client
        // may go on sending, the server hears no more, and either end closing still closes both.
        const keep = chunk.length + stall.left;
        up += keep;
        upstream.write(chunk.subarray(0, keep));
        lost = true;
        stall.stalled();
        stall = null;
        return;
      }
      up += chunk.length;
      if (!upstream.write(chunk)) client.pause();
    });
    upstream.on('drain', () => client.resume());
    upstream.on('data', (chunk: Buffer) => {
      if (holding) return holding();
      down += chunk.length;
      if (!client.write(chunk)) upstream.pause();
    });
    client.on('drain', () => upstream.resume());
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const addr = server.address() as net.AddressInfo;
      resolve({
        port: addr.port,
        cutNext: (bytes) => void (armed = bytes),
        holdAnswer: (request) => new Promise<void>((heard) => void (hold = { request, heard })),
        cuts: () => cuts,
        up: () => up,
        down: () => down,
        reset: () => void (up = down = 0),
        stallUpAfter: (bytes) => new Promise<void>((stalled) => void (stall = { left: bytes, stalled })),
        close: () => {
          server.close();
          // Kept-alive client connections would hold the test process open.
          for (const sock of open) sock.destroy();
        },
      });
    });
  });
}
