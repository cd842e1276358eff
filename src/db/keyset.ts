// Keyset paging for the console's lists: a page is the first `size` rows of `size + 1` asked for, and
// the cursor of its last row when there are more (no OFFSET: every page costs the same).

export interface Page<T> {
  readonly rows: T[];
  /** Where the next (older) page starts; null on the last page. */
  readonly next: string | null;
}

export function page<T>(rows: T[], size: number, cursor: (last: T) => string): Page<T> {
  const shown = rows.slice(0, size);
  return { rows: shown, next: rows.length > size ? cursor(shown[shown.length - 1]!) : null };
}

/** A page cursor of an id: a positive integer. */
export const ID_CURSOR_RE = /^[1-9]\d{0,15}$/;
