//! OAuth on a server's requests: one more authorization per challenge within its share, and
//! the login a person completes.

use super::config::{McpConfig, McpError, McpTransport};
use crate::mcp_auth::{AuthFailure, AuthStep, Authorizer, MAX_AUTHORIZATIONS};

/// One more authorization for a request that met `challenge`, unless it had its share.
pub(super) async fn authorize(
    auth: &Authorizer,
    challenge: &str,
    authorizations: &mut u32,
) -> Result<(), AuthFailure> {
    if *authorizations >= MAX_AUTHORIZATIONS {
        return Err(crate::mcp_auth::fail(
            AuthStep::RetryLimit,
            format!(
                "the server still refused after {MAX_AUTHORIZATIONS} authorizations: {}",
                challenge_error(challenge)
            ),
        ));
    }
    *authorizations += 1;
    auth.authorize(challenge).await
}

/// The `error` a challenge names (`insufficient_scope`, `invalid_token`), for messages.
pub(super) fn challenge_error(challenge: &str) -> String {
    challenge
        .split(',')
        .find_map(|p| {
            p.trim()
                .trim_start_matches("Bearer ")
                .strip_prefix("error=")
        })
        .map(|v| v.trim_matches('"').to_owned())
        .unwrap_or_else(|| "unauthorized".into())
}

pub(super) fn auth_error(server: &str, failure: AuthFailure) -> McpError {
    match failure.login_url {
        Some(url) => McpError::Login {
            server: server.to_owned(),
            url,
        },
        None => McpError::Auth {
            server: server.to_owned(),
            step: failure.step,
            reason: failure.reason,
        },
    }
}

/// Completes the login a person made for server `config` (its [`McpError::Login`]):
/// `redirect` is the address the authorization server redirected their browser to, with the
/// code and `state`. The token is kept in the auth config's
/// [`credentials_file`](crate::McpAuth::credentials_file), which a later
/// [`McpServer::connect`](super::McpServer::connect) uses. A server with no such auth, a redirect that brings an `error`
/// or no code, a `state` no pending login has, a refused code: [`McpError::Auth`] naming the
/// step.
pub async fn complete_login(config: &McpConfig, redirect: &str) -> Result<(), McpError> {
    let (Some(auth), McpTransport::Http { url }) = (&config.auth, &config.transport) else {
        return Err(McpError::Auth {
            server: config.name.clone(),
            step: AuthStep::Authorization,
            reason: "the server has no OAuth config".into(),
        });
    };
    let authorizer = Authorizer::new(url, auth.clone())
        .await
        .map_err(|e| auth_error(&config.name, e))?;
    authorizer
        .complete(redirect)
        .await
        .map_err(|e| auth_error(&config.name, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp_auth::McpAuth;

    #[tokio::test]
    async fn the_retry_limit_is_a_named_auth_error() {
        let auth = Authorizer::new("http://127.0.0.1:1/mcp", McpAuth::default())
            .await
            .expect("no network needed");
        let mut authorizations = MAX_AUTHORIZATIONS;
        let failure = authorize(
            &auth,
            r#"Bearer error="insufficient_scope", scope="mcp:admin""#,
            &mut authorizations,
        )
        .await
        .expect_err("over the limit");
        assert_eq!(failure.step, AuthStep::RetryLimit);
        assert_eq!(
            failure.to_string(),
            "OAuth retry_limit failed: the server still refused after 3 authorizations: \
             insufficient_scope"
        );
        let e = auth_error("remote", failure);
        assert!(
            e.to_string()
                .starts_with("[[mcp]] `remote`: OAuth retry_limit failed:"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn an_unreachable_authorization_server_fails_discovery() {
        let auth = Authorizer::new("http://127.0.0.1:1/mcp", McpAuth::default())
            .await
            .expect("no network needed");
        let mut authorizations = 0;
        let failure = authorize(&auth, "Bearer", &mut authorizations)
            .await
            .expect_err("nothing listens on port 1");
        assert_eq!(failure.step, AuthStep::Discovery, "{failure}");
    }
}
