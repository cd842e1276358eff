// What the upload page, the share page and the service worker share: age keys, streams and the
// encrypted manifest's format. Browser code: bundled by esbuild (see ../assets.ts), never run by node.
import { Decrypter, Encrypter, generateX25519Identity, identityToRecipient } from 'age-encryption';
export { MANIFEST_MAX, MANIFEST_NAME, parseManifest, type Manifest, type ManifestEntry } from '../../util/age-manifest.ts';

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

/** What tus-js-client asks of a custom `fileReader`'s source. */
export interface TusSource {
  readonly size: number;
  slice(start: number, end: number): Promise<{ value: Uint8Array; done: boolean }>;
  close(): void;
}

/**
 * A tus-js-client `fileReader` over a ciphertext stream: each chunk is read into one buffer, reused
 * for the next (XMLHttpRequest copies a body when sent), so a file of any size costs about one
 * chunk of memory. A PATCH retried after a break is served again from the buffer, from the server's
 * offset; going further back is impossible, and the upload then fails (the page starts the file over).
 */
export function tusFileReader(stream: ReadableStream<Uint8Array>, size: number, chunkBytes: number): { openFile(): Promise<TusSource> } {
  const reader = stream.getReader();
  const buf = new Uint8Array(Math.max(1, Math.min(chunkBytes, size)));
  let start0 = 0;
  let len = 0;
  let carry: Uint8Array | null = null;
  const fill = async (n: number): Promise<number> => {
    let used = 0;
    while (used < n) {
      let chunk = carry;
      carry = null;
      if (!chunk) {
        const r = await reader.read();
        if (r.done) break;
        chunk = r.value;
      }
      const k = Math.min(chunk.length, n - used);
      buf.set(chunk.subarray(0, k), used);
      used += k;
      if (k < chunk.length) carry = chunk.subarray(k);
    }
    return used;
  };
  const source: TusSource = {
    size,
    async slice(start, end) {
      // `done` stays false: tus-js-client finishes when the server's offset reaches the size.
      if (start >= start0 && start < start0 + len) return { value: buf.subarray(start - start0, Math.min(end, start0 + len) - start0), done: false };
      if (start !== start0 + len) throw new Error('the encrypted upload cannot go back to an earlier offset');
      len = await fill(Math.min(end - start, buf.length));
      start0 = start;
      return { value: buf.subarray(0, len), done: false };
    },
    close() {
      reader.cancel().catch(() => {});
    },
  };
  return { openFile: () => Promise.resolve(source) };
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
