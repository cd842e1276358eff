
/** The one table of error codes: HTTP status and the human message sent as `error`. */
export const ERRORS = {
  NOT_FOUND: [404, 'Not found'],
  BUNDLE_NOT_FOUND: [404, 'Bundle not found or expired'],
  FILE_NOT_FOUND: [404, 'File not found or expired'],
  ROUTE_NOT_FOUND: [404, 'No such endpoint'],
  METHOD_NOT_ALLOWED: [405, 'This endpoint does not take that method: see the Allow header'],
  INVALID_SHORT_CODE: [400, 'Invalid short code: expected 5 letters or digits'],
  INVALID_FILE_ID: [400, 'Invalid file id'],
  INVALID_UPLOAD_TOKEN: [403, 'Invalid upload token'],
  UPLOAD_TOKEN_REQUIRED: [401, 'Upload token required'],
  BUNDLE_EXPIRED: [403, 'Bundle has expired'],
  NO_FILES: [400, 'No files uploaded: send one or more files in the files[] field'],
  SIZE_EXCEEDED: [400, 'Bundle size limit exceeded'],
  NOT_MULTIPART: [400, 'Expected a multipart/form-data body'],
  MALFORMED_MULTIPART: [400, 'Malformed multipart body'],
  TOO_MANY_PARTS: [400, 'Too many parts in the multipart body'],
  FIELD_TOO_LONG: [400, 'A form field is too long'],
  INVALID_FIELD: [400, 'Invalid form field'],
  TOO_MANY_FILES: [400, 'A bundle holds at most 10000 files'],
  DESCRIPTION_TOO_LONG: [400, 'description must be at most 1000 characters'],
  INVALID_DESCRIPTION: [400, 'description must not contain NUL characters'],
  INVALID_EMAIL: [400, 'notify_email must be a valid e-mail address of at most 255 characters'],
  AMBIGUOUS_FRAMING: [400, 'Content-Length must be one decimal number and cannot be combined with Transfer-Encoding'],
  INVALID_RANGE: [416, 'Requested range not satisfiable'],
  PRECONDITION_FAILED: [412, 'Precondition failed: this is not the version named by If-Match or If-Unmodified-Since'],
  PAYLOAD_TOO_LARGE: [413, 'Request body too large'],
  INVALID_API_KEY: [401, 'Invalid, expired or revoked API key'],
  RATE_LIMITED: [429, 'Rate limit exceeded'],
  WRONG_PASSWORD: [403, 'Wrong password'],
  CROSS_SITE: [403, 'Form posts from other sites are refused'],
  NOT_OWNER: [404, 'Bundle not found or not owned by this key'],
  INVALID_WEBHOOK: [400, 'Invalid webhook endpoint'],
  TOO_MANY_WEBHOOKS: [409, 'A key has at most 10 webhook endpoints'],
  WEBHOOK_NOT_FOUND: [404, 'Webhook endpoint not found or not owned by this key'],
  BILLING_NOT_CONFIGURED: [503, 'Billing is not configured on this server'],
  WEBHOOK_SIGNATURE_INVALID: [400, 'Invalid Stripe-Signature'],
  WEBHOOK_MALFORMED: [400, 'Signed event is not a usable Stripe event'],
  PAYMENT_PROVIDER_ERROR: [502, 'The payment provider could not be reached; please retry in a moment'],
  STORAGE_ERROR: [500, 'Storage error; please retry in a moment'],
  // A storage error as the interface defines it (500), with its own code and message: retrying at
  // once will not help until an operator frees space.
  INSUFFICIENT_STORAGE: [500, 'The server is out of storage space; please try again later'],
  // The object store could not be reached, timed out or answered with a server error: a passing
  // outage, so the client is told to come back rather than that the server failed.
  STORAGE_UNAVAILABLE: [503, 'File storage is unavailable; please retry in a moment'],
  DATABASE_ERROR: [500, 'Database error; please retry in a moment'],
  INTERNAL: [500, 'Internal server error'],
  UNAVAILABLE: [503, 'Server is shutting down'],
  // A body that kept arriving while its upload waited for storage, past what one request may queue.
  BODY_OVERRUN: [503, 'The server could not take the upload that fast; please retry in a moment'],
  WEBHOOK_TOO_EARLY: [503, 'Event arrived before the purchase it refers to; deliver it again later'],
  // The resumable upload protocol (tus 1.0.0) at /api/v1/tus/, with the statuses it prescribes.
  TUS_VERSION_UNSUPPORTED: [412, 'Tus-Resumable 1.0.0 required'],
  INVALID_HEADER: [400, 'Invalid tus request header'],
  INVALID_METADATA: [400, 'Malformed Upload-Metadata'],
  INVALID_CHECKSUM: [400, 'Malformed Upload-Checksum'],
  CHECKSUM_ALGORITHM_UNSUPPORTED: [400, 'Unsupported checksum algorithm'],
  CHECKSUM_MISMATCH: [460, 'Upload-Checksum does not match the body'],
  INVALID_LENGTH: [400, 'Send either Upload-Length or Upload-Defer-Length: 1'],
  INVALID_CONCAT: [400, 'Malformed Upload-Concat'],
  WRONG_CONTENT_TYPE: [415, 'Content-Type must be application/offset+octet-stream'],
  UPLOAD_NOT_FOUND: [404, 'Upload not found or expired'],
  UPLOAD_UNFINISHED: [404, 'The upload is not finished yet'],
  UPLOAD_LOCKED: [423, 'Another request is writing to this upload'],
  OFFSET_MISMATCH: [409, "Upload-Offset does not match the upload's offset"],
  FINAL_UPLOAD: [403, "A final upload takes no PATCH: its bytes are its partial uploads'"],
  // tus answers a length past the limit with 413, where a multipart upload gets SIZE_EXCEEDED (400).
  UPLOAD_TOO_LARGE: [413, 'Upload-Length or the body goes past the size limit'],
  // Sharing additions (vanity names, download limits, upload requests).
  INVALID_VANITY: [400, 'vanity must be 3 to 48 letters, digits, _ or -, starting with a letter or digit'],
  VANITY_RESERVED: [400, 'vanity names a path this server uses itself: choose another'],
  VANITY_TAKEN: [409, 'vanity is already in use by another bundle'],
  VANITY_NEEDS_KEY: [401, 'vanity URLs need a Premium API key (Authorization: Bearer)'],
  VANITY_NEEDS_PREMIUM: [403, 'vanity URLs are a Premium plan feature'],
  INVALID_JSON: [400, 'Expected a JSON object body'],
  INVALID_MAX_DOWNLOADS: [400, 'max_downloads must be a whole number from 1 to 1000'],
  // The message names the caller's own limit (bundles/expiry.ts); this one stands when it cannot.
  INVALID_EXPIRY: [400, "expires_in_days must be a whole number of days from 1 to your plan's expiry"],
  REQUEST_NOT_FOUND: [404, 'Upload request not found, closed or expired'],
  INVALID_REQUEST_FIELD: [400, 'Invalid upload request field'],
  // Abuse handling (src/abuse/).
  UNAVAILABLE_FOR_LEGAL_REASONS: [451, 'This bundle is unavailable for legal reasons'],
  MALWARE_DETECTED: [422, 'Upload refused: a file was detected as malware'],
  BLOCKED_CONTENT: [422, 'Upload refused: a file matches content blocked on this server'],
  SCANNER_UNAVAILABLE: [503, 'The malware scanner is unavailable; please retry in a moment'],
  INVALID_REASON: [400, 'reason must be one of malware, phishing, copyright, illegal, other'],
  DETAILS_TOO_LONG: [400, 'details must be at most 4000 characters'],
  INVALID_CONTACT: [400, 'contact must be at most 255 characters, without control characters'],
} as const satisfies Record<string, readonly [number, string]>;

export type ErrorCode = keyof typeof ERRORS;

export type Headers = ReadonlyArray<readonly [string, string]>;

export class AppError extends Error {
  readonly status: number;
  /** Headers the error reply carries besides the usual ones (Allow on a 405, Tus-Version on a 412). */
  readonly headers: Headers;
  constructor(readonly code: ErrorCode, message?: string, options?: { cause?: unknown; headers?: Headers }) {
    super(message ?? ERRORS[code][1], options);
    this.name = 'AppError';
    this.status = ERRORS[code][0];
    this.headers = options?.headers ?? [];
  }
}

/** A failed disk operation: a full disk or exhausted quota is INSUFFICIENT_STORAGE, anything else STORAGE_ERROR (both 500). */
export function storageError(err: unknown): AppError {
  if (err instanceof AppError) return err;
  if (isBlobError(err, 'UNAVAILABLE')) return new AppError('STORAGE_UNAVAILABLE', undefined, { cause: err });
  const code = (err as { code?: string } | null)?.code;
  return new AppError(code === 'ENOSPC' || code === 'EDQUOT' ? 'INSUFFICIENT_STORAGE' : 'STORAGE_ERROR', undefined, { cause: err });
}

/** Maps anything thrown to an AppError; unexpected errors become INTERNAL (the caller logs the original). */
export function toAppError(err: unknown): AppError {
  if (err instanceof AppError) return err;
  if (isBlobError(err, 'UNAVAILABLE')) return storageError(err);
  const e = err as { code?: string; errno?: number; syscall?: string } | null;
  if (e && (e.code === 'ENOSPC' || e.code === 'EDQUOT')) return storageError(err);
  if (e && typeof e.code === 'string') {
    // SQLSTATE class 08 (connection), 53 (resources), 57 (operator intervention) and socket errors from the db driver.
    if (/^(08|53|57)/.test(e.code) || e.code === 'CONNECTION_CLOSED' || e.code === 'CONNECTION_ENDED' || e.code === 'CONNECT_TIMEOUT') {
      return new AppError('DATABASE_ERROR', undefined, { cause: err });
    }
    // Besides the object store (whose outages arrive as BlobErrors), only the database and Redis talk
    // over sockets; every file operation is a filesystem call.
    if (e.syscall !== undefined && STORAGE_SYSCALLS.has(e.syscall)) return new AppError('STORAGE_ERROR', undefined, { cause: err });
    if (/^E[A-Z]+$/.test(e.code)) return new AppError('DATABASE_ERROR', undefined, { cause: err });
  }
  return new AppError('INTERNAL', undefined, { cause: err });
}

/**
 * Failure codes a caller may act on. Other errors (EIO, a network failure) pass through unchanged;
 * errno-style codes of the platform (ENOSPC, EDQUOT) are kept on the error's `code`.
 */
export type BlobErrorCode =
  /** read/open of a key that does not exist. */
  | 'NOT_FOUND'
  /** A range starting past the object's end (a range starting exactly at the end is empty). */
  | 'OUT_OF_RANGE'
  /** An object held fewer bytes than the caller was told it has (a truncated file). */
  | 'SHORT'
  /** An append at an offset other than the resumable object's durable one. */
  | 'OFFSET_MISMATCH'
  /** An append to a resumable object that another append in this store is still writing. */
  | 'BUSY'
  /** An append that went past its limit (AppendOptions.limit). */
  | 'TOO_LARGE'
  /** write()/finish() after abort(). */
  | 'ABORTED'
  /** The store could not be reached, timed out or answered with a server error (an object store's outage). */
  | 'UNAVAILABLE';

export class BlobError extends Error {
  constructor(
    readonly code: BlobErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'BlobError';
  }
}

/** True for a BlobError of the given code. */
export const isBlobError = (err: unknown, code: BlobErrorCode): boolean => err instanceof BlobError && err.code === code;

/** The file-system calls whose failures are storage errors (toAppError maps them to INSUFFICIENT_STORAGE or STORAGE_ERROR). */
export const STORAGE_SYSCALLS: ReadonlySet<string> = new Set([
  'open', 'read', 'write', 'fsync', 'fdatasync', 'close', 'rename', 'unlink', 'mkdir', 'rmdir', 'stat', 'fstat',
  'lstat', 'readdir', 'rm', 'scandir', 'copyfile', 'ftruncate', 'utime', 'futime',
]);
