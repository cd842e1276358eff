import os from 'node:os';

/** Who runs a CLI command: `--by NAME`, else the OS user (SUDO_USER first: the person behind sudo). */
export function operatorName(by: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  if (by !== undefined && by.trim() !== '') return by.trim();
  const sudo = env.SUDO_USER;
  if (sudo) return sudo;
  try {
    return os.userInfo().username;
  } catch {
    return env.USER ?? 'unknown';
  }
}
