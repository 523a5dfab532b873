//! How an authorization fails: the step that failed ([`AuthStep`]) and why, in words that carry
//! no token or secret ([`AuthFailure`]), and how many authorizations one request may start
//! ([`MAX_AUTHORIZATIONS`]).

use rmcp::transport::auth::AuthError;

/// How many authorizations one request may start before its auth error stands (the spec's
/// retry limit: a `403` that no scope satisfies must not loop).
pub const MAX_AUTHORIZATIONS: u32 = 3;

/// Which step of an authorization failed: each is a named [`crate::McpError::Auth`] and, for a tool
/// call, an `auth_failed` outcome with this text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthStep {
    /// Finding the protected-resource or authorization-server metadata.
    Discovery,
    /// Registering the client (or configuring the pre-registered one).
    Registration,
    /// The authorization request (the redirect did not bring a code).
    Authorization,
    /// Exchanging the code for a token.
    Token,
    /// The server still refused after [`MAX_AUTHORIZATIONS`] authorizations.
    RetryLimit,
    /// The authorization server wants a person to log in: the authorization waits for them
    /// ([`AuthFailure::login_url`]); only with [`McpAuth::credentials_file`](super::McpAuth::credentials_file).
    Login,
}

impl AuthStep {
    /// A short name: `discovery`, `registration`, `authorization`, `token`, `retry_limit`,
    /// `login`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthStep::Discovery => "discovery",
            AuthStep::Registration => "registration",
            AuthStep::Authorization => "authorization",
            AuthStep::Token => "token",
            AuthStep::RetryLimit => "retry_limit",
            AuthStep::Login => "login",
        }
    }
}

/// An authorization that failed, at `step`, for `reason` (no token or secret in it), or that
/// waits for a person to log in at `login_url` ([`AuthStep::Login`]).
#[derive(Debug, Clone)]
pub struct AuthFailure {
    /// The step.
    pub step: AuthStep,
    /// Why.
    pub reason: String,
    /// The authorization URL a person opens to log in ([`AuthStep::Login`] only).
    pub login_url: Option<String>,
}

impl std::fmt::Display for AuthFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.login_url {
            Some(url) => write!(
                f,
                "OAuth authorization waits for a person to log in at {url}"
            ),
            None => write!(f, "OAuth {} failed: {}", self.step.as_str(), self.reason),
        }
    }
}

impl std::error::Error for AuthFailure {}

pub(crate) fn fail(step: AuthStep, e: impl std::fmt::Display) -> AuthFailure {
    AuthFailure {
        step,
        reason: e.to_string(),
        login_url: None,
    }
}

/// An auth error's text, without anything that may carry a token.
pub(super) fn token_error(e: &AuthError) -> String {
    match e {
        AuthError::TokenExchangeFailed(_) => "the token endpoint refused the code".into(),
        // rmcp's texts carry the endpoint's `error` and description, never the token.
        AuthError::ClientCredentialsError(reason) => {
            format!("the token endpoint refused the client's credentials: {reason}")
        }
        other => other.to_string(),
    }
}
