/** The file-system calls whose failures are storage errors (errors.ts maps them to INSUFFICIENT_STORAGE or STORAGE_ERROR). */
export const STORAGE_SYSCALLS: ReadonlySet<string> = new Set([
  'open', 'read', 'write', 'fsync', 'fdatasync', 'close', 'rename', 'unlink', 'mkdir', 'rmdir', 'stat', 'fstat',
  'lstat', 'readdir', 'rm', 'scandir', 'copyfile', 'ftruncate', 'utime', 'futime',
]);
