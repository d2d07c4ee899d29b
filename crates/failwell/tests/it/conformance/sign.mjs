// Signs payloads with the official libraries of Stripe, Standard Webhooks
// and GitHub (Octokit) and prints the deliveries as JSON, for failwell's
// conformance tests. Usage: node sign.mjs NOW_UNIX_SECONDS
import Stripe from 'stripe';
import { Webhook } from 'standardwebhooks';
import { sign } from '@octokit/webhooks-methods';

const now = Number(process.argv[2]);
const payloads = [
  '{"id":"evt_1","object":"event","amount":12345678901234567890,"note":"caf\u00e9 \ud83d\ude00 \u65e5\u672c \\u2028"}',
  '{"id":"evt_2","data":{"object":{"id":"ch_1","status":"succeeded"}},"float":1.0000000000000002}',
];
const stripe = new Stripe('sk_test_conformance');
const stripeSecret = 'whsec_conformance_secret';
const swSecret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const ghSecret = "It's a Secret to Everybody";
const cases = [];
for (const [i, payload] of payloads.entries()) {
  for (const [label, at] of [['fresh', now], ['stale', now - 600], ['future', now + 600]]) {
    cases.push({
      label, scheme: 'stripe', secret: stripeSecret, body: payload,
      headers: [['stripe-signature', stripe.webhooks.generateTestHeaderString({ payload, secret: stripeSecret, timestamp: at })]],
    });
    const id = `msg_${i}_${label}`;
    const signature = new Webhook(swSecret).sign(id, new Date(at * 1000), payload);
    cases.push({
      label, scheme: 'standard-webhooks', secret: swSecret, body: payload,
      headers: [['webhook-id', id], ['webhook-timestamp', String(at)], ['webhook-signature', signature]],
    });
  }
  cases.push({
    label: 'fresh', scheme: 'github', secret: ghSecret, body: payload,
    headers: [['x-hub-signature-256', await sign(ghSecret, payload)], ['x-github-delivery', `d-${i}`]],
  });
}
console.log(JSON.stringify(cases));
