// Same-run comparison of two trees (BENCH_TREE_ALT): `sluice` against `sluice-base`, round by round.
import { fixed, median, printTable, type Cell } from './report.ts';

export interface PairedCase {
  /** What was measured, e.g. `256 MiB single`. */
  label: string;
  /** Per-round MB/s of this tree and of the other, in round order. */
  sluice: readonly number[];
  base: readonly number[];
}

export interface PairedRatio {
  label: string;
  rounds: number;
  sluiceMbps?: number;
  baseMbps?: number;
  /** sluice / sluice-base of each round, then their median, least and greatest. */
  ratios: number[];
  median?: number;
  min?: number;
  max?: number;
}

/**
 * Ratios of the runs taken in the same round (the two servers ran back to back, so a load change on the shared
 * machine hits both): their median is the comparison, their spread how far one round can be trusted.
 */
export function pairRounds(c: PairedCase): PairedRatio {
  const rounds = Math.min(c.sluice.length, c.base.length);
  const ratios = Array.from({ length: rounds }, (_, r) => c.sluice[r]! / c.base[r]!);
  return {
    label: c.label,
    rounds,
    sluiceMbps: c.sluice.length ? median(c.sluice) : undefined,
    baseMbps: c.base.length ? median(c.base) : undefined,
    ratios,
    median: rounds ? median(ratios) : undefined,
    min: rounds ? Math.min(...ratios) : undefined,
    max: rounds ? Math.max(...ratios) : undefined,
  };
}

/** Prints the table of paired ratios and returns it for the JSON results. */
export function printTreeComparison(cases: readonly PairedCase[]): PairedRatio[] {
  const out = cases.map(pairRounds);
  console.log('\nthis tree (sluice) against BENCH_TREE_ALT (sluice-base), paired by round: ratio = sluice MB/s / sluice-base MB/s');
  const rows: Cell[][] = out.map((p) => [
    p.label,
    p.rounds,
    fixed(p.sluiceMbps),
    fixed(p.baseMbps),
    fixed(p.median, 3),
    p.min === undefined ? '' : `${fixed(p.min, 3)}-${fixed(p.max, 3)}`,
    p.ratios.map((x) => fixed(x, 3)).join(' '),
  ]);
  printTable(['case', 'rounds', 'sluice MB/s', 'sluice-base MB/s', 'median ratio', 'spread (min-max)', 'per round'], rows);
  return out;
}

/** The upload and download cases: rows of `sluice` and `sluice-base` per size and stream count, when both ran. */
export function compareTreeRows(
  results: ReadonlyArray<{ server: string; size: number; streams: number; runs: ReadonlyArray<{ mbps: number }> }>,
  label: (size: number, streams: number) => string,
): PairedRatio[] | undefined {
  const cases: PairedCase[] = [];
  for (const c of results.filter((x) => x.server === 'sluice')) {
    const base = results.find((x) => x.server === 'sluice-base' && x.size === c.size && x.streams === c.streams);
    if (base) cases.push({ label: label(c.size, c.streams), sluice: c.runs.map((x) => x.mbps), base: base.runs.map((x) => x.mbps) });
  }
  return cases.length ? printTreeComparison(cases) : undefined;
}
