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
//!
//! Its parts: `config` (what `[[mcp]] auth` says), `failure` (which step failed, and why),
//! `redirect` (the authorizer of a server, and the authorization-code flow with its redirect)
//! and `grants` (the grants without a redirect).

mod config;
mod failure;
mod grants;
mod redirect;

pub use config::{
    DEFAULT_REDIRECT_URI, IdentityProvider, McpAuth, McpGrant, PrivateKey, SigningAlgorithm,
};
pub(crate) use failure::fail;
pub use failure::{AuthFailure, AuthStep, MAX_AUTHORIZATIONS};
pub(crate) use redirect::Authorizer;
