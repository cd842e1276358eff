import type { Config } from '../config.ts';
import type { Access } from '../routes/deps.ts';
import { AppError } from '../errors.ts';

/**
 * Who may upload with which limits. Until API keys exist every caller is anonymous; a Bearer
 * value on an upload is therefore never an active key (CONTRACT: 401 on uploads).
 */
export function createAccess(config: Config): Access {
  const anonymous = { apiKeyId: null, maxBundleBytes: config.anonMaxBundleBytes, expiryDays: config.anonExpiryDays };
  return {
    async uploaderFor(ctx) {
      const auth = ctx.headers.authorization;
      if (auth !== undefined && /^bearer\s+\S/i.test(auth)) throw new AppError('INVALID_API_KEY');
      return anonymous;
    },
  };
}
