//! The auth config: what `[[mcp]] auth = { ... }` says ([`McpAuth`]), which grant obtains the
//! token ([`McpGrant`]), and what some grants need (the enterprise [`IdentityProvider`], the
//! [`PrivateKey`] of `private_key_jwt`). Secrets in it are never formatted.

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
    /// [`AuthStep::Authorization`](super::AuthStep::Authorization) failure.
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

    pub(super) fn jws(self) -> jsonwebtoken::Algorithm {
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;

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
    pub(in crate::mcp_auth) const TEST_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgjp0f6h6OPHFXsTXP
NpdxOnRlvQL42DSAIwgkK3beeUahRANCAAQxFGY+VJ5uQDXMWG5zY/dTCdCyqWnY
Upw0yPF/ospCw9KhorPGxVF2UB+ZPOzH7Ed1q2OXxjImput76FmO5bh5
-----END PRIVATE KEY-----
";
}
