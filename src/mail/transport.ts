import fsp from 'node:fs/promises';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import nodemailer from 'nodemailer';

export interface Mail {
  readonly to: string;
  readonly subject: string;
  readonly text: string;
  readonly html: string;
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
    const smtp = nodemailer.createTransport({
      url: opts.smtpUrl,
      connectionTimeout: 10_000,
      greetingTimeout: 10_000,
      socketTimeout: 30_000,
    });
    return {
      kind: 'smtp',
      async send(mail) {
        await smtp.sendMail(mail);
      },
      close: () => smtp.close(),
    };
  }
  const dir = path.join(opts.dataDir, 'outbox');
  const stream = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'unix' });
  return {
    kind: 'eml',
    async send(mail) {
      const info = (await stream.sendMail(mail)) as { message: Buffer };
      await fsp.mkdir(dir, { recursive: true, mode: 0o700 });
      const name = `${new Date().toISOString().replace(/[:.]/g, '-')}-${randomBytes(4).toString('hex')}`;
      const tmp = path.join(dir, `.${name}.tmp`);
      await fsp.writeFile(tmp, info.message, { mode: 0o600 });
      await fsp.rename(tmp, path.join(dir, `${name}.eml`));
    },
    close: () => stream.close(),
  };
}
