import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import type { Sql } from '../db/client.ts';
import type { FileRow } from '../db/bundles.ts';
import type { Disk } from '../storage/disk.ts';
import type { Ctx } from '../http/context.ts';
import type { UwsBinding } from '../http/uws.ts';

/** Limits that apply to one uploader: anonymous, or the plan of a Bearer key. */
export interface Uploader {
  readonly apiKeyId: number | null;
  readonly maxBundleBytes: number;
  /** null: bundles never expire. */
  readonly expiryDays: number | null;
}

export interface Access {
  /** Who is uploading; throws INVALID_API_KEY for a Bearer value that is not an active key. */
  uploaderFor(ctx: Ctx): Promise<Uploader>;
}

export interface Passwords {
  hash(password: string): Promise<string>;
  verify(password: string, stored: string): Promise<boolean>;
}

/** What every route module is given; nothing is imported as a singleton. */
export interface Deps {
  readonly config: Config;
  readonly log: Logger;
  readonly sql: Sql;
  readonly disk: Disk;
  readonly access: Access;
  readonly passwords: Passwords;
  readonly binding: UwsBinding;
  readonly dbKind: 'postgres' | 'embedded';
}

export const fileJson = (f: FileRow): Record<string, unknown> => ({
  id: f.id,
  name: f.name,
  size: f.size,
  mime_type: f.mime_type,
  download_url: `/api/v1/download/${f.id}`,
});
