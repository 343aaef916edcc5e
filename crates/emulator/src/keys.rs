//! Accounts and their API keys, as spec section 3 and 5 describe them.
//!
//! Only a key's SHA-256 is kept: a created or rotated secret is returned once
//! and cannot be recovered. An account holds at most ten active keys. Revoking
//! (and rotating, which revokes the old key) is permanent at once in the
//! account's view but takes effect on the data routes only after a settable
//! delay, the way the real service propagates it "within about 60 seconds".
//!
//! OAuth access tokens (spec section 5) stand in for a key on the data
//! routes: issued per account with an expiry, shaped as a JWT whose `exp`
//! a client may read, or opaque; the service refuses one past its expiry.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::PlanLimits;
use crate::wire::KEY_PREFIX;

pub const MAX_ACTIVE_KEYS: usize = 10;

/// What an account pays with once its plan's quota window is spent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Credits {
    /// Prepaid balance in millionths of a dollar, so that sums stay exact.
    pub balance_micros: u64,
    pub price_micros_per_request: u64,
}

impl Credits {
    /// A request costs a tenth of a cent unless told otherwise.
    pub const DEFAULT_PRICE_MICROS: u64 = 1_000;

    pub fn usd(balance: f64) -> Credits {
        Credits {
            balance_micros: (balance * 1e6).round().max(0.0) as u64,
            price_micros_per_request: Self::DEFAULT_PRICE_MICROS,
        }
    }

    pub fn balance_usd(&self) -> String {
        format!("{:.2}", self.balance_micros as f64 / 1e6)
    }
}

#[derive(Debug, Clone)]
pub struct Account {
    pub name: String,
    pub plan: PlanLimits,
    /// Keys the account starts with (at most ten are honoured).
    pub keys: Vec<String>,
    pub credits: Option<Credits>,
}

impl Account {
    pub fn new(name: impl Into<String>, plan: PlanLimits, keys: Vec<String>) -> Account {
        Account {
            name: name.into(),
            plan,
            keys,
            credits: None,
        }
    }

    /// `KEY=PLAN[+credits:USD]` as `fdsync emulator --key` takes it, PLAN being
    /// `free`, `build` or `scale:PER_MINUTE[:PER_MONTH]`.
    pub fn from_spec(name: impl Into<String>, spec: &str) -> Result<Account, String> {
        let (key, plan) = spec
            .split_once('=')
            .ok_or_else(|| format!("{spec:?}: expected KEY=PLAN"))?;
        if !key.starts_with(KEY_PREFIX) || key.len() == KEY_PREFIX.len() {
            return Err(format!("{spec:?}: keys begin with {KEY_PREFIX}"));
        }
        let (plan, credits) = match plan.split_once('+') {
            Some((plan, credits)) => {
                let usd = credits
                    .strip_prefix("credits:")
                    .and_then(|usd| usd.parse::<f64>().ok())
                    .filter(|usd| usd.is_finite() && *usd >= 0.0)
                    .ok_or_else(|| {
                        format!("{spec:?}: prepaid credits are written +credits:USD, e.g. +credits:41.20")
                    })?;
                (plan, Some(Credits::usd(usd)))
            }
            None => (plan, None),
        };
        let plan = PlanLimits::parse(plan)
            .ok_or_else(|| format!("{spec:?}: plan {plan:?}: expected free, build or scale:PER_MINUTE[:PER_MONTH]"))?;
        Ok(Account {
            credits,
            ..Account::new(name, plan, vec![key.to_owned()])
        })
    }

    pub fn with_credits(mut self, credits: Credits) -> Account {
        self.credits = Some(credits);
        self
    }
}

/// A key as the account sees it: never the secret.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyInfo {
    pub id: String,
    pub account: String,
    /// The first characters of the secret, enough to tell keys apart.
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// When the data routes stop accepting it.
    pub effective_at: Option<DateTime<Utc>>,
    pub state: &'static str,
}

/// A secret shown once, at creation or rotation.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IssuedKey {
    pub id: String,
    pub account: String,
    pub key: String,
    /// On a rotation, the key it replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaces: Option<KeyInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    UnknownAccount(String),
    UnknownKey(String),
    TooManyKeys { account: String },
    AlreadyRevoked(String),
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyError::UnknownAccount(a) => write!(f, "unknown account '{a}'"),
            KeyError::UnknownKey(k) => write!(f, "unknown key id '{k}'"),
            KeyError::TooManyKeys { account } => write!(
                f,
                "account '{account}' already has {MAX_ACTIVE_KEYS} active keys: revoke one first"
            ),
            KeyError::AlreadyRevoked(k) => write!(f, "key '{k}' is already revoked"),
        }
    }
}

/// An access token shown once, at issue.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IssuedToken {
    pub account: String,
    pub access_token: String,
    pub expires_at: DateTime<Utc>,
}

/// The shape of an issued access token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenShape {
    /// `header.payload.signature`, base64url, the payload carrying `sub`, `exp` and `token_use`.
    Jwt,
    /// Random text that says nothing about itself.
    Opaque,
}

struct KeyRecord {
    id: String,
    account: usize,
    prefix: String,
    created_at: DateTime<Utc>,
    revoked: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

/// Why a presented key was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Unknown,
    Revoked,
    /// An access token past its expiry.
    Expired,
}

pub struct Keyring {
    seed: u64,
    pub(super) accounts: Vec<Account>,
    keys: Vec<KeyRecord>,
    by_hash: HashMap<[u8; 32], usize>,
    revoke_delay: chrono::Duration,
    issued: u64,
    /// Access tokens by their SHA-256: the account and the expiry.
    tokens: HashMap<[u8; 32], (usize, DateTime<Utc>)>,
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

impl Keyring {
    pub fn new(seed: u64, accounts: Vec<Account>, revoke_delay: chrono::Duration, now: DateTime<Utc>) -> Keyring {
        let mut ring = Keyring {
            seed,
            accounts: Vec::new(),
            keys: Vec::new(),
            by_hash: HashMap::new(),
            revoke_delay,
            issued: 0,
            tokens: HashMap::new(),
        };
        for account in accounts {
            let index = ring.accounts.len();
            for key in account.keys.iter().take(MAX_ACTIVE_KEYS) {
                ring.insert(index, key, now);
            }
            ring.accounts.push(Account {
                keys: Vec::new(),
                ..account
            });
        }
        ring
    }

    fn insert(&mut self, account: usize, secret: &str, now: DateTime<Utc>) -> String {
        let id = format!("key_{:04}", self.keys.len() + 1);
        self.by_hash.insert(sha256(secret), self.keys.len());
        self.keys.push(KeyRecord {
            id: id.clone(),
            account,
            prefix: secret.chars().take(KEY_PREFIX.len() + 4).collect(),
            created_at: now,
            revoked: None,
        });
        id
    }

    /// The account a presented key belongs to, if the data routes accept it at `now`.
    pub fn authenticate(&self, secret: &str, now: DateTime<Utc>) -> Result<usize, Refusal> {
        let record = self
            .by_hash
            .get(&sha256(secret))
            .map(|&i| &self.keys[i])
            .ok_or(Refusal::Unknown)?;
        match record.revoked {
            Some((_, effective)) if effective <= now => Err(Refusal::Revoked),
            _ => Ok(record.account),
        }
    }

    /// The account a presented access token belongs to, if it has not expired at `now`.
    pub fn authenticate_token(&self, token: &str, now: DateTime<Utc>) -> Result<usize, Refusal> {
        match self.tokens.get(&sha256(token)) {
            None => Err(Refusal::Unknown),
            Some(&(_, expires_at)) if expires_at <= now => Err(Refusal::Expired),
            Some(&(account, _)) => Ok(account),
        }
    }

    /// Issues an access token for `account`, valid for `ttl` from `now`.
    pub fn issue_token(
        &mut self,
        account: &str,
        ttl: chrono::Duration,
        shape: TokenShape,
        now: DateTime<Utc>,
    ) -> Result<IssuedToken, KeyError> {
        use base64::Engine as _;
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let index = self.account_index(account)?;
        self.issued += 1;
        let signature = Sha256::digest(format!("fdsync-emulator-token:{}:{}", self.seed, self.issued));
        let expires_at = now + ttl;
        let access_token = match shape {
            TokenShape::Jwt => {
                let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
                let claims = serde_json::json!({
                    "sub": account,
                    "exp": expires_at.timestamp(),
                    "iat": now.timestamp(),
                    "token_use": "access",
                    "scope": "data",
                });
                let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
                format!("{header}.{payload}.{}", URL_SAFE_NO_PAD.encode(signature))
            }
            TokenShape::Opaque => format!("at_{}", hex_of(&signature[..20])),
        };
        self.tokens.insert(sha256(&access_token), (index, expires_at));
        Ok(IssuedToken {
            account: account.into(),
            access_token,
            expires_at,
        })
    }

    pub fn account(&self, index: usize) -> &Account {
        &self.accounts[index]
    }

    pub fn account_mut(&mut self, index: usize) -> &mut Account {
        &mut self.accounts[index]
    }

    fn account_index(&self, name: &str) -> Result<usize, KeyError> {
        self.accounts
            .iter()
            .position(|a| a.name == name)
            .ok_or_else(|| KeyError::UnknownAccount(name.into()))
    }

    fn key_index(&self, id: &str) -> Result<usize, KeyError> {
        self.keys
            .iter()
            .position(|k| k.id == id)
            .ok_or_else(|| KeyError::UnknownKey(id.into()))
    }

    fn active_keys(&self, account: usize) -> usize {
        self.keys
            .iter()
            .filter(|k| k.account == account && k.revoked.is_none())
            .count()
    }

    /// Deterministic per seed and issue number, so a rerun hands out the same secrets.
    fn new_secret(&mut self) -> String {
        self.issued += 1;
        let digest = Sha256::digest(format!("fdsync-emulator-key:{}:{}", self.seed, self.issued));
        format!("{KEY_PREFIX}{}", hex_of(&digest[..16]))
    }

    pub fn create(&mut self, account: &str, now: DateTime<Utc>) -> Result<IssuedKey, KeyError> {
        let index = self.account_index(account)?;
        if self.active_keys(index) >= MAX_ACTIVE_KEYS {
            return Err(KeyError::TooManyKeys {
                account: account.into(),
            });
        }
        let secret = self.new_secret();
        let id = self.insert(index, &secret, now);
        Ok(IssuedKey {
            id,
            account: account.into(),
            key: secret,
            replaces: None,
        })
    }

    pub fn revoke(&mut self, id: &str, now: DateTime<Utc>) -> Result<KeyInfo, KeyError> {
        let index = self.key_index(id)?;
        let record = &mut self.keys[index];
        if record.revoked.is_some() {
            return Err(KeyError::AlreadyRevoked(id.into()));
        }
        record.revoked = Some((now, now + self.revoke_delay));
        Ok(self.info(index, now))
    }

    /// Revokes `id` and issues its replacement in one step: there is no moment
    /// when the account has neither, nor one when it has eleven.
    pub fn rotate(&mut self, id: &str, now: DateTime<Utc>) -> Result<IssuedKey, KeyError> {
        let index = self.key_index(id)?;
        if self.keys[index].revoked.is_some() {
            return Err(KeyError::AlreadyRevoked(id.into()));
        }
        let account = self.keys[index].account;
        let replaced = self.revoke(id, now)?;
        let secret = self.new_secret();
        let new_id = self.insert(account, &secret, now);
        Ok(IssuedKey {
            id: new_id,
            account: self.accounts[account].name.clone(),
            key: secret,
            replaces: Some(replaced),
        })
    }

    fn info(&self, index: usize, now: DateTime<Utc>) -> KeyInfo {
        let k = &self.keys[index];
        KeyInfo {
            id: k.id.clone(),
            account: self.accounts[k.account].name.clone(),
            prefix: k.prefix.clone(),
            created_at: k.created_at,
            revoked_at: k.revoked.map(|r| r.0),
            effective_at: k.revoked.map(|r| r.1),
            state: match k.revoked {
                None => "active",
                Some((_, effective)) if effective > now => "revoking",
                Some(_) => "revoked",
            },
        }
    }

    pub fn list(&self, now: DateTime<Utc>) -> Vec<KeyInfo> {
        (0..self.keys.len()).map(|i| self.info(i, now)).collect()
    }

    pub fn set_revoke_delay(&mut self, delay: chrono::Duration) {
        self.revoke_delay = delay;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring() -> (Keyring, DateTime<Utc>) {
        let now = "2026-11-25T12:00:00Z".parse().unwrap();
        let ring = Keyring::new(
            7,
            vec![Account::new("a", PlanLimits::free(), vec!["pk_live_first".into()])],
            chrono::Duration::seconds(60),
            now,
        );
        (ring, now)
    }

    #[test]
    fn revocation_takes_effect_after_the_delay() {
        let (mut ring, now) = ring();
        assert_eq!(ring.authenticate("pk_live_first", now), Ok(0));
        let info = ring.revoke("key_0001", now).unwrap();
        assert_eq!(info.state, "revoking");
        assert_eq!(
            ring.authenticate("pk_live_first", now + chrono::Duration::seconds(59)),
            Ok(0)
        );
        assert_eq!(
            ring.authenticate("pk_live_first", now + chrono::Duration::seconds(60)),
            Err(Refusal::Revoked)
        );
        assert!(matches!(ring.revoke("key_0001", now), Err(KeyError::AlreadyRevoked(_))));
    }

    #[test]
    fn at_most_ten_active_keys_and_rotation_keeps_the_count() {
        let (mut ring, now) = ring();
        for _ in 1..MAX_ACTIVE_KEYS {
            ring.create("a", now).unwrap();
        }
        assert!(matches!(ring.create("a", now), Err(KeyError::TooManyKeys { .. })));
        let rotated = ring.rotate("key_0003", now).unwrap();
        assert_eq!(rotated.replaces.unwrap().id, "key_0003");
        assert_eq!(ring.authenticate(&rotated.key, now), Ok(0));
        assert!(matches!(ring.create("a", now), Err(KeyError::TooManyKeys { .. })));
        ring.revoke("key_0002", now).unwrap();
        ring.create("a", now).unwrap();
    }

    #[test]
    fn only_hashes_are_kept() {
        let (mut ring, now) = ring();
        let issued = ring.create("a", now).unwrap();
        assert!(issued.key.starts_with(KEY_PREFIX));
        let listed = format!("{:?}", ring.list(now));
        assert!(!listed.contains(&issued.key));
        assert!(!listed.contains("pk_live_first"));
    }
}
