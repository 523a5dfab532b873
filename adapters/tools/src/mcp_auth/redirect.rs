//! The authorizer of one server ([`Authorizer`]: its token, its client, its credentials file),
//! and the authorization-code flow with its redirect: a client registered or configured, the
//! authorization URL fetched and the code read from where it redirects, or, when a person must
//! log in, the login kept in the credentials file until [`Authorizer::complete`] exchanges the
//! code their browser brings back. The grants without a redirect are in `grants`.

use super::config::{DEFAULT_REDIRECT_URI, McpAuth, McpGrant};
use super::failure::{AuthFailure, AuthStep, fail, token_error};
use crate::mcp_login::{KeptClient, LoginFile};
use rmcp::transport::auth::{
    AuthClient, AuthorizationCallback, AuthorizationManager, InMemoryCredentialStore,
    OAuthClientConfig,
};
use std::sync::Arc;
use tokio::sync::Mutex;

/// The HTTP client an authorized transport sends with: it adds the current token.
pub(crate) type AuthHttp = AuthClient<reqwest::Client>;

/// One server's authorization state, shared by its transport (which reads the token) and the
/// retry loops (which authorize).
pub(crate) struct Authorizer {
    /// The server's URL: the `resource` the grants without a redirect ask a token for.
    pub(super) url: String,
    pub(super) config: McpAuth,
    manager: Arc<Mutex<AuthorizationManager>>,
    client: AuthHttp,
    /// The manager's credential store, where a token this side obtains itself (a signed
    /// client-credentials grant, a workload's, an enterprise one) is put for the transport to
    /// send.
    pub(super) credentials: InMemoryCredentialStore,
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
}
