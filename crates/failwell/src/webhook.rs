//! `failwell webhook verify`: the server's signature check on the command
//! line, for debugging a provider's signatures.

use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use failwell_webhook::{Encoding, Scheme, Verified, Verifier, VerifyError};
use http::{HeaderMap, HeaderName, HeaderValue};

/// A scheme as named on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SchemeName {
    /// `Stripe-Signature`.
    Stripe,
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature` (spelled as
    /// in the config; `standard-webhooks` is accepted too).
    #[value(name = "standard_webhooks", alias = "standard-webhooks")]
    StandardWebhooks,
    /// `X-Hub-Signature-256`.
    Github,
    /// `X-Shopify-Hmac-Sha256`.
    Shopify,
    /// A plain HMAC-SHA256 of the body (see `--hmac-header`).
    Hmac,
}

/// What `failwell webhook verify` was given.
#[derive(Clone, Debug, clap::Args)]
pub struct VerifyArgs {
    /// The signature scheme.
    #[arg(long)]
    pub scheme: SchemeName,
    /// An active secret (repeat for several, as during a rotation).
    #[arg(long = "secret", required = true)]
    pub secrets: Vec<String>,
    /// A request header, `Name: value` (repeatable).
    #[arg(long = "header")]
    pub headers: Vec<String>,
    /// How far a signed timestamp may be from now, e.g. `300s`, `5m`; `0`
    /// disables the check.
    #[arg(long, default_value = "300s")]
    pub tolerance: String,
    /// For `--scheme hmac`: the header carrying the signature.
    #[arg(long, default_value = "x-signature")]
    pub hmac_header: String,
    /// For `--scheme hmac`: `hex` or `base64`.
    #[arg(long, default_value = "hex")]
    pub hmac_encoding: String,
    /// For `--scheme hmac`: a prefix before the signature, e.g. `sha256=`.
    #[arg(long)]
    pub hmac_prefix: Option<String>,
}

/// Checks `body` (the raw request bytes) against the arguments at `now`.
/// The outer error is a usage error (bad header syntax, tolerance or
/// secret); the inner result is the verdict.
pub fn verify(
    args: &VerifyArgs,
    body: &[u8],
    now: SystemTime,
) -> anyhow::Result<Result<Verified, VerifyError>> {
    let scheme = match args.scheme {
        SchemeName::Stripe => Scheme::Stripe,
        SchemeName::StandardWebhooks => Scheme::StandardWebhooks,
        SchemeName::Github => Scheme::GitHub,
        SchemeName::Shopify => Scheme::Shopify,
        SchemeName::Hmac => Scheme::Hmac {
            header: args.hmac_header.to_ascii_lowercase(),
            encoding: match args.hmac_encoding.as_str() {
                "hex" => Encoding::Hex,
                "base64" => Encoding::Base64,
                other => bail!("--hmac-encoding {other:?}: expected hex or base64"),
            },
            prefix: args.hmac_prefix.clone(),
            event_id_header: None,
        },
    };
    let tolerance = parse_tolerance(&args.tolerance)?;
    let verifier = Verifier::new(scheme, &args.secrets, tolerance).context("--secret")?;
    let mut headers = HeaderMap::new();
    for line in &args.headers {
        let (name, value) =
            line.split_once(':').with_context(|| format!("--header {line:?}: expected 'Name: value'"))?;
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .with_context(|| format!("--header {line:?}: invalid header name"))?;
        let value = HeaderValue::from_str(value.trim())
            .with_context(|| format!("--header {line:?}: invalid header value"))?;
        headers.append(name, value);
    }
    Ok(verifier.verify(&headers, body, now))
}

/// `300s`, `5m`, `1h`, `300` (seconds), or `0` (no check).
fn parse_tolerance(text: &str) -> anyhow::Result<Option<Duration>> {
    let trimmed = text.trim();
    let (digits, unit) =
        trimmed.split_at(trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len()));
    let Ok(value) = digits.parse::<u64>() else {
        bail!("--tolerance {text:?}: expected a whole number with an optional unit, e.g. 300s, 5m or 0");
    };
    let seconds = match unit {
        "" | "s" => value,
        "m" => value.saturating_mul(60),
        "h" => value.saturating_mul(3600),
        _ => bail!("--tolerance {text:?}: the unit must be s, m or h"),
    };
    Ok((seconds > 0).then(|| Duration::from_secs(seconds)))
}
