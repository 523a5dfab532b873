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
//! - PKCE S256 always; at most [`MAX_AUTHORIZATIONS`] authorizations per request;
//! - or, for a service with no user behind it, no person and no redirect at all
//!   ([`McpGrant`]): the `client_credentials` grant (SEP-1046), the client authenticating
//!   itself with its secret (HTTP Basic or the request body, as the metadata names) or a
//!   `private_key_jwt` assertion it signs; the JWT-bearer grant of a workload's own token
//!   (SEP-1933); or enterprise-managed authorization (SEP-990), the user's ID token exchanged
//!   at the enterprise identity provider for an assertion the authorization server takes.
//!   Their token endpoints must be `https`, or `http` on this machine.
//!
//! The authorization redirect is completed without a browser: the authorization URL is fetched
//! without following redirects, and the code is read from the `Location` it redirects to
//! (authorization servers that approve a known client at once, as the conformance suite's
//! does). A server that wants a person to log in answers otherwise (a login page, a redirect
//! elsewhere): with a [`McpAuth::credentials_file`] the connection ends with
//! [`McpError::Login`](crate::McpError::Login) and the URL for the person, the file keeping the
//! client and the PKCE verifier until [`complete_login`](crate::complete_login) exchanges the
//! code their browser brings back; the token is kept there for every later connection. Without
//! one it fails with [`McpError::Auth`](crate::McpError::Auth) naming the `authorization` step.
//!
//! Tokens and secrets never appear in errors, logs or `Debug` output (the credentials file,
//! mode `0600`, is where a token is kept).

use crate::clock::now_secs;
use crate::mcp_login::{KeptClient, LoginFile};
use rmcp::transport::auth::{
    AuthClient, AuthError, AuthorizationCallback, AuthorizationManager, AuthorizationMetadata,
    ClientCredentialsConfig, CredentialStore, InMemoryCredentialStore, OAuthClientConfig,
    OAuthTokenResponse, StoredCredentials,
};
use std::sync::Arc;
use tokio::sync::Mutex;

/// How many authorizations one request may start before its auth error stands (the spec's
/// retry limit: a `403` that no scope satisfies must not loop).
pub const MAX_AUTHORIZATIONS: u32 = 3;

/// The JWT-bearer grant type (RFC 7523).
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

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
    /// How the token is obtained.
    pub grant: McpGrant,
    /// The key a [`McpGrant::ClientCredentials`] client signs its `private_key_jwt` assertion
    /// with, instead of sending a secret.
    pub private_key: Option<PrivateKey>,
    /// The file holding the identity token the grant starts from (read anew at each
    /// authorization: such tokens rotate): the workload's JWT for [`McpGrant::JwtBearer`],
    /// the user's ID token from the enterprise identity provider for
    /// [`McpGrant::Enterprise`].
    pub token_file: Option<std::path::PathBuf>,
    /// The enterprise identity provider of [`McpGrant::Enterprise`].
    pub idp: Option<IdentityProvider>,
    /// Where the authorization-code flow keeps what a person's login needs (the registered
    /// client, each pending authorization's PKCE verifier, the token), so that an
    /// authorization server that wants a person to log in ends the connection with
    /// [`McpError::Login`](crate::McpError::Login) instead of failing, the login is completed
    /// with [`complete_login`](crate::complete_login) from another process, and the token
    /// serves every later connection (refreshed when it expires) until the server refuses it.
    /// Written with mode `0600`. `None`: nothing is kept, and a login is an
    /// [`AuthStep::Authorization`] failure.
    pub credentials_file: Option<std::path::PathBuf>,
}

/// How an [`McpAuth`] client obtains its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum McpGrant {
    /// The authorization-code flow with PKCE, on behalf of a user (the default).
    #[default]
    AuthorizationCode,
    /// The `client_credentials` grant (SEP-1046): a service acting as itself, with a
    /// pre-registered `client_id` and either its `client_secret` or a [`PrivateKey`].
    ClientCredentials,
    /// The JWT-bearer grant of workload identity federation (SEP-1933, RFC 7523): the
    /// workload's identity token, issued by its platform, read from
    /// [`McpAuth::token_file`].
    JwtBearer,
    /// Enterprise-managed authorization (SEP-990): the user's ID token from the enterprise
    /// identity provider ([`McpAuth::idp`]) is exchanged there for an identity assertion
    /// grant (RFC 8693), which the MCP server's authorization server takes as a JWT-bearer
    /// grant from the pre-registered client (`client_id`, `client_secret`).
    Enterprise,
}

/// An enterprise identity provider: where [`McpGrant::Enterprise`] exchanges the user's ID
/// token.
#[derive(Clone, PartialEq, Eq)]
pub struct IdentityProvider {
    /// Its issuer.
    pub issuer: String,
    /// Its token endpoint.
    pub token_endpoint: String,
    /// This client's ID there.
    pub client_id: String,
    /// This client's secret there (sent with HTTP Basic), if it is confidential.
    pub client_secret: Option<String>,
}

impl std::fmt::Debug for IdentityProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityProvider")
            .field("issuer", &self.issuer)
            .field("token_endpoint", &self.token_endpoint)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// A private key for `private_key_jwt` client authentication (RFC 7523): PEM (PKCS#8 or the
/// key type's own), and the algorithm it signs with. Never formatted.
#[derive(Clone, PartialEq, Eq)]
pub struct PrivateKey {
    /// The key, PEM-encoded.
    pub pem: String,
    /// The signing algorithm.
    pub algorithm: SigningAlgorithm,
}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivateKey")
            .field("pem", &"<redacted>")
            .field("algorithm", &self.algorithm)
            .finish()
    }
}

/// The JWS algorithms a [`PrivateKey`] can sign with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigningAlgorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    RS384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    RS512,
    /// ECDSA on P-256 with SHA-256.
    ES256,
    /// ECDSA on P-384 with SHA-384.
    ES384,
}

impl SigningAlgorithm {
    /// Every algorithm, by its JWS name.
    pub const ALL: [SigningAlgorithm; 5] = [
        SigningAlgorithm::RS256,
        SigningAlgorithm::RS384,
        SigningAlgorithm::RS512,
        SigningAlgorithm::ES256,
        SigningAlgorithm::ES384,
    ];

    fn jws(self) -> jsonwebtoken::Algorithm {
        match self {
            SigningAlgorithm::RS256 => jsonwebtoken::Algorithm::RS256,
            SigningAlgorithm::RS384 => jsonwebtoken::Algorithm::RS384,
            SigningAlgorithm::RS512 => jsonwebtoken::Algorithm::RS512,
            SigningAlgorithm::ES256 => jsonwebtoken::Algorithm::ES256,
            SigningAlgorithm::ES384 => jsonwebtoken::Algorithm::ES384,
        }
    }

    /// The JWS name (`RS256`, `ES256`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            SigningAlgorithm::RS256 => "RS256",
            SigningAlgorithm::RS384 => "RS384",
            SigningAlgorithm::RS512 => "RS512",
            SigningAlgorithm::ES256 => "ES256",
            SigningAlgorithm::ES384 => "ES384",
        }
    }

    /// The algorithm of a JWS name, if it is one of [`SigningAlgorithm::ALL`].
    pub fn from_name(name: &str) -> Option<SigningAlgorithm> {
        SigningAlgorithm::ALL
            .into_iter()
            .find(|a| a.as_str() == name)
    }
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
            .field("grant", &self.grant)
            .field("private_key", &self.private_key)
            .field("token_file", &self.token_file)
            .field("idp", &self.idp)
            .field("credentials_file", &self.credentials_file)
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
    /// The authorization server wants a person to log in: the authorization waits for them
    /// ([`AuthFailure::login_url`]); only with [`McpAuth::credentials_file`].
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

/// The HTTP client an authorized transport sends with: it adds the current token.
pub(crate) type AuthHttp = AuthClient<reqwest::Client>;

/// One server's authorization state, shared by its transport (which reads the token) and the
/// retry loops (which authorize).
pub(crate) struct Authorizer {
    /// The server's URL: the `resource` the grants without a redirect ask a token for.
    url: String,
    config: McpAuth,
    manager: Arc<Mutex<AuthorizationManager>>,
    client: AuthHttp,
    /// The manager's credential store, where a token this side obtains itself (a signed
    /// client-credentials grant, a workload's, an enterprise one) is put for the transport to
    /// send.
    credentials: InMemoryCredentialStore,
    /// Whether a client is configured (then a new challenge is a step-up), and with which
    /// authorization server (its issuer): when the resource names another one, the client is
    /// registered there anew, and nothing of the old one's is sent to it (SEP-2352).
    registered: Mutex<Option<Option<String>>>,
    /// The file of [`McpAuth::credentials_file`] (the authorization-code flow only): then the
    /// manager's credential and state store.
    file: Option<LoginFile>,
}

impl Authorizer {
    /// An authorizer for the server at `url`: with the token its credentials file keeps, if
    /// any (then the server's metadata is fetched now), else with no token yet.
    pub(crate) async fn new(url: &str, config: McpAuth) -> Result<Authorizer, AuthFailure> {
        let mut manager = AuthorizationManager::new(url)
            .await
            .map_err(|e| fail(AuthStep::Discovery, e))?;
        let credentials = InMemoryCredentialStore::new();
        let file = match (&config.credentials_file, config.grant) {
            (Some(path), McpGrant::AuthorizationCode) => Some(LoginFile::new(path.clone())),
            _ => None,
        };
        let mut registered = None;
        match &file {
            Some(file) => {
                manager.set_credential_store(file.clone());
                manager.set_state_store(file.clone());
                if manager
                    .initialize_from_store()
                    .await
                    .map_err(|e| fail(AuthStep::Discovery, e))?
                {
                    // The kept client, with its secret, for the refresh.
                    let kept = file.client().map_err(|e| fail(AuthStep::Token, e))?;
                    if let Some(kept) = &kept {
                        manager
                            .configure_client(kept_client(kept, &config))
                            .map_err(|e| fail(AuthStep::Registration, e))?;
                    }
                    registered = Some(kept.and_then(|k| k.issuer));
                }
            }
            None => manager.set_credential_store(credentials.clone()),
        }
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| fail(AuthStep::Discovery, e))?;
        let client = AuthClient::new(http, manager);
        Ok(Authorizer {
            url: url.to_owned(),
            config,
            manager: client.auth_manager.clone(),
            client,
            credentials,
            registered: Mutex::new(registered),
            file,
        })
    }

    /// Completes a login a person made at the URL of an [`AuthStep::Login`]: `redirect` is
    /// the address the authorization server sent their browser to (`code` and `state` in its
    /// query). The code is exchanged with the client and PKCE verifier the credentials file
    /// kept for that `state`, and the token is kept there.
    pub(crate) async fn complete(&self, redirect: &str) -> Result<(), AuthFailure> {
        let file = self.file.as_ref().ok_or_else(|| {
            fail(
                AuthStep::Authorization,
                "a login needs the authorization-code grant and a credentials file",
            )
        })?;
        let callback = callback(redirect)?;
        if !file
            .is_pending(&callback.csrf_token)
            .map_err(|e| fail(AuthStep::Authorization, e))?
        {
            return Err(fail(
                AuthStep::Authorization,
                format!(
                    "no authorization waits for the redirect's state in {} (it was completed \
                     already, is older than {} hours, or is another server's)",
                    file.path().display(),
                    crate::mcp_login::PENDING_SECS / 3600
                ),
            ));
        }
        let kept = file
            .client()
            .map_err(|e| fail(AuthStep::Authorization, e))?
            .ok_or_else(|| {
                fail(
                    AuthStep::Registration,
                    format!("{} keeps no client", file.path().display()),
                )
            })?;
        let mut manager = self.manager.lock().await;
        let resolution = manager
            .resolve_metadata()
            .await
            .map_err(|e| fail(AuthStep::Discovery, e))?;
        manager.set_metadata(resolution.metadata);
        manager
            .configure_client(kept_client(&kept, &self.config))
            .map_err(|e| fail(AuthStep::Registration, e))?;
        exchange(&manager, &callback).await
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
        let metadata = resolution.metadata.clone();
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
        if self.config.grant != McpGrant::AuthorizationCode {
            self.without_redirect(&mut manager, &metadata, scopes)
                .await?;
            *registered = Some(issuer);
            return Ok(());
        }
        let refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
        // A client registered before, for a login still to complete, is used again: the
        // pending login's code is bound to it.
        let kept = match &self.file {
            Some(file) if registered.is_none() && self.config.client_id.is_none() => file
                .client()
                .map_err(|e| fail(AuthStep::Registration, e))?
                .filter(|k| k.issuer == issuer && k.redirect_uri == redirect_uri),
            _ => None,
        };
        if registered.is_none() {
            let client = if let Some(kept) = kept {
                kept_client(&kept, &self.config).with_scopes(scopes.clone())
            } else if let Some(id) = &self.config.client_id {
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
            if let Some(file) = &self.file {
                // A secret the config gives stays in the environment, not in the file.
                let registered_secret = match &self.config.client_id {
                    Some(_) => None,
                    None => client.client_secret.clone(),
                };
                file.keep_client(KeptClient {
                    client_id: client.client_id.clone(),
                    client_secret: registered_secret,
                    redirect_uri: redirect_uri.clone(),
                    issuer: issuer.clone(),
                })
                .map_err(|e| fail(AuthStep::Registration, e))?;
            }
            manager
                .configure_client(client)
                .map_err(|e| fail(AuthStep::Registration, e))?;
            *registered = Some(issuer);
        }
        let url = manager
            .get_authorization_url(&refs)
            .await
            .map_err(|e| fail(AuthStep::Authorization, e))?;
        let callback = match follow(&url, &redirect_uri).await {
            Err(Followed::Login(why)) if self.file.is_some() => {
                return Err(AuthFailure {
                    step: AuthStep::Login,
                    reason: why,
                    login_url: Some(url),
                });
            }
            Err(Followed::Login(why)) => {
                return Err(fail(
                    AuthStep::Authorization,
                    format!(
                        "{why}: it wants a person to log in, and no credentials file keeps \
                         the authorization for them"
                    ),
                ));
            }
            Err(Followed::Failed(failure)) => return Err(failure),
            Ok(callback) => callback,
        };
        exchange(&manager, &callback).await
    }
}

impl Authorizer {
    /// The grants with no browser redirect: each gets its token from the token endpoint
    /// alone.
    async fn without_redirect(
        &self,
        manager: &mut AuthorizationManager,
        metadata: &AuthorizationMetadata,
        scopes: Vec<String>,
    ) -> Result<(), AuthFailure> {
        match (self.config.grant, &self.config.private_key) {
            (McpGrant::Enterprise, _) => self.exchange_enterprise(metadata, scopes).await,
            (McpGrant::JwtBearer, _) => {
                let file = self.config.token_file.as_deref().ok_or_else(|| {
                    fail(
                        AuthStep::Registration,
                        "the jwt_bearer grant needs the workload token's file",
                    )
                })?;
                self.exchange_workload(metadata, file, scopes).await
            }
            (McpGrant::ClientCredentials, Some(key)) => {
                self.exchange_signed(metadata, key, scopes).await
            }
            (McpGrant::ClientCredentials, None) => {
                // A client with a secret: rmcp makes the request (Basic or body, as the
                // metadata says).
                loopback_or_https(&metadata.token_endpoint)?;
                let credentials = self.client_credentials(scopes)?;
                manager
                    .validate_client_credentials_metadata(&credentials)
                    .map_err(|e| fail(AuthStep::Registration, e))?;
                manager
                    .configure_client_credentials(&credentials)
                    .map_err(|e| fail(AuthStep::Registration, e))?;
                manager
                    .exchange_client_credentials(&credentials)
                    .await
                    .map(drop)
                    .map_err(|e| fail(AuthStep::Token, token_error(&e)))
            }
            (McpGrant::AuthorizationCode, _) => Err(fail(
                AuthStep::Authorization,
                "the authorization-code flow needs its redirect",
            )),
        }
    }

    fn client_id(&self) -> Result<String, AuthFailure> {
        self.config.client_id.clone().ok_or_else(|| {
            fail(
                AuthStep::Registration,
                "the client_credentials grant needs a pre-registered client_id",
            )
        })
    }

    /// The client-credentials request of a client with a secret (rmcp makes it).
    fn client_credentials(
        &self,
        scopes: Vec<String>,
    ) -> Result<ClientCredentialsConfig, AuthFailure> {
        let client_secret = self.config.client_secret.clone().ok_or_else(|| {
            fail(
                AuthStep::Registration,
                "the client_credentials grant needs the client's secret or private key",
            )
        })?;
        Ok(ClientCredentialsConfig::ClientSecret {
            client_id: self.client_id()?,
            client_secret,
            scopes,
            resource: Some(self.url.clone()),
        })
    }

    /// The client-credentials grant of a client that authenticates with a `private_key_jwt`
    /// assertion (RFC 7523 section 2.2): signed here, sent to the token endpoint, and the
    /// token put where the transport reads it. (rmcp's own exchange of this kind holds a
    /// non-`Send` value across an await, so it cannot run in a tool call.)
    async fn exchange_signed(
        &self,
        metadata: &AuthorizationMetadata,
        key: &PrivateKey,
        scopes: Vec<String>,
    ) -> Result<(), AuthFailure> {
        let client_id = self.client_id()?;
        let token_endpoint = loopback_or_https(&metadata.token_endpoint)?;
        if let Some(methods) = metadata
            .additional_fields
            .get("token_endpoint_auth_methods_supported")
            .and_then(serde_json::Value::as_array)
            && !methods
                .iter()
                .any(|m| m.as_str() == Some("private_key_jwt"))
        {
            return Err(fail(
                AuthStep::Registration,
                "the authorization server does not accept private_key_jwt client authentication",
            ));
        }
        if let Some(algorithms) = metadata
            .additional_fields
            .get("token_endpoint_auth_signing_alg_values_supported")
            .and_then(serde_json::Value::as_array)
            && !algorithms
                .iter()
                .any(|a| a.as_str() == Some(key.algorithm.as_str()))
        {
            return Err(fail(
                AuthStep::Registration,
                format!(
                    "the authorization server does not accept {} assertions",
                    key.algorithm.as_str()
                ),
            ));
        }
        let audience = metadata.issuer.as_deref().ok_or_else(|| {
            fail(
                AuthStep::Registration,
                "the authorization server's metadata names no issuer to address the assertion to",
            )
        })?;
        let assertion = assertion(&client_id, audience, key)?;
        let form = vec![
            ("grant_type", "client_credentials".to_owned()),
            (
                "client_assertion_type",
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".to_owned(),
            ),
            ("client_assertion", assertion),
        ];
        self.grant_token(
            metadata,
            token_endpoint,
            form,
            client_id,
            scopes,
            "assertion",
        )
        .await
    }

    /// The JWT-bearer grant (RFC 7523 section 2.1) of workload identity federation: the
    /// workload's own JWT (read anew from its file each time: such tokens rotate) is the
    /// grant. A refusal stands: no retry, no other grant.
    async fn exchange_workload(
        &self,
        metadata: &AuthorizationMetadata,
        file: &std::path::Path,
        scopes: Vec<String>,
    ) -> Result<(), AuthFailure> {
        let token_endpoint = loopback_or_https(&metadata.token_endpoint)?;
        let jwt = read_token(Some(file), "workload token")?;
        let mut form = vec![("grant_type", JWT_BEARER.to_owned()), ("assertion", jwt)];
        let client_id = self.config.client_id.clone().unwrap_or_default();
        if !client_id.is_empty() {
            form.push(("client_id", client_id.clone()));
        }
        self.grant_token(
            metadata,
            token_endpoint,
            form,
            client_id,
            scopes,
            "workload token",
        )
        .await
    }

    /// Enterprise-managed authorization (SEP-990), on rmcp's `enterprise` module: the ID token
    /// is exchanged at the identity provider for an ID-JAG, which the authorization server
    /// takes (with the client's secret, HTTP Basic) for an access token.
    async fn exchange_enterprise(
        &self,
        metadata: &AuthorizationMetadata,
        scopes: Vec<String>,
    ) -> Result<(), AuthFailure> {
        use rmcp::transport::auth::enterprise::{
            EmaAuthorizationServer, EmaClientAuthentication, EmaExchangeRequest,
        };
        let idp = self.config.idp.as_ref().ok_or_else(|| {
            fail(
                AuthStep::Registration,
                "the enterprise grant needs the identity provider (idp)",
            )
        })?;
        let client_id = self.client_id()?;
        let secret = self.config.client_secret.clone().ok_or_else(|| {
            fail(
                AuthStep::Registration,
                "the enterprise grant needs the client's secret",
            )
        })?;
        let issuer = metadata.issuer.clone().ok_or_else(|| {
            fail(
                AuthStep::Registration,
                "the authorization server's metadata names no issuer",
            )
        })?;
        let id_token = read_token(self.config.token_file.as_deref(), "ID token")?;
        let idp_auth = match &idp.client_secret {
            Some(s) => {
                EmaClientAuthentication::ClientSecretBasic(oauth2::ClientSecret::new(s.clone()))
            }
            None => EmaClientAuthentication::None,
        };
        let request = EmaExchangeRequest::new_with_id_token(
            EmaAuthorizationServer::new(&idp.issuer, &idp.token_endpoint, &idp.client_id)
                .with_client_authentication(idp_auth),
            EmaAuthorizationServer::new(issuer, &metadata.token_endpoint, &client_id)
                .with_client_authentication(EmaClientAuthentication::ClientSecretBasic(
                    oauth2::ClientSecret::new(secret),
                )),
            &self.url,
            &id_token,
        )
        .with_scopes(scopes);
        let http = rmcp::transport::auth::default_oauth_http_client()
            .map_err(|e| fail(AuthStep::Token, e))?;
        // rmcp's errors are sanitized: they carry no token or response body.
        let token = request
            .exchange(&http, &http)
            .await
            .map_err(|e| fail(AuthStep::Token, e))?;
        let mut response = serde_json::json!({
            "access_token": token.access_token.secret(),
            "token_type": "Bearer",
        });
        if let Some(lifetime) = token.expires_in {
            response["expires_in"] = lifetime.as_secs().into();
        }
        let response: OAuthTokenResponse = serde_json::from_value(response)
            .map_err(|_| fail(AuthStep::Token, "the access token could not be kept"))?;
        let granted = token.scopes.into_iter().collect();
        let stored = StoredCredentials::new(client_id, Some(response), granted, Some(now_secs()))
            .with_issuer(metadata.issuer.clone());
        self.credentials
            .save(stored)
            .await
            .map_err(|e| fail(AuthStep::Token, e))
    }

    /// Sends a token request with `form` (plus the resource and the scopes), and puts the
    /// token it gets where the transport reads it. `what` names the grant in a refusal.
    async fn grant_token(
        &self,
        metadata: &AuthorizationMetadata,
        token_endpoint: reqwest::Url,
        mut form: Vec<(&str, String)>,
        client_id: String,
        scopes: Vec<String>,
        what: &str,
    ) -> Result<(), AuthFailure> {
        form.push(("resource", self.url.clone()));
        if !scopes.is_empty() {
            form.push(("scope", scopes.join(" ")));
        }
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| fail(AuthStep::Token, e))?;
        let response = http
            .post(token_endpoint)
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&form)
            .send()
            .await
            .map_err(|e| fail(AuthStep::Token, e.without_url()))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| fail(AuthStep::Token, e.without_url()))?;
        if !status.is_success() {
            let refusal: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let text = |k: &str| refusal.get(k).and_then(serde_json::Value::as_str);
            return Err(fail(
                AuthStep::Token,
                format!(
                    "the token endpoint refused the client's {what} ({status}{}{})",
                    text("error").map(|e| format!(": {e}")).unwrap_or_default(),
                    text("error_description")
                        .map(|d| format!(": {d}"))
                        .unwrap_or_default()
                ),
            ));
        }
        // Parsed as a whole or not at all: a parse error's text never quotes the body.
        let token: OAuthTokenResponse = serde_json::from_slice(&body).map_err(|_| {
            fail(
                AuthStep::Token,
                "the token endpoint's answer is not a token response",
            )
        })?;
        let granted = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| Some(v.get("scope")?.as_str()?.to_owned()))
            .map_or(scopes, |s| {
                s.split_whitespace().map(str::to_owned).collect()
            });
        let stored = StoredCredentials::new(client_id, Some(token), granted, Some(now_secs()))
            .with_issuer(metadata.issuer.clone());
        self.credentials
            .save(stored)
            .await
            .map_err(|e| fail(AuthStep::Token, e))
    }
}

/// The token endpoint, if it is HTTPS or on this machine (where plain HTTP exposes nothing).
fn loopback_or_https(endpoint: &str) -> Result<reqwest::Url, AuthFailure> {
    let url = reqwest::Url::parse(endpoint).map_err(|e| {
        fail(
            AuthStep::Discovery,
            format!("the token endpoint {endpoint:?} is not a URL: {e}"),
        )
    })?;
    let host = url.host_str().unwrap_or_default();
    let loopback = host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if url.scheme() == "https" || (url.scheme() == "http" && loopback) {
        Ok(url)
    } else {
        Err(fail(
            AuthStep::Discovery,
            format!("the token endpoint {endpoint} is neither https nor on this machine"),
        ))
    }
}

/// The token in `file` (trimmed), read now.
fn read_token(file: Option<&std::path::Path>, what: &str) -> Result<String, AuthFailure> {
    let file = file.ok_or_else(|| {
        fail(
            AuthStep::Registration,
            format!("the {what} file is not configured (token_file)"),
        )
    })?;
    let text = std::fs::read_to_string(file).map_err(|e| {
        fail(
            AuthStep::Registration,
            format!("the {what} file {}: {e}", file.display()),
        )
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(fail(
            AuthStep::Registration,
            format!("the {what} file {} is empty", file.display()),
        ));
    }
    Ok(token.to_owned())
}

/// A `private_key_jwt` client assertion: the client is its issuer and subject, the
/// authorization server's issuer its audience, valid for five minutes, with a unique `jti`.
fn assertion(client_id: &str, audience: &str, key: &PrivateKey) -> Result<String, AuthFailure> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let signing = match key.algorithm {
        SigningAlgorithm::RS256 | SigningAlgorithm::RS384 | SigningAlgorithm::RS512 => {
            jsonwebtoken::EncodingKey::from_rsa_pem(key.pem.as_bytes())
        }
        SigningAlgorithm::ES256 | SigningAlgorithm::ES384 => {
            jsonwebtoken::EncodingKey::from_ec_pem(key.pem.as_bytes())
        }
    }
    .map_err(|e| {
        fail(
            AuthStep::Registration,
            format!(
                "the private key is not a PEM {} key: {e}",
                key.algorithm.as_str()
            ),
        )
    })?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let jti = format!(
        "{:x}-{:x}-{:x}",
        now.as_nanos(),
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    );
    let claims = serde_json::json!({
        "iss": client_id,
        "sub": client_id,
        "aud": audience,
        "iat": now.as_secs(),
        "exp": now.as_secs() + 300,
        "jti": jti,
    });
    let mut header = jsonwebtoken::Header::new(key.algorithm.jws());
    header.typ = Some("client-authentication+jwt".to_owned());
    jsonwebtoken::encode(&header, &claims, &signing).map_err(|e| {
        fail(
            AuthStep::Registration,
            format!("signing the assertion: {e}"),
        )
    })
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
        // rmcp's texts carry the endpoint's `error` and description, never the token.
        AuthError::ClientCredentialsError(reason) => {
            format!("the token endpoint refused the client's credentials: {reason}")
        }
        other => other.to_string(),
    }
}

/// The client a credentials file keeps, as rmcp configures it: with its registered secret, or,
/// for the pre-registered client of `config`, the secret the config gives.
fn kept_client(kept: &KeptClient, config: &McpAuth) -> OAuthClientConfig {
    let client = OAuthClientConfig::new(kept.client_id.clone(), kept.redirect_uri.clone());
    let secret = match &kept.client_secret {
        Some(secret) => Some(secret),
        None if config.client_id.as_ref() == Some(&kept.client_id) => config.client_secret.as_ref(),
        None => None,
    };
    match secret {
        Some(secret) => client.with_client_secret(secret.clone()),
        None => client,
    }
}

/// Exchanges the code of `callback` for a token, which the manager keeps.
async fn exchange(
    manager: &AuthorizationManager,
    callback: &AuthorizationCallback,
) -> Result<(), AuthFailure> {
    manager
        .exchange_code_for_token_with_issuer(
            &callback.code,
            &callback.csrf_token,
            callback.issuer.as_deref(),
        )
        .await
        .map(drop)
        .map_err(|e| fail(AuthStep::Token, token_error(&e)))
}

/// How fetching the authorization URL went wrong.
enum Followed {
    /// The authorization server answered with something for a person (a login page, a
    /// redirect elsewhere than to the client): why, in words.
    Login(String),
    /// Another failure.
    Failed(AuthFailure),
}

/// Completes the authorization redirect without a browser: fetch the authorization URL, and
/// read the code from where it redirects, when it redirects to `redirect_uri` at once.
async fn follow(url: &str, redirect_uri: &str) -> Result<AuthorizationCallback, Followed> {
    let failed = |e: String| Followed::Failed(fail(AuthStep::Authorization, e));
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let response = http
        .get(url)
        .send()
        .await
        .map_err(|e| failed(e.without_url().to_string()))?;
    let status = response.status();
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            Followed::Login(format!(
                "the authorization server answered {status} without a redirect"
            ))
        })?;
    if !to_client(location, redirect_uri) {
        return Err(Followed::Login(
            "the authorization server redirected elsewhere than to the client".into(),
        ));
    }
    callback(location).map_err(Followed::Failed)
}

/// Whether `location` is the client's `redirect_uri` (with a query).
fn to_client(location: &str, redirect_uri: &str) -> bool {
    location
        .strip_prefix(redirect_uri)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('?') || rest.starts_with('#'))
}

/// The code and state of a redirect to the client, or why it brings none (the `error` the
/// authorization server gave).
fn callback(redirect: &str) -> Result<AuthorizationCallback, AuthFailure> {
    let parsed = reqwest::Url::parse(redirect).map_err(|e| {
        fail(
            AuthStep::Authorization,
            format!("the redirect is not a URL: {e}"),
        )
    })?;
    if let Some((_, error)) = parsed.query_pairs().find(|(k, _)| k == "error") {
        return Err(fail(
            AuthStep::Authorization,
            format!("the authorization server answered `{error}` (access denied?)"),
        ));
    }
    AuthorizationCallback::from_redirect_url(redirect).map_err(|_| {
        fail(
            AuthStep::Authorization,
            "the authorization redirect brought no code and state",
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
    fn a_kept_client_takes_a_pre_registered_secret_from_the_config_only() {
        let config = McpAuth {
            client_id: Some("pre".into()),
            client_secret: Some("from-env".into()),
            ..McpAuth::default()
        };
        let kept = |id: &str, secret: Option<&str>| KeptClient {
            client_id: id.into(),
            client_secret: secret.map(str::to_owned),
            redirect_uri: DEFAULT_REDIRECT_URI.into(),
            issuer: None,
        };
        let secret = |k: &KeptClient| kept_client(k, &config).client_secret;
        assert_eq!(secret(&kept("pre", None)).as_deref(), Some("from-env"));
        assert_eq!(secret(&kept("dcr-1", None)), None);
        assert_eq!(
            secret(&kept("dcr-1", Some("registered"))).as_deref(),
            Some("registered")
        );
        let client = kept_client(&kept("dcr-1", None), &config);
        assert_eq!(
            (client.client_id.as_str(), client.redirect_uri.as_str()),
            ("dcr-1", DEFAULT_REDIRECT_URI)
        );
    }

    #[test]
    fn the_secret_is_not_in_debug() {
        let auth = McpAuth {
            client_secret: Some("s3cret".into()),
            private_key: Some(PrivateKey {
                pem: TEST_KEY.into(),
                algorithm: SigningAlgorithm::ES256,
            }),
            idp: Some(IdentityProvider {
                issuer: "https://idp.example".into(),
                token_endpoint: "https://idp.example/token".into(),
                client_id: "agent".into(),
                client_secret: Some("idp-s3cret".into()),
            }),
            ..McpAuth::default()
        };
        let shown = format!("{auth:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(!shown.contains("MIGHAgEA"), "{shown}");
        assert!(
            shown.contains("ES256") && shown.contains("idp.example"),
            "{shown}"
        );
    }

    /// A throwaway P-256 key, made for this test only.
    const TEST_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgjp0f6h6OPHFXsTXP
NpdxOnRlvQL42DSAIwgkK3beeUahRANCAAQxFGY+VJ5uQDXMWG5zY/dTCdCyqWnY
Upw0yPF/ospCw9KhorPGxVF2UB+ZPOzH7Ed1q2OXxjImput76FmO5bh5
-----END PRIVATE KEY-----
";

    /// A token endpoint on loopback that answers one request with `status` and `body`; the
    /// thread hands back the request it got.
    fn token_endpoint(
        status: &'static str,
        body: &'static str,
    ) -> (String, std::thread::JoinHandle<String>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/token", listener.local_addr().expect("addr"));
        let served = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().expect("accept");
            let mut request = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                let n = stream.read(&mut chunk).expect("read");
                request.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&request).to_string();
                if let Some((head, rest)) = text.split_once("\r\n\r\n") {
                    let length = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(0);
                    if rest.len() >= length {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            let answer = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(answer.as_bytes()).expect("write");
            String::from_utf8_lossy(&request).to_string()
        });
        (url, served)
    }

    fn metadata(token_endpoint: &str, fields: serde_json::Value) -> AuthorizationMetadata {
        let mut m = AuthorizationMetadata::default();
        m.token_endpoint = token_endpoint.to_owned();
        m.authorization_endpoint = token_endpoint.replace("/token", "/authorize");
        m.issuer = Some(token_endpoint.replace("/token", ""));
        if let serde_json::Value::Object(fields) = fields {
            m.additional_fields = fields.into_iter().collect();
        }
        m
    }

    /// The form value of `key` in a request's body, decoded.
    fn form_value(request: &str, key: &str) -> Option<String> {
        let body = request.split_once("\r\n\r\n")?.1;
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(body).ok()?;
        pairs.into_iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// A client-credentials client `svc` with [`TEST_KEY`], and its key.
    async fn signed_client() -> (Authorizer, PrivateKey) {
        let key = PrivateKey {
            pem: TEST_KEY.into(),
            algorithm: SigningAlgorithm::ES256,
        };
        let auth = client(McpAuth {
            client_id: Some("svc".into()),
            grant: McpGrant::ClientCredentials,
            private_key: Some(key.clone()),
            ..McpAuth::default()
        })
        .await;
        (auth, key)
    }

    /// An authorizer with `auth` for a server nothing is sent to (the tests give the token
    /// endpoint's metadata themselves).
    async fn client(auth: McpAuth) -> Authorizer {
        Authorizer::new("http://127.0.0.1:1/mcp", auth)
            .await
            .expect("authorizer")
    }

    #[tokio::test]
    async fn a_signed_client_gets_its_token_where_the_transport_reads_it() {
        let (endpoint, served) = token_endpoint(
            "200 OK",
            r#"{"access_token":"tok-1","token_type":"Bearer","expires_in":3600,"scope":"mcp:read"}"#,
        );
        let (authorizer, key) = signed_client().await;
        let key = &key;
        let fields = serde_json::json!({
            "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            "token_endpoint_auth_signing_alg_values_supported": ["ES256"],
        });
        authorizer
            .exchange_signed(&metadata(&endpoint, fields), key, vec!["mcp:read".into()])
            .await
            .expect("granted");
        assert_eq!(
            authorizer.http().get_access_token().await.expect("token"),
            "tok-1"
        );
        let request = served.join().expect("served");
        assert_eq!(
            form_value(&request, "grant_type").as_deref(),
            Some("client_credentials")
        );
        assert_eq!(
            form_value(&request, "resource").as_deref(),
            Some("http://127.0.0.1:1/mcp")
        );
        assert_eq!(form_value(&request, "scope").as_deref(), Some("mcp:read"));
        let jwt = form_value(&request, "client_assertion").expect("assertion");
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3, "{jwt}");
        use base64::Engine;
        let claims: serde_json::Value = serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(parts[1])
                .expect("base64"),
        )
        .expect("claims");
        assert_eq!(claims["iss"], "svc");
        assert_eq!(claims["sub"], "svc");
        assert_eq!(claims["aud"], endpoint.replace("/token", ""));
        assert!(claims["exp"].as_u64() > claims["iat"].as_u64());
    }

    #[tokio::test]
    async fn a_refused_grant_is_named_by_its_step_and_carries_no_token() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("workload.jwt");
        std::fs::write(&file, "eyJ.workload-secret.sig\n").expect("token");
        let (endpoint, served) = token_endpoint(
            "400 Bad Request",
            r#"{"error":"invalid_grant","error_description":"the assertion expired"}"#,
        );
        let authorizer = client(McpAuth {
            client_id: Some("w".into()),
            grant: McpGrant::JwtBearer,
            token_file: Some(file.clone()),
            ..McpAuth::default()
        })
        .await;
        let failure = authorizer
            .exchange_workload(&metadata(&endpoint, serde_json::json!({})), &file, vec![])
            .await
            .expect_err("refused");
        assert_eq!(failure.step, AuthStep::Token);
        let text = failure.to_string();
        assert_eq!(
            text,
            "OAuth token failed: the token endpoint refused the client's workload token (400 Bad Request: invalid_grant: the assertion expired)"
        );
        assert!(!text.contains("workload-secret"), "{text}");
        let request = served.join().expect("served");
        assert_eq!(
            form_value(&request, "grant_type").as_deref(),
            Some(JWT_BEARER)
        );
        assert_eq!(
            form_value(&request, "assertion").as_deref(),
            Some("eyJ.workload-secret.sig")
        );
        assert_eq!(form_value(&request, "client_id").as_deref(), Some("w"));

        // No token file, or an empty one: named before anything is sent.
        let missing = dir.path().join("absent.jwt");
        let failure = authorizer
            .exchange_workload(
                &metadata(&endpoint, serde_json::json!({})),
                &missing,
                vec![],
            )
            .await
            .expect_err("no file");
        assert_eq!(failure.step, AuthStep::Registration);
        assert!(failure.reason.contains("absent.jwt"), "{failure}");
        std::fs::write(&file, "  \n").expect("empty");
        let failure = authorizer
            .exchange_workload(&metadata(&endpoint, serde_json::json!({})), &file, vec![])
            .await
            .expect_err("empty");
        assert!(failure.reason.contains("is empty"), "{failure}");
    }

    #[tokio::test]
    async fn a_key_the_server_cannot_verify_is_refused_before_anything_is_sent() {
        let (authorizer, key) = signed_client().await;
        let key = &key;
        // Port 9 on loopback: nothing is sent, so nothing answers.
        let endpoint = "http://127.0.0.1:9/token";
        let only_rs =
            serde_json::json!({"token_endpoint_auth_signing_alg_values_supported": ["RS256"]});
        let failure = authorizer
            .exchange_signed(&metadata(endpoint, only_rs), key, vec![])
            .await
            .expect_err("wrong algorithm");
        assert_eq!(failure.step, AuthStep::Registration);
        assert!(failure.reason.contains("ES256"), "{failure}");
        let no_jwt =
            serde_json::json!({"token_endpoint_auth_methods_supported": ["client_secret_basic"]});
        let failure = authorizer
            .exchange_signed(&metadata(endpoint, no_jwt), key, vec![])
            .await
            .expect_err("no private_key_jwt");
        assert!(failure.reason.contains("private_key_jwt"), "{failure}");
        let remote = "http://auth.example/token";
        let failure = authorizer
            .exchange_signed(&metadata(remote, serde_json::json!({})), key, vec![])
            .await
            .expect_err("plain http elsewhere");
        assert!(
            failure.reason.contains("neither https nor on this machine"),
            "{failure}"
        );
        let rsa = PrivateKey {
            pem: TEST_KEY.into(),
            algorithm: SigningAlgorithm::RS256,
        };
        let failure = authorizer
            .exchange_signed(&metadata(endpoint, serde_json::json!({})), &rsa, vec![])
            .await
            .expect_err("an EC key is no RSA key");
        assert!(failure.reason.contains("not a PEM RS256 key"), "{failure}");
    }
}
