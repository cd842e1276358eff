import { PLANS, type PlanName } from '../plans.ts';
import { humanSize } from '../util/html.ts';

/** The most any bundle holds: the largest plan's cap. */
export const MOST_ANY_BUNDLE_HOLDS = Math.max(...Object.values(PLANS).map((p) => p.maxBundleBytes));

/** The cap in bytes and in words, as every refusal over it says it. */
const amount = (bytes: number): string => `${bytes} bytes (${humanSize(bytes)})`;

/**
 * What a new bundle over its cap is told: the cap, and how to get a bigger one (an API key, or a
 * larger plan). `plan`: the caller's key's plan; null for a bundle without a key.
 */
export function overCapText(cap: number, plan: PlanName | null): string {
  const who = plan ? `a bundle of this API key's ${PLANS[plan].title} plan` : 'a bundle without an API key';
  const head = `Bundle size limit exceeded: ${who} holds at most ${amount(cap)}.`;
  const bigger = Object.values(PLANS).filter((p) => p.maxBundleBytes > cap).sort((a, b) => a.maxBundleBytes - b.maxBundleBytes);
  if (bigger.length === 0) return `${head} No plan holds more.`;
  const next = bigger[0]!;
  return plan
    ? `${head} The ${next.title} plan holds ${humanSize(next.maxBundleBytes)}: see /api-keys.`
    : `${head} An API key's plan holds ${humanSize(next.maxBundleBytes)} or more: see /api-keys.`;
}

/** What a body longer than any bundle may hold is told, before its caller's plan is known. */
export function beyondEveryPlanText(): string {
  return `Bundle size limit exceeded: no plan's bundle holds more than ${amount(MOST_ANY_BUNDLE_HOLDS)}, and this body is longer.`;
}

/** What an append over the bundle's room is told. */
export function overRoomText(maxBytes: number, room: number): string {
  return `Bundle size limit exceeded: this bundle holds at most ${amount(maxBytes)}, and ${amount(Math.max(0, room))} of it are left.`;
}
