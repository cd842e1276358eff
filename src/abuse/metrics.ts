import { Counter, Histogram, type Registry } from 'prom-client';

/** Counters of malware scans and blocklist refusals, registered on the server's registry. */
export interface AbuseMetrics {
  /** One file's scan ended: clean, found, partial (clean in its first StreamMaxLength bytes), or error. */
  scanned(result: 'clean' | 'found' | 'partial' | 'error'): void;
  /** Seconds from a file's last byte to clamd's verdict: what scanning adds to an upload. */
  scanTime(seconds: number): void;
  blocked(): void;
}

export function createAbuseMetrics(registry: Registry): AbuseMetrics {
  const registers = [registry];
  const scans = new Counter({
    name: 'sluice_malware_scans_total',
    help: 'Files scanned by clamd, by result (partial: larger than StreamMaxLength, clean in the part scanned)',
    labelNames: ['result'] as const,
    registers,
  });
  const detections = new Counter({ name: 'sluice_malware_detections_total', help: 'Uploads refused because clamd found malware', registers });
  const time = new Histogram({
    name: 'sluice_malware_scan_seconds',
    help: "Time from a file's last byte to clamd's verdict",
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers,
  });
  const blocked = new Counter({ name: 'sluice_blocked_uploads_total', help: 'Files refused because their SHA-256 is blocked', registers });
  for (const r of ['clean', 'found', 'partial', 'error'] as const) scans.inc({ result: r }, 0);
  return {
    scanned(result) {
      scans.inc({ result });
      if (result === 'found') detections.inc();
    },
    scanTime: (s) => time.observe(s),
    blocked: () => blocked.inc(),
  };
}
