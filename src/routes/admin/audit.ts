import type { Route } from '../../http/server.ts';
import type { Deps } from '../../deps.ts';
import type { Console } from './console.ts';

/** The console's audit page (to be built). */
export function adminAuditRoutes(_deps: Deps, _c: Console): Route[] {
  return [];
}
