import type { Route } from '../../http/server.ts';
import type { Deps } from '../../deps.ts';
import type { Console } from './console.ts';

/** The console's blocklist page (to be built). */
export function adminBlocklistRoutes(_deps: Deps, _c: Console): Route[] {
  return [];
}
