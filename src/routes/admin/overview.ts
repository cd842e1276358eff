import type { Route } from '../../http/server.ts';
import type { Deps } from '../../deps.ts';
import type { Console } from './console.ts';

/** The console's overview page (to be built). */
export function adminOverviewRoutes(_deps: Deps, _c: Console): Route[] {
  return [];
}
