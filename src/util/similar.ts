/**
 * Edit distance with adjacent transpositions (optimal string alignment): PROT is one edit from
 * PORT, as DATABSE_URL is from DATABASE_URL.
 */
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/** The name in `known` that `name` most likely misspells (its case, one edit, two for long names), or null. */
export function resembles(name: string, known: Iterable<string>): string | null {
  let best: string | null = null;
  let bestDistance = Infinity;
  for (const k of known) {
    const limit = k.length >= 8 ? 2 : 1;
    const d = editDistance(name.toUpperCase(), k);
    if (name !== k && d <= limit && d < bestDistance) {
      best = k;
      bestDistance = d;
    }
  }
  return best;
}
