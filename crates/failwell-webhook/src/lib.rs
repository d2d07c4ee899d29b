//! Webhook signatures: the schemes providers sign deliveries with, verified
//! over the raw request bytes.
//!
//! A [`Verifier`] holds a [`Scheme`], the integration's active secrets
//! (several during a rotation) and the timestamp tolerance; [`Verifier::verify`]
//! takes the request's headers, its body exactly as received, and `now`,
//! and either accepts the delivery (with the provider's event id when the
//! scheme carries one) or says precisely why not ([`VerifyError`]). Nothing
//! here parses or re-serialises the body: the signature covers the bytes,
//! so emoji, CJK, `\u2028` escapes and long numbers verify as sent.
//! [`JsonFields`] then reads single fields (the event id, a reference) from
//! any valid JSON body, without parsing the rest.
//!
//! Signatures are compared in constant time (`hmac::Mac::verify_slice`).
//!
//! The sending side, for simulators and tests, signs with the same code:
//! [`stripe_signature`] gives a `Stripe-Signature` value and
//! [`standard_webhooks_signature`] a `webhook-signature` value, which the
//! matching [`Verifier`] accepts.
//!
//! | scheme | header(s) | signed bytes | secret |
//! |---|---|---|---|
//! | [`Scheme::Stripe`] | `Stripe-Signature: t=<unix>,v1=<hex>[,v1=…]` | `{t}.{body}` | the `whsec_…` string, literally |
//! | [`Scheme::StandardWebhooks`] | `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64> […]` | `{id}.{timestamp}.{body}` | base64-decoded after stripping `whsec_` |
//! | [`Scheme::GitHub`] | `X-Hub-Signature-256: sha256=<hex>` (event id: `X-GitHub-Delivery`) | the body | literal |
//! | [`Scheme::Shopify`] | `X-Shopify-Hmac-Sha256: <base64>` (event id: `X-Shopify-Webhook-Id`) | the body | literal |
//! | [`Scheme::Hmac`] | a configured header, hex or base64, optional prefix | the body | literal |
//!
//! All are HMAC-SHA256 (RFC 2104). Timestamps (Stripe, Standard Webhooks)
//! must be plain decimal seconds since the Unix epoch and within the
//! tolerance on **both** sides of `now`: stale and future deliveries are
//! refused alike.

mod fields;
mod signature;

pub use fields::{FieldError, JsonFields};

pub use signature::{
    Encoding, Scheme, SecretError, Verified, Verifier, VerifyError, standard_webhooks_signature,
    stripe_signature,
};
