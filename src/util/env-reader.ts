/**
 * Reads settings from an env map. A bad value is reported to `problems` and replaced by the
 * default, so one pass can report every problem at once.
 */
export interface EnvReader {
  /** Every name read so far, in the order first read. */
  readonly known: ReadonlySet<string>;
  /** Trimmed; undefined when unset or blank. */
  str(name: string): string | undefined;
  /** A whole number from `min` to `max`, or `dflt` when unset. */
  int(name: string, dflt: number, min: number, max?: number): number;
  /** A URL with one of `protocols` (`'https:'`), returned as written. */
  url(name: string, protocols: string[]): string | undefined;
  /** One of `allowed`, case-insensitively, or `dflt` when unset. */
  oneOf<T extends string>(name: string, allowed: readonly T[], dflt: T): T;
}

export function createEnvReader(env: NodeJS.ProcessEnv, problems: string[]): EnvReader {
  const known = new Set<string>();
  const str = (name: string): string | undefined => {
    known.add(name);
    const v = env[name];
    return v === undefined || v.trim() === '' ? undefined : v.trim();
  };
  const int = (name: string, dflt: number, min: number, max = Number.MAX_SAFE_INTEGER): number => {
    const v = str(name);
    if (v === undefined) return dflt;
    if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > max) {
      problems.push(`${name}: expected a whole number from ${min} to ${max}, got ${JSON.stringify(v)}`);
      return dflt;
    }
    return Number(v);
  };
  const url = (name: string, protocols: string[]): string | undefined => {
    const v = str(name);
    if (v === undefined) return undefined;
    try {
      const u = new URL(v);
      if (!protocols.includes(u.protocol)) problems.push(`${name}: expected a ${protocols.join(' or ')} URL`);
    } catch {
      problems.push(`${name}: not a valid URL`);
    }
    return v;
  };
  const oneOf = <T extends string>(name: string, allowed: readonly T[], dflt: T): T => {
    const v = str(name)?.toLowerCase();
    if (v === undefined) return dflt;
    if ((allowed as readonly string[]).includes(v)) return v as T;
    problems.push(`${name}: expected one of ${allowed.join(', ')}, got ${JSON.stringify(v)}`);
    return dflt;
  };
  return { known, str, int, url, oneOf };
}
