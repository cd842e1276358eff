import os from 'node:os';
import { describeLocation, type Config } from '../config.ts';

/** Addresses a person can open: BASE_URL, else localhost and this host's own addresses when listening on all of them. */
export function openAddresses(config: Pick<Config, 'host' | 'baseUrl' | 'baseUrlFollowsPort'>, port: number,
  interfaces: ReturnType<typeof os.networkInterfaces> = os.networkInterfaces()): string[] {
  if (!config.baseUrlFollowsPort) return [`${config.baseUrl}/`];
  const wildcard = config.host === '0.0.0.0' || config.host === '::';
  if (!wildcard) return [`http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}/`];
  const own = Object.values(interfaces)
    .flat()
    .filter((a) => a !== undefined && !a.internal && a.family === 'IPv4')
    .map((a) => `http://${a!.address}:${port}/`);
  return [`http://localhost:${port}/`, ...own];
}

/** Where things live, without credentials: a database URL is shown as its host and database name. */
export function modeLine(config: Pick<Config, 'databaseUrl' | 'redisUrl' | 'dataDir'> & { readonly s3?: Config['s3'] }): string {
  const where = (raw: string, what: string): string => {
    try {
      const u = new URL(raw);
      return `${what} at ${u.host}${u.pathname.length > 1 ? u.pathname : ''}`;
    } catch {
      return what;
    }
  };
  const database = config.databaseUrl ? where(config.databaseUrl, 'PostgreSQL') : `embedded (${config.dataDir}/postgres)`;
  const state = config.redisUrl ? where(config.redisUrl, 'Redis') : 'in-process';
  const storage = config.s3 ? `S3 (${describeLocation(config.s3)})` : `disk (${config.dataDir}/files)`;
  return `database: ${database} · state: ${state} · storage: ${storage}`;
}

/** The short text a person sees on a terminal once the server listens. */
export function banner(config: Config, port: number): string {
  const [first, ...more] = openAddresses(config, port);
  const others = more.length ? `\n  also reachable at ${more.join(', ')}` : '';
  return `Sluice is ready: open ${first}${others}\n  ${modeLine(config)}\n  Stop with Ctrl-C. Settings: see README.md (environment variables).\n`;
}
