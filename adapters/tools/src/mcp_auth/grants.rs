//! The grants without a redirect, for a service with no person behind it: the
//! `client_credentials` grant (SEP-1046) with the client's secret or a `private_key_jwt`
//! assertion signed here, the JWT-bearer grant of a workload's own token (SEP-1933), and
//! enterprise-managed authorization (SEP-990). Each gets its token from the token endpoint alone
//! (which must be `https`, or `http` on this machine) and puts it where the transport reads it.

use super::config::{McpGrant, PrivateKey, SigningAlgorithm};
use super::failure::{AuthFailure, AuthStep, fail, token_error};
use super::redirect::Authorizer;
use crate::clock::now_secs;
use rmcp::transport::auth::{
    AuthorizationManager, AuthorizationMetadata, ClientCredentialsConfig, CredentialStore,
    OAuthTokenResponse, StoredCredentials,
};

/// The JWT-bearer grant type (RFC 7523).
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

impl Authorizer {
    /// The grants with no browser redirect: each gets its token from the token endpoint
    /// alone.
    pub(super) async fn without_redirect(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp_auth::config::McpAuth;
    use crate::mcp_auth::config::tests::TEST_KEY;

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
