import fsp from 'node:fs/promises';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import type nodemailerType from 'nodemailer';

type Transporter = ReturnType<typeof nodemailerType.createTransport>;

/** nodemailer is loaded with the first mail: most servers send few or none, and it is not small. */
function lazyTransport(options: Parameters<typeof nodemailerType.createTransport>[0]): { get(): Promise<Transporter>; close(): void } {
  let made: Promise<Transporter> | undefined;
  let closed = false;
  return {
    get: () => (made ??= import('nodemailer').then(({ default: nm }) => nm.createTransport(options))),
    close() {
      if (closed) return;
      closed = true;
      void made?.then((t) => t.close());
    },
  };
}

export interface Mail {
  readonly to: string;
  readonly subject: string;
  readonly text: string;
  readonly html: string;
  /** Extra header fields (List-Unsubscribe…); names and values are ours, never a client's. */
  readonly headers?: Readonly<Record<string, string>>;
}

/** Hands one finished mail to SMTP or to the .eml outbox; rejects when it was not accepted. */
export interface MailTransport {
  readonly kind: 'smtp' | 'eml';
  send(mail: Mail & { from: string; messageId: string }): Promise<void>;
  close(): void;
}

/**
 * SMTP_URL (smtp:// or smtps://, credentials in the URL) or, by default, one `.eml` file per mail in
 * DATA_DIR/outbox/ — written to a temp name and renamed, so a reader never sees half a message.
 */
export function createMailTransport(opts: { smtpUrl: string | undefined; dataDir: string }): MailTransport {
  if (opts.smtpUrl) {
    const smtp = lazyTransport({
      url: opts.smtpUrl,
      connectionTimeout: 10_000,
      greetingTimeout: 10_000,
      socketTimeout: 30_000,
    });
    return {
      kind: 'smtp',
      async send(mail) {
        await (await smtp.get()).sendMail(mail);
      },
      close: () => smtp.close(),
    };
  }
  const dir = path.join(opts.dataDir, 'outbox');
  const stream = lazyTransport({ streamTransport: true, buffer: true, newline: 'unix' });
  return {
    kind: 'eml',
    async send(mail) {
      const info = (await (await stream.get()).sendMail(mail)) as { message: Buffer };
      await fsp.mkdir(dir, { recursive: true, mode: 0o700 });
      const name = `${new Date().toISOString().replace(/[:.]/g, '-')}-${randomBytes(4).toString('hex')}`;
      const tmp = path.join(dir, `.${name}.tmp`);
      // Durable before the outbox row goes: the file synced, renamed, then its directory synced.
      const fh = await fsp.open(tmp, 'wx', 0o600);
      try {
        await fh.writeFile(info.message);
        await fh.sync();
      } finally {
        await fh.close();
      }
      await fsp.rename(tmp, path.join(dir, `${name}.eml`));
      const d = await fsp.open(dir, 'r');
      try {
        await d.sync();
      } finally {
        await d.close();
      }
    },
    close: () => stream.close(),
  };
}
