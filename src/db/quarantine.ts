import { AppError } from '../errors.ts';

/**
 * The one quarantine rule, applied where a bundle is looked up by code, token or file id (db/bundles.ts,
 * db/tus-uploads.ts): a quarantined bundle answers 451 on every path, before any other check, so nothing
 * of it (files, names, previews, its manage page) is served or changed. Its rows and files stay.
 */
export function refuseQuarantined<T extends object>(row: T | undefined): T | undefined {
  if (row !== undefined && (row as { quarantined_at?: Date | null }).quarantined_at != null) throw new AppError('UNAVAILABLE_FOR_LEGAL_REASONS');
  return row;
}
