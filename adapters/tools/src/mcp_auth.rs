//! OAuth 2.1 for streamable-HTTP MCP servers (the MCP authorization spec of 2025-11-25), on
//! rmcp's `auth` module: a `401` or `403` with `WWW-Authenticate` starts (or steps up) an
//! authorization, and the request is sent again with the new token.
//!
//! - discovery: protected-resource metadata (from the challenge's `resource_metadata`, else the
//!   well-known paths), then the authorization server's metadata (RFC 8414 and OpenID paths,
//!   with the 2025-03-26 fallbacks), all in rmcp;
//! - the client: pre-registered (`client_id`, `client_secret`), else a client ID metadata
//!   document (`client_metadata_url`, when the server supports them), else dynamic
//!   registration; the token endpoint's auth method (basic, post, none) follows the metadata;
//! - a resource whose metadata names another authorization server than the one the client was
//!   registered with: the client is registered (or configured) anew with the new one;
//! - scopes: the config's, else the challenge's `scope`, else the resource's
//!   `scopes_supported`, else none; a `403 insufficient_scope` asks for the union (step-up);
//! - PKCE S256 always; at most [`MAX_AUTHORIZATIONS`] authorizations per request.
//!
//! The authorization redirect is completed without a browser: the authorization URL is fetched
//! without following redirects, and the code is read from the `Location` it redirects to
//! (authorization servers that approve a known client at once, as the conformance suite's
//! does). A server that wants a person to log in answers otherwise, and the connection fails
//! with [`McpError::Auth`](crate::McpError::Auth) naming that step.
//!
//! Tokens and secrets never appear in errors, logs or `Debug` output.

use rmcp::transport::auth::{
    AuthClient, AuthError, AuthorizationCallback, AuthorizationManager, OAuthClientConfig,
};
use std::sync::Arc;
use tokio::sync::Mutex;

/// How many authorizations one request may start before its auth error stands (the spec's
/// retry limit: a `403` that no scope satisfies must not loop).
pub const MAX_AUTHORIZATIONS: u32 = 3;

/// The redirect URI registered when the config names none.
pub const DEFAULT_REDIRECT_URI: &str = "http://127.0.0.1:8976/callback";

/// `[[mcp]] auth = { ... }`: how to authorize with an OAuth-protected HTTP server.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct McpAuth {
    /// A pre-registered client's ID.
    pub client_id: Option<String>,
    /// The pre-registered client's secret (confidential clients).
    pub client_secret: Option<String>,
    /// The HTTPS URL of this client's ID metadata document, used as its `client_id` where the
    /// authorization server supports them.
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for; empty: what the server's challenge or metadata names.
    pub scopes: Vec<String>,
    /// The redirect URI (default [`DEFAULT_REDIRECT_URI`]).
    pub redirect_uri: Option<String>,
    /// The name given in dynamic registration (default `terminus`).
    pub client_name: Option<String>,
}

impl std::fmt::Debug for McpAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpAuth")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("client_metadata_url", &self.client_metadata_url)
            .field("scopes", &self.scopes)
            .field("redirect_uri", &self.redirect_uri)
            .field("client_name", &self.client_name)
            .finish()
    }
}

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
}

impl AuthStep {
    /// A short name: `discovery`, `registration`, `authorization`, `token`, `retry_limit`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthStep::Discovery => "discovery",
            AuthStep::Registration => "registration",
            AuthStep::Authorization => "authorization",
            AuthStep::Token => "token",
            AuthStep::RetryLimit => "retry_limit",
        }
    }
}

/// An authorization that failed, at `step`, for `reason` (no token or secret in it).
#[derive(Debug, Clone, thiserror::Error)]
#[error("OAuth {} failed: {reason}", step.as_str())]
pub struct AuthFailure {
    /// The step.
    pub step: AuthStep,
    /// Why.
    pub reason: String,
}

fn fail(step: AuthStep, e: impl std::fmt::Display) -> AuthFailure {
    AuthFailure {
        step,
        reason: e.to_string(),
    }
}

/// The HTTP client an authorized transport sends with: it adds the current token.
pub(crate) type AuthHttp = AuthClient<reqwest::Client>;

/// One server's authorization state, shared by its transport (which reads the token) and the
/// retry loops (which authorize).
pub(crate) struct Authorizer {
    config: McpAuth,
    manager: Arc<Mutex<AuthorizationManager>>,
    client: AuthHttp,
    /// Whether a client is configured (then a new challenge is a step-up), and with which
    /// authorization server (its issuer): when the resource names another one, the client is
    /// registered there anew, and nothing of the old one's is sent to it (SEP-2352).
    registered: Mutex<Option<Option<String>>>,
}

impl Authorizer {
    /// An authorizer for the server at `url`, with no token yet.
    pub(crate) async fn new(url: &str, config: McpAuth) -> Result<Authorizer, AuthFailure> {
        let manager = AuthorizationManager::new(url)
            .await
            .map_err(|e| fail(AuthStep::Discovery, e))?;
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| fail(AuthStep::Discovery, e))?;
        let client = AuthClient::new(http, manager);
        Ok(Authorizer {
            config,
            manager: client.auth_manager.clone(),
            client,
            registered: Mutex::new(None),
        })
    }

    /// The HTTP client for the transport.
    pub(crate) fn http(&self) -> AuthHttp {
        self.client.clone()
    }

    /// Answers the server's `WWW-Authenticate` challenge: a first authorization, or a step-up
    /// to the scopes it names.
    pub(crate) async fn authorize(&self, challenge: &str) -> Result<(), AuthFailure> {
        let redirect_uri = self
            .config
            .redirect_uri
            .clone()
            .unwrap_or_else(|| DEFAULT_REDIRECT_URI.to_owned());
        let mut registered = self.registered.lock().await;
        let mut manager = self.manager.lock().await;
        let resolution = manager
            .resolve_metadata_from_challenge(Some(challenge))
            .await
            .map_err(|e| fail(AuthStep::Discovery, e))?;
        let cimd = resolution
            .metadata
            .additional_fields
            .get("client_id_metadata_document_supported")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        let issuer = resolution.metadata.issuer.clone();
        if registered.as_ref().is_some_and(|at| *at != issuer) {
            *registered = None;
        }
        manager.set_metadata(resolution.metadata);
        let challenge_scope = challenge_scope(challenge);
        let scopes: Vec<String> = if !self.config.scopes.is_empty() {
            let mut s = self.config.scopes.clone();
            if let Some(extra) = &challenge_scope {
                for scope in extra.split_whitespace() {
                    if !s.iter().any(|x| x == scope) {
                        s.push(scope.to_owned());
                    }
                }
            }
            s
        } else if registered.is_some() {
            manager.select_scopes(challenge_scope.as_deref(), &[])
        } else {
            manager.select_initial_scopes(&[]).await
        };
        let refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
        if registered.is_none() {
            let client = if let Some(id) = &self.config.client_id {
                let mut c = OAuthClientConfig::new(id.clone(), redirect_uri.clone())
                    .with_scopes(scopes.clone());
                if let Some(secret) = &self.config.client_secret {
                    c = c.with_client_secret(secret.clone());
                }
                c
            } else if let (Some(url), true) = (&self.config.client_metadata_url, cimd) {
                OAuthClientConfig::new(url.clone(), redirect_uri.clone())
                    .with_scopes(scopes.clone())
                    .with_application_type("native")
            } else {
                let name = self.config.client_name.as_deref().unwrap_or("terminus");
                manager
                    .register_client(name, &redirect_uri, &refs)
                    .await
                    .map_err(|e| fail(AuthStep::Registration, e))?
            };
            manager
                .configure_client(client)
                .map_err(|e| fail(AuthStep::Registration, e))?;
            *registered = Some(issuer);
        }
        let url = manager
            .get_authorization_url(&refs)
            .await
            .map_err(|e| fail(AuthStep::Authorization, e))?;
        let callback = follow(&url).await?;
        manager
            .exchange_code_for_token_with_issuer(
                &callback.code,
                &callback.csrf_token,
                callback.issuer.as_deref(),
            )
            .await
            .map_err(|e| fail(AuthStep::Token, token_error(&e)))?;
        Ok(())
    }
}

/// The `scope` parameter of a `WWW-Authenticate` challenge.
fn challenge_scope(challenge: &str) -> Option<String> {
    let at = challenge.find("scope=")?;
    // Not `..._scope=` (as in `error="insufficient_scope"`, which is a value, not a name).
    if at > 0 && !matches!(challenge.as_bytes()[at - 1], b' ' | b',' | b'\t') {
        let rest = &challenge[at + 6..];
        return challenge_scope(rest);
    }
    let rest = &challenge[at + 6..];
    let value = if let Some(quoted) = rest.strip_prefix('"') {
        quoted.split('"').next().unwrap_or_default()
    } else {
        rest.split([',', ' ']).next().unwrap_or_default()
    };
    (!value.is_empty()).then(|| value.to_owned())
}

/// An auth error's text, without anything that may carry a token.
fn token_error(e: &AuthError) -> String {
    match e {
        AuthError::TokenExchangeFailed(_) => "the token endpoint refused the code".into(),
        other => other.to_string(),
    }
}

/// Completes the authorization redirect without a browser: fetch the authorization URL, and
/// read the code from where it redirects.
async fn follow(url: &str) -> Result<AuthorizationCallback, AuthFailure> {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| fail(AuthStep::Authorization, e))?;
    let response = http
        .get(url)
        .send()
        .await
        .map_err(|e| fail(AuthStep::Authorization, e.without_url()))?;
    let status = response.status();
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            fail(
                AuthStep::Authorization,
                format!(
                    "the authorization server answered {status} without a redirect: it wants a \
                     person to log in, which a headless agent cannot do"
                ),
            )
        })?;
    AuthorizationCallback::from_redirect_url(location).map_err(|_| {
        fail(
            AuthStep::Authorization,
            "the authorization redirect brought no code (access denied?)",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_of_a_challenge() {
        assert_eq!(
            challenge_scope(r#"Bearer scope="a b", resource_metadata="x""#).as_deref(),
            Some("a b")
        );
        assert_eq!(
            challenge_scope(r#"Bearer error="insufficient_scope", scope="mcp:admin""#).as_deref(),
            Some("mcp:admin")
        );
        assert_eq!(challenge_scope(r#"Bearer resource_metadata="x""#), None);
    }

    #[test]
    fn the_secret_is_not_in_debug() {
        let auth = McpAuth {
            client_secret: Some("s3cret".into()),
            ..McpAuth::default()
        };
        assert!(!format!("{auth:?}").contains("s3cret"));
    }
}
