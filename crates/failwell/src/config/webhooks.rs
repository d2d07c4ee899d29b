//! Validation of `[webhooks.NAME]`: the signature scheme and secrets, where
//! events are forwarded, and how they map to the operations ledger.

use failwell_engine::{ForwardSpec, ProviderSpecs};

use super::raw::{RawForward, RawLedger, RawWebhook};
use super::{Checker, ConfigError};

/// A webhook source, and where its events are forwarded (if anywhere).
pub(super) fn webhook(
    c: &Checker<'_>,
    name: &str,
    w: RawWebhook,
    providers: &ProviderSpecs,
) -> Result<(failwell_engine::WebhookSource, Option<ForwardSpec>), ConfigError> {
    use failwell_webhook::{Encoding, Scheme, Verifier};
    let key = |k: &str| format!("webhooks.{name}.{k}");
    let hmac_only = [
        ("header", &w.header),
        ("encoding", &w.encoding),
        ("prefix", &w.prefix),
        ("event_id_header", &w.event_id_header),
    ];
    if w.scheme != "hmac"
        && let Some((k, _)) = hmac_only.iter().find(|(_, v)| v.is_some())
    {
        return Err(c.invalid(key(k), "only applies to scheme = \"hmac\""));
    }
    let scheme = match w.scheme.as_str() {
        "stripe" => Scheme::Stripe,
        "standard_webhooks" => Scheme::StandardWebhooks,
        "github" => Scheme::GitHub,
        "shopify" => Scheme::Shopify,
        "hmac" => {
            let header = w
                .header
                .ok_or_else(|| c.invalid(key("header"), "scheme = \"hmac\" needs the signature header"))?;
            if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                return Err(c.invalid(key("header"), format!("{header:?} is not a valid header name")));
            }
            let encoding = match w.encoding.as_deref().unwrap_or("hex") {
                "hex" => Encoding::Hex,
                "base64" => Encoding::Base64,
                other => {
                    return Err(
                        c.invalid(key("encoding"), format!("{other:?}: expected \"hex\" or \"base64\""))
                    );
                }
            };
            Scheme::Hmac {
                header: header.to_ascii_lowercase(),
                encoding,
                prefix: w.prefix,
                event_id_header: w.event_id_header.map(|h| h.to_ascii_lowercase()),
            }
        }
        other => {
            return Err(c.invalid(
                key("scheme"),
                format!(
                    "{other:?}: expected \"stripe\", \"standard_webhooks\", \"github\", \"shopify\" or \"hmac\""
                ),
            ));
        }
    };
    let tolerance = (w.tolerance_s > 0).then(|| std::time::Duration::from_secs(w.tolerance_s));
    let verifier =
        Verifier::new(scheme, &w.secrets, tolerance).map_err(|e| c.invalid(key("secrets"), e.to_string()))?;
    if w.max_body_bytes == 0 || w.max_body_bytes > 64 << 20 {
        return Err(c.invalid(key("max_body_bytes"), "must be between 1 and 67108864"));
    }
    let forward = w.forward.map(|f| forward(c, name, f, providers)).transpose()?;
    let source = failwell_engine::WebhookSource {
        verifier,
        event_id_pointer: c.pointer(&key("event_id_pointer"), &w.event_id_pointer)?,
        max_body_bytes: w.max_body_bytes,
        forward: forward.is_some(),
        ledger: w.ledger.map(|l| ledger(c, name, l, providers)).transpose()?,
    };
    Ok((source, forward))
}

/// `[webhooks.NAME.forward]`: the application's endpoint, a configured provider.
fn forward(
    c: &Checker<'_>,
    name: &str,
    f: RawForward,
    providers: &ProviderSpecs,
) -> Result<ForwardSpec, ConfigError> {
    let key = |k: &str| format!("webhooks.{name}.forward.{k}");
    let spec = providers.get(&f.provider).ok_or_else(|| {
        c.invalid(key("provider"), format!("{:?} is not a configured provider", f.provider))
    })?;
    if !f.path.starts_with('/') || spec.base_url.join(&f.path).is_err() {
        return Err(c.invalid(key("path"), format!("{:?} is not a path starting with '/'", f.path)));
    }
    if failwell_webhook::standard_webhooks_signature(&f.secret, "check", 0, b"").is_err() {
        return Err(c.invalid(key("secret"), "expected whsec_ followed by a non-empty base64 key"));
    }
    Ok(ForwardSpec { provider: f.provider, path: f.path, secret: f.secret })
}

/// `[webhooks.NAME.ledger]`: where an event says which operation it is
/// about and what happened to it.
fn ledger(
    c: &Checker<'_>,
    name: &str,
    l: RawLedger,
    providers: &ProviderSpecs,
) -> Result<failwell_engine::LedgerMapping, ConfigError> {
    let key = |k: &str| format!("webhooks.{name}.ledger.{k}");
    if !providers.contains_key(&l.provider) {
        return Err(c.invalid(key("provider"), format!("{:?} is not a configured provider", l.provider)));
    }
    let lists = [("succeeded", &l.succeeded), ("failed", &l.failed), ("in_progress", &l.in_progress)];
    for (i, (k, values)) in lists.iter().enumerate() {
        for (other, others) in &lists[i + 1..] {
            if let Some(shared) = values.iter().find(|v| others.contains(v)) {
                return Err(c.invalid(
                    key(k),
                    format!(
                        "{shared:?} is also in {} (given or by default): a status has one meaning",
                        key(other)
                    ),
                ));
            }
        }
    }
    if l.succeeded.is_empty() && l.failed.is_empty() {
        return Err(c.invalid(key("succeeded"), "succeeded and failed cannot both be empty"));
    }
    // An empty pointer is the whole event: never a reference, status or version.
    let pointer = |k: &str, value: &str| {
        if value.is_empty() {
            return Err(c.invalid(key(k), "must point into the event, e.g. \"/data/object/status\""));
        }
        c.pointer(&key(k), value)
    };
    Ok(failwell_engine::LedgerMapping {
        provider: l.provider,
        reference_pointer: pointer("reference_pointer", &l.reference_pointer)?,
        status_pointer: pointer("status_pointer", &l.status_pointer)?,
        version_pointer: pointer("version_pointer", &l.version_pointer)?,
        type_pointer: pointer("type_pointer", &l.type_pointer)?,
        id_pointer: pointer("id_pointer", &l.id_pointer)?,
        types: l.types,
        succeeded: l.succeeded,
        failed: l.failed,
        in_progress: l.in_progress,
    })
}
