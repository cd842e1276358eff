import { fileURLToPath } from 'node:url';

/**
 * The package root. This module sits one level below it (src/paths.ts), and so does the compiled
 * start bundle (dist/sluice.mjs) it gets inlined into, so the same expression holds for both.
 * Every file the server reads from its own tree (migrations, static assets, the OpenAPI document,
 * the hash worker) is found from here, never from the importing module's location.
 */
const ROOT_URL = new URL('../', import.meta.url);

export const fromRoot = (relative: string): string => fileURLToPath(new URL(relative, ROOT_URL));
