// Same-run comparison of two trees (BENCH_TREE_ALT): `sluice` against `sluice-base`, round by round.
import { fixed, median, printTable, type Cell } from './report.ts';

export interface PairedCase {
  /** What was measured, e.g. `256 MiB single`. */
  label: string;
  /** Per-round MB/s of this tree and of the other, in round order. */
  sluice: readonly number[];
  base: readonly number[];
  /** Per-round server CPU seconds per GB of each, when measured: steadier than MB/s while other work shares the cores. */
  sluiceCpu?: readonly number[];
  baseCpu?: readonly number[];
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
  /** Median over rounds of sluice CPU s/GB / sluice-base CPU s/GB (under 1: this tree spends less), and its spread. */
  cpuMedian?: number;
  cpuMin?: number;
  cpuMax?: number;
}

/**
 * Ratios of the runs taken in the same round (the two servers ran back to back, so a load change on the shared
 * machine hits both): their median is the comparison, their spread how far one round can be trusted.
 */
export function pairRounds(c: PairedCase): PairedRatio {
  const rounds = Math.min(c.sluice.length, c.base.length);
  const ratios = Array.from({ length: rounds }, (_, r) => c.sluice[r]! / c.base[r]!);
  const cpuRounds = Math.min(c.sluiceCpu?.length ?? 0, c.baseCpu?.length ?? 0);
  const cpu = Array.from({ length: cpuRounds }, (_, r) => c.sluiceCpu![r]! / c.baseCpu![r]!);
  return {
    cpuMedian: cpuRounds ? median(cpu) : undefined,
    cpuMin: cpuRounds ? Math.min(...cpu) : undefined,
    cpuMax: cpuRounds ? Math.max(...cpu) : undefined,
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
  console.log(
    '\nthis tree (sluice) against BENCH_TREE_ALT (sluice-base), paired by round: ratio = sluice MB/s / sluice-base MB/s;\n' +
      'CPU s/GB ratio = sluice server CPU per GB / sluice-base\'s (under 1: this tree spends less)',
  );
  const rows: Cell[][] = out.map((p) => [
    p.label,
    p.rounds,
    fixed(p.sluiceMbps),
    fixed(p.baseMbps),
    fixed(p.median, 3),
    p.min === undefined ? '' : `${fixed(p.min, 3)}-${fixed(p.max, 3)}`,
    p.ratios.map((x) => fixed(x, 3)).join(' '),
    fixed(p.cpuMedian, 3),
    p.cpuMin === undefined ? '' : `${fixed(p.cpuMin, 3)}-${fixed(p.cpuMax, 3)}`,
  ]);
  printTable(['case', 'rounds', 'sluice MB/s', 'sluice-base MB/s', 'median ratio', 'spread (min-max)', 'per round', 'CPU s/GB ratio', 'CPU spread'], rows);
  return out;
}

/** The upload and download cases: rows of `sluice` and `sluice-base` per size and stream count, when both ran. */
export function compareTreeRows(
  results: ReadonlyArray<{ server: string; size: number; streams: number; runs: ReadonlyArray<{ mbps: number; cpuPerGB: number }> }>,
  label: (size: number, streams: number) => string,
): PairedRatio[] | undefined {
  const cases: PairedCase[] = [];
  for (const c of results.filter((x) => x.server === 'sluice')) {
    const base = results.find((x) => x.server === 'sluice-base' && x.size === c.size && x.streams === c.streams);
    if (base) cases.push({ label: label(c.size, c.streams), ...paired(c.runs, base.runs) });
  }
  return cases.length ? printTreeComparison(cases) : undefined;
}

/** The MB/s and CPU series of two servers' runs, for a PairedCase. */
export function paired(
  sluice: ReadonlyArray<{ mbps: number; cpuPerGB: number }>,
  base: ReadonlyArray<{ mbps: number; cpuPerGB: number }>,
): Omit<PairedCase, 'label'> {
  return {
    sluice: sluice.map((x) => x.mbps),
    base: base.map((x) => x.mbps),
    sluiceCpu: sluice.map((x) => x.cpuPerGB),
    baseCpu: base.map((x) => x.cpuPerGB),
  };
}
