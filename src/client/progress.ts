// What a transfer shows: on a terminal, one bar over every byte of the command (bytes, rate, ETA,
// the file at hand); elsewhere (a pipe, a log), one line per file once it is done. Both go to
// stderr, so stdout carries only the answer (the share link, the files written).
import cliProgress from 'cli-progress';
import { humanSize } from '../util/html.ts';

export interface Progress {
  /** A file starts; `from` > 0 when it resumes. */
  file(name: string, size: number, from: number): void;
  /** Bytes of the current file done so far. */
  at(done: number): void;
  /** The current file is complete. */
  fileDone(): void;
  /** A file that was already complete (an earlier run sent it). */
  skip(name: string, size: number): void;
  /** A line for the person watching, above the bar when there is one. */
  note(line: string): void;
  end(): void;
}

/** Bytes per second over the last few seconds, so a stall shows quickly. */
function createRate(): { add(total: number): void; perSecond(): number } {
  const samples: Array<[number, number]> = [];
  return {
    add(total) {
      const now = Date.now();
      samples.push([now, total]);
      while (samples.length > 2 && now - samples[0]![0] > 5000) samples.shift();
    },
    perSecond() {
      if (samples.length < 2) return 0;
      const [t0, b0] = samples[0]!;
      const [t1, b1] = samples[samples.length - 1]!;
      return t1 > t0 ? ((b1 - b0) * 1000) / (t1 - t0) : 0;
    },
  };
}

export function createProgress(o: { total: number; out: NodeJS.WriteStream; verb: string }): Progress {
  let base = 0;
  let current = { name: '', size: 0, from: 0, started: Date.now() };
  let done = 0;
  if (!o.out.isTTY) {
    return {
      file(name, size, from) {
        current = { name, size, from, started: Date.now() };
      },
      at() {},
      fileDone() {
        const secs = Math.max((Date.now() - current.started) / 1000, 0.001);
        const moved = current.size - current.from;
        const resumed = current.from > 0 ? `, resumed at ${humanSize(current.from)}` : '';
        o.out.write(`${o.verb} ${current.name} (${humanSize(current.size)}${resumed}) in ${secs.toFixed(1)} s, ${humanSize(Math.round(moved / secs))}/s\n`);
      },
      skip(name, size) {
        o.out.write(`${o.verb} ${name} (${humanSize(size)}) earlier\n`);
      },
      note(line) {
        o.out.write(`${line}\n`);
      },
      end() {},
    };
  }
  const rate = createRate();
  const bars = new cliProgress.MultiBar(
    {
      stream: o.out,
      hideCursor: true,
      barsize: 24,
      format: ' {bar} {percentage}% | {sent}/{all} | {rate} | ETA {eta_formatted} | {name}',
      etaBuffer: 64,
      fps: 8,
    },
    cliProgress.Presets.shades_classic,
  );
  const payload = (): Record<string, string> => ({
    sent: humanSize(done),
    all: humanSize(o.total),
    rate: `${humanSize(Math.round(rate.perSecond()))}/s`,
    name: current.name,
  });
  const bar = bars.create(Math.max(o.total, 1), 0, payload());
  const show = (): void => {
    rate.add(done);
    bar.update(Math.min(done, o.total), payload());
  };
  return {
    file(name, size, from) {
      current = { name, size, from, started: Date.now() };
      if (from > 0) bars.log(`resuming ${name} at ${humanSize(from)} of ${humanSize(size)}\n`);
      done = base + from;
      show();
    },
    at(n) {
      done = base + n;
      show();
    },
    fileDone() {
      base += current.size;
      done = base;
      show();
    },
    skip(_name, size) {
      base += size;
      done = base;
      show();
    },
    note(line) {
      bars.log(`${line}\n`);
    },
    end() {
      bar.update(Math.min(done, o.total), payload());
      bars.stop();
    },
  };
}
