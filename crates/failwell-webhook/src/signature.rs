//! The schemes, their verification and the signing of deliveries; see the crate docs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// How a provider signs its deliveries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Stripe's `Stripe-Signature` header.
    Stripe,
    /// The Standard Webhooks specification (Svix and others).
    StandardWebhooks,
    /// GitHub's `X-Hub-Signature-256` header.
    GitHub,
    /// Shopify's `X-Shopify-Hmac-Sha256` header.
    Shopify,
    /// A plain HMAC-SHA256 of the body in one header.
    Hmac {
        /// The header carrying the signature (case-insensitive).
        header: String,
        /// How the signature is written.
        encoding: Encoding,
        /// A prefix before the signature, e.g. `sha256=`.
        prefix: Option<String>,
        /// A header carrying the provider's event id, if any.
        event_id_header: Option<String>,
    },
}

/// How a signature's bytes are written in a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Lower- or upper-case hexadecimal.
    Hex,
    /// Standard base64 with padding.
    Base64,
}

/// Why a delivery was refused. Each variant is a distinct problem for the
/// HTTP answer and a distinct metric label ([`VerifyError::kind`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// A header the scheme needs is absent.
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    /// A header is present but not in the scheme's format.
    #[error("malformed header {header}: {reason}")]
    MalformedHeader {
        /// The header.
        header: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// No signature in the header matches any active secret.
    #[error("no matching signature")]
    NoMatchingSignature,
    /// The signed timestamp is further in the past than the tolerance.
    #[error("stale timestamp: {age_s} s old, tolerance {tolerance_s} s")]
    StaleTimestamp {
        /// How old it is, in s.
        age_s: u64,
        /// The tolerance, in s.
        tolerance_s: u64,
    },
    /// The signed timestamp is further in the future than the tolerance.
    #[error("future timestamp: {ahead_s} s ahead, tolerance {tolerance_s} s")]
    FutureTimestamp {
        /// How far ahead it is, in s.
        ahead_s: u64,
        /// The tolerance, in s.
        tolerance_s: u64,
    },
}

impl VerifyError {
    /// A stable short name: `missing_header`, `malformed_header`,
    /// `bad_signature`, `stale_timestamp` or `future_timestamp`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::MissingHeader(_) => "missing_header",
            Self::MalformedHeader { .. } => "malformed_header",
            Self::NoMatchingSignature => "bad_signature",
            Self::StaleTimestamp { .. } => "stale_timestamp",
            Self::FutureTimestamp { .. } => "future_timestamp",
        }
    }
}

/// A secret that cannot be used with its scheme.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// No secret was given.
    #[error("at least one secret is needed")]
    None,
    /// An empty secret.
    #[error("secret {index} is empty")]
    Empty {
        /// Its position in the list.
        index: usize,
    },
    /// A Standard Webhooks secret that is not base64 after `whsec_`.
    #[error("secret {index} is not base64 after the whsec_ prefix")]
    NotBase64 {
        /// Its position in the list.
        index: usize,
    },
}

/// An accepted delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The provider's event id from the headers, when the scheme has one
    /// (Standard Webhooks `webhook-id`, GitHub `X-GitHub-Delivery`, Shopify
    /// `X-Shopify-Webhook-Id`, a configured header).
    pub event_id: Option<String>,
    /// The signed timestamp, seconds since the Unix epoch (Stripe,
    /// Standard Webhooks).
    pub timestamp: Option<i64>,
}

/// Verifies one integration's deliveries: a scheme, its active secrets
/// (several while rotating) and the timestamp tolerance.
#[derive(Clone)]
pub struct Verifier {
    scheme: Scheme,
    /// HMAC keys, already decoded for the scheme.
    keys: Vec<Vec<u8>>,
    tolerance: Option<Duration>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys are secrets: never printed.
        f.debug_struct("Verifier")
            .field("scheme", &self.scheme)
            .field("secrets", &self.keys.len())
            .field("tolerance", &self.tolerance)
            .finish()
    }
}

impl Verifier {
    /// A verifier for `scheme` with `secrets` as configured (Standard
    /// Webhooks secrets are `whsec_` + base64, or bare base64; the others are
    /// used literally). `tolerance`: how far a signed timestamp may be from
    /// `now` on either side (`None` disables the check; schemes without a
    /// timestamp ignore it). Errors when there is no secret, one is empty, or
    /// a Standard Webhooks secret is not base64.
    pub fn new(scheme: Scheme, secrets: &[String], tolerance: Option<Duration>) -> Result<Self, SecretError> {
        if secrets.is_empty() {
            return Err(SecretError::None);
        }
        let keys = secrets
            .iter()
            .enumerate()
            .map(|(index, secret)| hmac_key(&scheme, secret, index))
            .collect::<Result<_, _>>()?;
        Ok(Self { scheme, keys, tolerance })
    }

    /// Verifies a delivery: `headers` as received, `body` byte for byte,
    /// `now` the current time. See [`VerifyError`] for the refusals.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<Verified, VerifyError> {
        match &self.scheme {
            Scheme::Stripe => self.stripe(headers, body, now),
            Scheme::StandardWebhooks => self.standard(headers, body, now),
            Scheme::GitHub => {
                let header = required(headers, "x-hub-signature-256")?;
                let hex = header
                    .strip_prefix("sha256=")
                    .ok_or_else(|| malformed("x-hub-signature-256", "expected sha256=<hex>"))?;
                let signature = decode_hex("x-hub-signature-256", hex)?;
                self.matches(&[signature], &[body])?;
                Ok(Verified { event_id: optional(headers, "x-github-delivery"), timestamp: None })
            }
            Scheme::Shopify => {
                let header = required(headers, "x-shopify-hmac-sha256")?;
                let signature = BASE64
                    .decode(header.trim())
                    .map_err(|_| malformed("x-shopify-hmac-sha256", "not base64"))?;
                self.matches(&[signature], &[body])?;
                Ok(Verified { event_id: optional(headers, "x-shopify-webhook-id"), timestamp: None })
            }
            Scheme::Hmac { header, encoding, prefix, event_id_header } => {
                let value = headers
                    .get(header.as_str())
                    .ok_or(VerifyError::MissingHeader("signature"))?
                    .to_str()
                    .map_err(|_| malformed("signature", "not visible ASCII"))?;
                let value = match prefix {
                    Some(p) => value
                        .strip_prefix(p.as_str())
                        .ok_or_else(|| malformed("signature", "the prefix is missing"))?,
                    None => value,
                };
                let signature = match encoding {
                    Encoding::Hex => decode_hex("signature", value)?,
                    Encoding::Base64 => {
                        BASE64.decode(value.trim()).map_err(|_| malformed("signature", "not base64"))?
                    }
                };
                self.matches(&[signature], &[body])?;
                let event_id = event_id_header.as_deref().and_then(|h| optional(headers, h));
                Ok(Verified { event_id, timestamp: None })
            }
        }
    }

    fn stripe(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<Verified, VerifyError> {
        const HEADER: &str = "stripe-signature";
        let value = required(headers, HEADER)?;
        let mut timestamp = None;
        let mut signatures = Vec::new();
        for item in value.split(',') {
            let (key, val) =
                item.trim().split_once('=').ok_or_else(|| malformed(HEADER, "expected key=value items"))?;
            match key {
                "t" if timestamp.is_some() => return Err(malformed(HEADER, "more than one t")),
                "t" => timestamp = Some(parse_timestamp(HEADER, val)?),
                // A v1 that is not hex cannot match; other versions are ignored.
                "v1" => signatures.extend(hex::decode(val).ok()),
                _ => {}
            }
        }
        let timestamp = timestamp.ok_or_else(|| malformed(HEADER, "no t= timestamp"))?;
        if !value.split(',').any(|item| item.trim().starts_with("v1=")) {
            return Err(malformed(HEADER, "no v1= signature"));
        }
        self.fresh(timestamp, now)?;
        self.matches(&signatures, &stripe_signed(&timestamp.to_string(), body))?;
        Ok(Verified { event_id: None, timestamp: Some(timestamp) })
    }

    fn standard(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<Verified, VerifyError> {
        let id = required(headers, "webhook-id")?;
        let raw_timestamp = required(headers, "webhook-timestamp")?;
        let timestamp = parse_timestamp("webhook-timestamp", raw_timestamp)?;
        let value = required(headers, "webhook-signature")?;
        let mut signatures = Vec::new();
        let mut any = false;
        for item in value.split(' ').filter(|s| !s.is_empty()) {
            let (version, signature) = item
                .split_once(',')
                .ok_or_else(|| malformed("webhook-signature", "expected v1,<base64> items"))?;
            if version == "v1" {
                any = true;
                signatures.extend(BASE64.decode(signature).ok());
            }
        }
        if !any {
            return Err(malformed("webhook-signature", "no v1 signature"));
        }
        self.fresh(timestamp, now)?;
        self.matches(&signatures, &standard_signed(id, raw_timestamp, body))?;
        Ok(Verified { event_id: Some(id.to_owned()), timestamp: Some(timestamp) })
    }

    /// `timestamp` (s since the epoch) within the tolerance of `now`.
    fn fresh(&self, timestamp: i64, now: SystemTime) -> Result<(), VerifyError> {
        let Some(tolerance) = self.tolerance else { return Ok(()) };
        let now = match now.duration_since(UNIX_EPOCH) {
            Ok(d) => i128::from(d.as_secs()),
            Err(e) => -i128::from(e.duration().as_secs()),
        };
        let delta = now - i128::from(timestamp);
        let tolerance_s = tolerance.as_secs();
        let beyond = |d: i128| u64::try_from(d).unwrap_or(u64::MAX);
        if delta > i128::from(tolerance_s) {
            return Err(VerifyError::StaleTimestamp { age_s: beyond(delta), tolerance_s });
        }
        if -delta > i128::from(tolerance_s) {
            return Err(VerifyError::FutureTimestamp { ahead_s: beyond(-delta), tolerance_s });
        }
        Ok(())
    }

    /// Whether any of `signatures` is the HMAC of the concatenated `parts`
    /// under any active key, each compared in constant time.
    fn matches(&self, signatures: &[Vec<u8>], parts: &[&[u8]]) -> Result<(), VerifyError> {
        for key in &self.keys {
            let mac = mac(key, parts);
            if signatures.iter().any(|signature| mac.clone().verify_slice(signature).is_ok()) {
                return Ok(());
            }
        }
        Err(VerifyError::NoMatchingSignature)
    }
}

/// The `Stripe-Signature` header value for `body` sent at `timestamp`
/// (seconds since the Unix epoch): `t=<timestamp>,v1=<hex>`, where `<hex>` is
/// the lowercase hex HMAC-SHA256 of `{timestamp}.{body}` keyed with `secret`
/// used literally (the whole `whsec_…` string, not decoded), as described in
/// Stripe's docs, "Verify webhook signatures manually". [`Verifier`] with
/// [`Scheme::Stripe`] and the same secret accepts it.
pub fn stripe_signature(secret: &str, timestamp: u64, body: &[u8]) -> String {
    let timestamp = timestamp.to_string();
    let signature = mac(secret.as_bytes(), &stripe_signed(&timestamp, body)).finalize().into_bytes();
    format!("t={timestamp},v1={}", hex::encode(signature))
}

/// The Standard Webhooks `webhook-signature` header value for the message
/// `id` (the `webhook-id` header) sent at `timestamp` (the `webhook-timestamp`
/// header, seconds since the Unix epoch): `v1,<base64>`, where `<base64>` is
/// the padded standard base64 HMAC-SHA256 of `{id}.{timestamp}.{body}` keyed
/// with `secret` base64-decoded after stripping an optional `whsec_` prefix
/// (standardwebhooks.com specification, "Signature scheme"). [`Verifier`]
/// with [`Scheme::StandardWebhooks`] and the same secret accepts it.
///
/// Errors like [`Verifier::new`] with this one secret: [`SecretError::Empty`]
/// or [`SecretError::NotBase64`], both with `index` 0.
pub fn standard_webhooks_signature(
    secret: &str,
    id: &str,
    timestamp: u64,
    body: &[u8],
) -> Result<String, SecretError> {
    let key = hmac_key(&Scheme::StandardWebhooks, secret, 0)?;
    let signature = mac(&key, &standard_signed(id, &timestamp.to_string(), body)).finalize().into_bytes();
    Ok(format!("v1,{}", BASE64.encode(signature)))
}

/// The HMAC key of `secret` for `scheme`: Standard Webhooks secrets are
/// base64-decoded after an optional `whsec_` prefix, the others used
/// literally. `index` is the secret's position, for the error.
fn hmac_key(scheme: &Scheme, secret: &str, index: usize) -> Result<Vec<u8>, SecretError> {
    // `whsec_` alone is a placeholder, never a secret, in every scheme.
    if secret.is_empty() || secret == "whsec_" {
        return Err(SecretError::Empty { index });
    }
    match scheme {
        Scheme::StandardWebhooks => {
            let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
            let key = BASE64.decode(encoded).map_err(|_| SecretError::NotBase64 { index })?;
            // `whsec_` alone would be an empty key: anyone could sign.
            if key.is_empty() {
                return Err(SecretError::Empty { index });
            }
            Ok(key)
        }
        _ => Ok(secret.as_bytes().to_vec()),
    }
}

/// The bytes Stripe signs, in order: `{timestamp}.{body}`.
fn stripe_signed<'a>(timestamp: &'a str, body: &'a [u8]) -> [&'a [u8]; 3] {
    [timestamp.as_bytes(), b".", body]
}

/// The bytes Standard Webhooks signs, in order: `{id}.{timestamp}.{body}`.
fn standard_signed<'a>(id: &'a str, timestamp: &'a str, body: &'a [u8]) -> [&'a [u8]; 5] {
    [id.as_bytes(), b".", timestamp.as_bytes(), b".", body]
}

/// HMAC-SHA256 keyed with `key` over the concatenated `parts`, not yet finalized.
fn mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC accepts keys of any length (longer ones are hashed first).
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    parts.iter().for_each(|p| mac.update(p));
    mac
}

fn malformed(header: &'static str, reason: &str) -> VerifyError {
    VerifyError::MalformedHeader { header, reason: reason.to_owned() }
}

fn required<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, VerifyError> {
    let mut values = headers.get_all(name).iter();
    let value = values.next().ok_or(VerifyError::MissingHeader(name))?;
    if values.next().is_some() {
        return Err(malformed(name, "given more than once"));
    }
    value.to_str().map_err(|_| malformed(name, "not visible ASCII"))
}

fn optional(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// Plain decimal seconds: digits only (no sign, no fraction, no exponent,
/// not empty), fitting an `i64`.
fn parse_timestamp(header: &'static str, value: &str) -> Result<i64, VerifyError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed(header, "the timestamp must be whole seconds since the Unix epoch"));
    }
    value.parse().map_err(|_| malformed(header, "the timestamp is out of range"))
}

fn decode_hex(header: &'static str, value: &str) -> Result<Vec<u8>, VerifyError> {
    hex::decode(value.trim()).map_err(|_| malformed(header, "not hexadecimal"))
}

#[cfg(test)]
mod tests;
