import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';
import { simpleParser, type ParsedMail } from 'mailparser';
import { after, before } from 'node:test';
import { startServer, type Backend, type TestServer } from './server.ts';

export interface MailSink {
  readonly port: number;
  readonly url: string;
  readonly mails: ParsedMail[];
  /** Waits (up to `ms`) until `n` mails matched `pred` and returns them. */
  waitFor(pred: (m: ParsedMail) => boolean, n?: number, ms?: number): Promise<ParsedMail[]>;
  close(): Promise<void>;
}

/** A real SMTP server on 127.0.0.1 (plain, no auth) whose every accepted mail is parsed with mailparser. */
export async function startMailSink(port = 0): Promise<MailSink> {
  const mails: ParsedMail[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onData(stream, _session, done) {
      simpleParser(stream)
        .then((m) => {
          mails.push(m);
          done();
        })
        .catch(done);
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  const bound = (server.server.address() as AddressInfo).port;
  return {
    port: bound,
    url: `smtp://127.0.0.1:${bound}`,
    mails,
    async waitFor(pred, n = 1, ms = 15_000) {
      const deadline = Date.now() + ms;
      for (;;) {
        const hits = mails.filter(pred);
        if (hits.length >= n) return hits;
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${n} mail(s); have: ${mails.map((m) => m.subject).join(' | ')}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    close: () => new Promise((r) => server.close(() => r())),
  };
}

/**
 * For a suite: a mail sink and a server mailing into it, started before its tests and closed after
 * them; `got` receives both once started.
 */
export function serverWithMailSink(backend: Backend, got: (srv: TestServer, smtp: MailSink) => void): void {
  let srv: TestServer | undefined;
  let smtp: MailSink | undefined;
  before(async () => {
    smtp = await startMailSink();
    srv = await startServer(backend, { SMTP_URL: smtp.url });
    got(srv, smtp);
  });
  after(async () => {
    await srv?.close();
    await smtp?.close();
  });
}
