//! The admin bearer token ([`Token`]): compared in constant time, never
//! printed, and the key of the dashboard's session cookies.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The shortest token accepted, in characters.
pub const MIN_TOKEN_CHARS: usize = 32;

/// The admin bearer token. Compared in constant time (an HMAC-SHA256 tag
/// checked with `Mac::verify_slice`); never printed (`Debug` is redacted).
#[derive(Clone)]
pub struct Token {
    tag: Vec<u8>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// The message every tag is computed over; the token is the HMAC key.
const TAG_MESSAGE: &[u8] = b"failwell admin token";

fn tag_of(secret: &[u8], message: &[u8]) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(message);
    mac
}

/// An admin token too short, or with characters other than visible ASCII.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("must be at least {MIN_TOKEN_CHARS} visible ASCII characters (e.g. `openssl rand -hex 32`)")]
pub struct WeakToken;

impl Token {
    /// Takes `token` as the admin token. Errors: shorter than
    /// [`MIN_TOKEN_CHARS`], or characters other than visible ASCII.
    pub fn new(token: String) -> Result<Self, WeakToken> {
        if token.chars().count() < MIN_TOKEN_CHARS || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(WeakToken);
        }
        Ok(Self { tag: tag_of(token.as_bytes(), TAG_MESSAGE).finalize().into_bytes().to_vec() })
    }

    /// Whether `presented` is the token, in constant time.
    pub fn matches(&self, presented: &str) -> bool {
        tag_of(presented.as_bytes(), TAG_MESSAGE).verify_slice(&self.tag).is_ok()
    }

    /// The dashboard's session cookie value for a session issued at
    /// `issued_s` (s since the Unix epoch): `ISSUED.HEX`, HEX an HMAC-SHA256
    /// tag over the issue time keyed by the token's own tag, so the cookie
    /// never holds the token and cannot be forged or post-dated.
    pub fn session(&self, issued_s: i64) -> String {
        format!("{issued_s}.{}", hex::encode(self.session_tag(issued_s).finalize().into_bytes()))
    }

    /// Whether `cookie` is a [`Self::session`] issued within the last
    /// `lifetime_s` seconds before `now_s` (the tag compared in constant
    /// time).
    pub fn session_matches(&self, cookie: &str, now_s: i64, lifetime_s: i64) -> bool {
        let Some((issued, tag)) = cookie.split_once('.') else { return false };
        let (Ok(issued_s), Ok(bytes)) = (issued.parse::<i64>(), hex::decode(tag)) else { return false };
        (now_s - lifetime_s..=now_s).contains(&issued_s)
            && self.session_tag(issued_s).verify_slice(&bytes).is_ok()
    }

    fn session_tag(&self, issued_s: i64) -> Hmac<Sha256> {
        let mut mac = tag_of(&self.tag, b"failwell ui session ");
        mac.update(issued_s.to_string().as_bytes());
        mac
    }
}

#[cfg(test)]
mod tests {
    use super::Token;

    #[test]
    fn a_session_cookie_is_bound_to_the_token_and_expires() {
        let token = Token::new("a".repeat(32)).unwrap();
        let other = Token::new("b".repeat(32)).unwrap();
        let cookie = token.session(1_000);
        assert!(!cookie.contains(&"a".repeat(32)));
        assert!(token.session_matches(&cookie, 1_000, 60));
        assert!(token.session_matches(&cookie, 1_060, 60));
        assert!(!token.session_matches(&cookie, 1_061, 60), "expired");
        assert!(!token.session_matches(&cookie, 999, 60), "issued in the future");
        assert!(!other.session_matches(&cookie, 1_000, 60), "another token's");
        let (_, tag) = cookie.split_once('.').unwrap();
        assert!(!token.session_matches(&format!("1050.{tag}"), 1_060, 60), "re-dated");
        for broken in ["", ".", "1000", "1000.", "x.00", "1000.zz"] {
            assert!(!token.session_matches(broken, 1_000, 60), "{broken:?}");
        }
    }
}
