import { vanityUrl } from './vanity.ts';
import { limitJson } from './limits.ts';

/**
 * An upload answer's additions for a bundle given a vanity name or a download limit (the fields
 * themselves are checked with the other bundle fields, bundles/service.ts): `vanity_url` and
 * `max_downloads`, each only when set, so the interface's answers keep exactly their fields.
 */
export function sharingJson(b: { vanity: string | null; max_downloads: number | null }): Record<string, unknown> {
  return { ...(b.vanity ? { vanity_url: vanityUrl(b.vanity) } : {}), ...limitJson(b.max_downloads) };
}
