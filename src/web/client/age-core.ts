// What the upload page, the share page and the service worker share: age keys, streams and the
// encrypted manifest's format. Browser code: bundled by esbuild (see ../assets.ts), never run by node.
import { Decrypter, Encrypter, generateX25519Identity, identityToRecipient } from 'age-encryption';

/** The stored name of a bundle's encrypted manifest (file names, types, description). */
export const MANIFEST_NAME = 'manifest.age';

export interface ManifestEntry {
  /** The name the file is stored under (`1.age`, …). */
  readonly stored: string;
  readonly name: string;
  readonly type: string;
  readonly size: number;
}

export interface Manifest {
  readonly sluice_manifest: 1;
  readonly description: string | null;
  readonly files: readonly ManifestEntry[];
}

/** A fresh X25519 identity (`AGE-SECRET-KEY-1…`) and its recipient (`age1…`). */
export async function newKey(): Promise<{ identity: string; recipient: string }> {
  const identity = await generateX25519Identity();
  return { identity, recipient: await identityToRecipient(identity) };
}

/** True when `s` looks like an X25519 identity; the decrypter checks the rest. */
export function isIdentity(s: string | null): s is string {
  return s !== null && /^AGE-SECRET-KEY-1[02-9AC-HJ-NP-Z]{58}$/.test(s);
}

/** The identity in a link's fragment (`#key=AGE-SECRET-KEY-1…`), or null. */
export function keyFromHash(hash: string): string | null {
  return new URLSearchParams(hash.replace(/^#/, '')).get('key');
}

/** `file` encrypted to `recipient` as it is read, and the ciphertext's exact length. */
export async function encryptFile(file: Blob, recipient: string): Promise<{ stream: ReadableStream<Uint8Array>; size: number }> {
  const e = new Encrypter();
  e.addRecipient(recipient);
  const stream = await e.encrypt(file.stream() as ReadableStream<Uint8Array>);
  return { stream, size: stream.size(file.size) };
}

/**
 * A reader of `stream` that answers each read with `pieceBytes` (the last piece: what is left),
 * gathered into one buffer. tus-js-client joins what a reader yields by copying, so the cipher's
 * 64 KiB chunks fed to it one by one would cost time quadratic in the tus chunk size.
 */
export function pieces(stream: ReadableStream<Uint8Array>, pieceBytes: number): { read(): Promise<ReadableStreamReadResult<Uint8Array>> } {
  const reader = stream.getReader();
  let carry: Uint8Array | null = null;
  let ended = false;
  return {
    async read() {
      if (ended && !carry) return { done: true, value: undefined };
      const buf = new Uint8Array(pieceBytes);
      let used = 0;
      while (used < pieceBytes) {
        let chunk = carry;
        carry = null;
        if (!chunk) {
          if (ended) break;
          const r = await reader.read();
          if (r.done) {
            ended = true;
            break;
          }
          chunk = r.value;
        }
        const n = Math.min(chunk.length, pieceBytes - used);
        buf.set(chunk.subarray(0, n), used);
        used += n;
        if (n < chunk.length) carry = chunk.subarray(n);
      }
      if (used === 0) return { done: true, value: undefined };
      return { done: false, value: buf.subarray(0, used) };
    },
  };
}

export async function encryptBytes(data: Uint8Array | string, recipient: string): Promise<Uint8Array> {
  const e = new Encrypter();
  e.addRecipient(recipient);
  return e.encrypt(data);
}

function decrypter(identity: string): Decrypter {
  const d = new Decrypter();
  d.addIdentity(identity);
  return d;
}

/**
 * The plaintext of a ciphertext stream. Rejects when the key does not open the header; the stream
 * errors if a chunk was changed or the end is missing, so a damaged file never yields output that
 * looks complete.
 */
export async function decryptStream(identity: string, body: ReadableStream<Uint8Array>): Promise<ReadableStream<Uint8Array> & { size(n: number): number }> {
  return decrypter(identity).decrypt(body);
}

export async function decryptText(identity: string, bytes: Uint8Array): Promise<string> {
  return decrypter(identity).decrypt(bytes, 'text');
}

/** A manifest read back, or null if the JSON is not one (then names are shown as stored). */
export function parseManifest(text: string): Manifest | null {
  let m: unknown;
  try {
    m = JSON.parse(text);
  } catch {
    return null;
  }
  const o = m as Partial<Manifest> | null;
  if (!o || o.sluice_manifest !== 1 || !Array.isArray(o.files)) return null;
  const files = o.files.filter(
    (f) => f && typeof f.stored === 'string' && typeof f.name === 'string' && typeof f.size === 'number',
  ).map((f) => ({ stored: f.stored, name: f.name, type: typeof f.type === 'string' ? f.type : 'application/octet-stream', size: f.size }));
  return { sluice_manifest: 1, description: typeof o.description === 'string' ? o.description : null, files };
}

/** A Content-Disposition value for a download named `name` (any characters). */
export function attachment(name: string): string {
  const ascii = name.replace(/[^\x20-\x7e]|["\\]/g, '_');
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(name)}`;
}

/** A short reason for a failed decryption, for a person. */
export function failure(err: unknown): string {
  const msg = err instanceof Error ? err.message : String(err);
  if (/no identity matched|incorrect identity|identity/i.test(msg)) return 'the key in this link does not open it';
  return `it is damaged or was changed after upload (${msg})`;
}
