//! `failwell webhook verify`: the server's signature check on the command
//! line, for debugging a provider's signatures.

use std::time::{Duration, SystemTime};

use failwell_webhook::{Encoding, Scheme, SecretError, Verified, Verifier, VerifyError};
use http::header::{InvalidHeaderName, InvalidHeaderValue};
use http::{HeaderMap, HeaderName, HeaderValue};

/// A usage error of `failwell webhook verify`: an argument that cannot be
/// used, named as on the command line.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// `--hmac-encoding` is neither `hex` nor `base64` (the value given).
    #[error("--hmac-encoding {0:?}: expected hex or base64")]
    HmacEncoding(String),
    /// `--tolerance` does not start with a whole number (the value given).
    #[error("--tolerance {0:?}: expected a whole number with an optional unit, e.g. 300s, 5m or 0")]
    ToleranceNumber(String),
    /// `--tolerance` has a unit other than `s`, `m` or `h` (the value given).
    #[error("--tolerance {0:?}: the unit must be s, m or h")]
    ToleranceUnit(String),
    /// A `--secret` cannot be used.
    #[error("--secret")]
    Secret(#[source] SecretError),
    /// A `--header` has no `:` (the argument given).
    #[error("--header {0:?}: expected 'Name: value'")]
    HeaderSyntax(String),
    /// A `--header`'s name is not a header name.
    #[error("--header {line:?}: invalid header name")]
    HeaderName {
        /// The argument given.
        line: String,
        /// Why the name is refused.
        #[source]
        source: InvalidHeaderName,
    },
    /// A `--header`'s value is not a header value.
    #[error("--header {line:?}: invalid header value")]
    HeaderValue {
        /// The argument given.
        line: String,
        /// Why the value is refused.
        #[source]
        source: InvalidHeaderValue,
    },
}

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
) -> Result<Result<Verified, VerifyError>, UsageError> {
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
                other => return Err(UsageError::HmacEncoding(other.to_owned())),
            },
            prefix: args.hmac_prefix.clone(),
            event_id_header: None,
        },
    };
    let tolerance = parse_tolerance(&args.tolerance)?;
    let verifier = Verifier::new(scheme, &args.secrets, tolerance).map_err(UsageError::Secret)?;
    let mut headers = HeaderMap::new();
    for line in &args.headers {
        let (name, value) = line.split_once(':').ok_or_else(|| UsageError::HeaderSyntax(line.clone()))?;
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|source| UsageError::HeaderName { line: line.clone(), source })?;
        let value = HeaderValue::from_str(value.trim())
            .map_err(|source| UsageError::HeaderValue { line: line.clone(), source })?;
        headers.append(name, value);
    }
    Ok(verifier.verify(&headers, body, now))
}

/// `300s`, `5m`, `1h`, `300` (seconds), or `0` (no check).
fn parse_tolerance(text: &str) -> Result<Option<Duration>, UsageError> {
    let trimmed = text.trim();
    let (digits, unit) =
        trimmed.split_at(trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len()));
    let Ok(value) = digits.parse::<u64>() else {
        return Err(UsageError::ToleranceNumber(text.to_owned()));
    };
    let seconds = match unit {
        "" | "s" => value,
        "m" => value.saturating_mul(60),
        "h" => value.saturating_mul(3600),
        _ => return Err(UsageError::ToleranceUnit(text.to_owned())),
    };
    Ok((seconds > 0).then(|| Duration::from_secs(seconds)))
}
