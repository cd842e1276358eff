import type { Route } from '../../http/server.ts';
import type { Deps } from '../../deps.ts';
import type { Console } from './console.ts';

/** The console's keys page (to be built). */
export function adminKeysRoutes(_deps: Deps, _c: Console): Route[] {
  return [];
}
