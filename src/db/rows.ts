/** The rows of bundles and files as queries return them (db/bundles.ts and the readers of its results). */

export interface BundleRow {
  id: number;
  short_code: string;
  upload_token_hash: Uint8Array;
  description: string | null;
  access_password_hash: string | null;
  notify_email: string | null;
  is_encrypted: boolean;
  api_key_id: number | null;
  max_size_bytes: number;
  total_size_bytes: number;
  file_count: number;
  view_count: number;
  created_at: Date;
  expires_at: Date | null;
  /** Set while an operator holds the bundle (db/quarantine.ts): every path answers 451. */
  quarantined_at: Date | null;
  is_expired: boolean;
  /** A Premium bundle's vanity name (sql/0013_vanity.sql). */
  vanity: string | null;
  /** Complete downloads allowed of each file; null: no limit (sql/0014_download_limits.sql). */
  max_downloads: number | null;
}

export interface FileRow {
  id: number;
  bundle_id: number;
  storage_key: string;
  name: string;
  size: number;
  mime_type: string;
  crc32: number;
  download_count: number;
  /** Complete downloads counted against the bundle's max_downloads. */
  downloads_done: number;
  created_at: Date;
}

export interface FileSummary {
  id: number;
  name: string;
  size: number;
  mime_type: string;
  downloads_done: number;
}
