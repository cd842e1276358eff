// `sluice send` and `sluice get`: the command-line client. It talks to a Sluice server over HTTP
// only (tus up, share links down) and shares no code with the server but small pure helpers.
import path from 'node:path';
import os from 'node:os';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { ClientFailure, EXIT, EXIT_HELP } from './failure.ts';
import { originOf } from './http.ts';
import { send } from './send.ts';
import { get } from './get.ts';

export interface ClientEnv {
  readonly SLUICE_SERVER?: string;
  readonly SLUICE_KEY?: string;
  readonly XDG_STATE_HOME?: string;
  readonly HOME?: string;
}

const whole = (min: number, max: number) => (v: string): number => {
  const n = Number(v);
  if (!/^\d+$/.test(v) || n < min || n > max) throw new InvalidArgumentError(`a whole number from ${min} to ${max}`);
  return n;
};

function program(env: ClientEnv, done: (out: string) => void): Command {
  const p = new Command('sluice').exitOverride().configureOutput({ writeErr: (s) => process.stderr.write(s) });
  const key = new Option('--key <key>', 'API key').default(env.SLUICE_KEY ?? null, '$SLUICE_KEY');
  p.command('send')
    .description('upload files (and the files in folders) into one new bundle; prints its share link')
    .argument('<file...>', 'files or folders to send')
    .option('--server <url>', 'the Sluice server ($SLUICE_SERVER)', env.SLUICE_SERVER ?? 'http://localhost:8080')
    .addOption(key)
    .option('--password-file <file>', 'protect the bundle with the password on the first line of this file')
    .option('--expires-days <n>', 'expire after N days (at most what the plan allows)', whole(1, 3650))
    .option('--max-downloads <n>', 'each file can be downloaded in full N times', whole(1, 1000))
    .option('--vanity <name>', 'a named link (Premium keys)')
    .option('--encrypt', 'encrypt end to end with age: the key travels only in the link (#key=…)')
    .addHelpText('after', `\nRun the same command again after an interruption: it resumes.\n\n${EXIT_HELP}`)
    .action(async (files: string[], o) => {
      const stateHome = env.XDG_STATE_HOME || path.join(env.HOME || os.homedir(), '.local', 'state');
      const link = await send(files, {
        origin: originOf(o.server, '--server'),
        key: o.key ?? null,
        passwordFile: o.passwordFile ?? null,
        expiresDays: o.expiresDays ?? null,
        maxDownloads: o.maxDownloads ?? null,
        vanity: o.vanity ?? null,
        encrypt: o.encrypt === true,
        stateDir: path.join(stateHome, 'sluice'),
        out: process.stderr,
      });
      done(`${link}\n`);
    });
  p.command('get')
    .description("download a bundle's files (decrypted when the link has #key=) into a folder; prints the paths written")
    .argument('<link>', 'a share link: http(s)://host/CODE, a vanity link, with #key=… when encrypted')
    .option('-o, --output <dir>', 'where to write', '.')
    .option('--zip', 'one zip of the whole bundle instead of its files')
    .option('--password-file <file>', 'the password of a protected bundle (else it is asked for on a terminal)')
    // Never $SLUICE_KEY: a link may name any server, and the key would go to it.
    .option('--key <key>', "the owner's API key (opens the owner's locked bundle without its password)")
    .addHelpText('after', `\nRun the same command again after an interruption: it resumes.\n\n${EXIT_HELP}`)
    .action(async (link: string, o) => {
      const paths = await get(link, { dir: o.output, zip: o.zip === true, passwordFile: o.passwordFile ?? null, key: o.key ?? null, out: process.stderr });
      done(paths.map((p) => `${p}\n`).join(''));
    });
  return p;
}

/** Runs `sluice send|get …` (`argv` from the command on); resolves with the exit status. */
export async function runClient(argv: readonly string[], env: ClientEnv): Promise<number> {
  let out = '';
  try {
    await program(env, (s) => (out = s)).parseAsync([...argv], { from: 'user' });
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode === 0 ? EXIT.OK : EXIT.USAGE;
    const failure = err instanceof ClientFailure ? err : new ClientFailure(EXIT.USAGE, (err as Error).message);
    process.stderr.write(`sluice: ${failure.message}\n`);
    return failure.exit;
  }
  process.stdout.write(out);
  return EXIT.OK;
}
