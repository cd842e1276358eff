// age on files for the command-line client, through the same library as the browser: a file's
// ciphertext written to disk whole before it is sent (so an interrupted send resumes from bytes that
// stay the same: a new encryption would use a new file key), and a downloaded ciphertext decrypted
// to its real name.
import fs from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Decrypter, Encrypter, generateX25519Identity, identityToRecipient } from 'age-encryption';
import { ClientFailure, EXIT } from './failure.ts';

export async function newKey(): Promise<{ identity: string; recipient: string }> {
  const identity = await generateX25519Identity();
  return { identity, recipient: await identityToRecipient(identity) };
}

const webStream = (file: string): ReadableStream<Uint8Array> => Readable.toWeb(fs.createReadStream(file)) as ReadableStream<Uint8Array>;

/** Writes `dest` durably: through `dest.part`, fsync and rename, so a crash never leaves half of it under its name. */
async function writeDurably(dest: string, body: ReadableStream<Uint8Array>, mode: number): Promise<void> {
  const tmp = `${dest}.part`;
  await pipeline(Readable.fromWeb(body as import('node:stream/web').ReadableStream), fs.createWriteStream(tmp, { mode }));
  const fd = fs.openSync(tmp, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, dest);
}

/** `src` encrypted to `recipient` into `dest`. */
export async function encryptToFile(src: string, dest: string, recipient: string): Promise<void> {
  const e = new Encrypter();
  e.addRecipient(recipient);
  // Ciphertext waiting to be sent is its owner's alone.
  await writeDurably(dest, await e.encrypt(webStream(src)), 0o600);
}

export async function encryptText(text: string, recipient: string): Promise<Buffer> {
  const e = new Encrypter();
  e.addRecipient(recipient);
  return Buffer.from(await e.encrypt(text));
}

function decrypter(identity: string): Decrypter {
  const d = new Decrypter();
  d.addIdentity(identity);
  return d;
}

/** `src` (a downloaded ciphertext) decrypted into `dest`; a wrong key or changed byte fails with status 7. */
export async function decryptToFile(src: string, dest: string, identity: string, name: string): Promise<void> {
  try {
    await writeDurably(dest, await decrypter(identity).decrypt(webStream(src)), 0o666);
  } catch (err) {
    fs.rmSync(`${dest}.part`, { force: true });
    throw new ClientFailure(EXIT.MISMATCH, `${name}: cannot decrypt with the link's key (${(err as Error).message})`);
  }
}

export async function decryptText(bytes: Uint8Array, identity: string): Promise<string> {
  return decrypter(identity).decrypt(bytes, 'text');
}
