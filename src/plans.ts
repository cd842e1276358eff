/** The interface counts a GB as 2^30 bytes (its 5 GB tier is 5368709120). */
const GIB = 1024 ** 3;

export type PlanName = 'starter' | 'power' | 'max' | 'premium';

export interface Plan {
  readonly name: PlanName;
  readonly title: string;
  /** Monthly price in USD; the one-time 30-day pass costs the same. */
  readonly price: number;
  /** null: bundles never expire. */
  readonly expiryDays: number | null;
  readonly maxBundleBytes: number;
  readonly requestsPerHour: number;
}

/** The one plan table: limits, pages and billing all read it. */
export const PLANS: Readonly<Record<PlanName, Plan>> = {
  starter: { name: 'starter', title: 'Starter', price: 5, expiryDays: 7, maxBundleBytes: 5 * GIB, requestsPerHour: 300 },
  power: { name: 'power', title: 'Power', price: 25, expiryDays: 21, maxBundleBytes: 50 * GIB, requestsPerHour: 1200 },
  max: { name: 'max', title: 'Max', price: 45, expiryDays: 30, maxBundleBytes: 100 * GIB, requestsPerHour: 1200 },
  // Files never expire; "10 GB per upload" is the bundle cap.
  premium: { name: 'premium', title: 'Premium', price: 19.99, expiryDays: null, maxBundleBytes: 10 * GIB, requestsPerHour: 1200 },
};

export const isPlanName = (s: string): s is PlanName => Object.hasOwn(PLANS, s);
