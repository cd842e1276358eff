import type Stripe from 'stripe';
import type { Config } from '../config.ts';

/**
 * The Stripe API client, or null when billing is not configured (then the library is not even
 * loaded: it would cost every server ~10 MiB of memory). STRIPE_API_URL sends every call to
 * another origin (the test suite's local double); webhooks are verified by the same library.
 */
export async function createStripeClient(config: Config): Promise<Stripe | null> {
  if (!config.stripeSecretKey) return null;
  const { default: StripeClient } = await import('stripe');
  const opts: ConstructorParameters<typeof Stripe>[1] = { maxNetworkRetries: 1, timeout: 20_000, telemetry: false };
  if (config.stripeApiUrl) {
    const u = new URL(config.stripeApiUrl);
    opts.protocol = u.protocol === 'http:' ? 'http' : 'https';
    opts.host = u.hostname;
    opts.port = u.port || (u.protocol === 'http:' ? 80 : 443);
  }
  return new StripeClient(config.stripeSecretKey, opts);
}

export type { Stripe };
