//! A person's authorization of an MCP server, kept on disk so that the person logs in once: the
//! file of [`McpAuth::credentials_file`](crate::McpAuth::credentials_file). It holds the client
//! the authorization server registered (its secret, if it gave one), the pending
//! authorizations (each one's PKCE verifier, keyed by its `state`), and the token once a login
//! is completed. It is rmcp's credential store and state store for that server.
//!
//! The file is written whole, to a temporary file beside it (one a process) that is renamed
//! over it, readable by its owner alone (mode `0600`, in a folder made `0700`): it holds a
//! token. Nothing of it is journaled, recorded, logged or put in a span.

use rmcp::transport::auth::{
    AuthError, CredentialStore, StateStore, StoredAuthorizationState, StoredCredentials,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// How long a pending authorization (a login URL handed to a person) stays in the file.
pub(crate) const PENDING_SECS: u64 = 24 * 60 * 60;

/// How many pending authorizations the file keeps at most (the newest).
pub(crate) const MAX_PENDING: usize = 16;

/// What the file holds.
#[derive(Default, Serialize, Deserialize)]
struct Kept {
    /// The client the authorization URL was made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client: Option<KeptClient>,
    /// The token, once a login is completed (rmcp's own record of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    credentials: Option<StoredCredentials>,
    /// The authorizations handed to a person and not completed, by their `state`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pending: BTreeMap<String, StoredAuthorizationState>,
}

/// The client an authorization server knows this agent as.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeptClient {
    /// Its ID (given at registration, configured, or a metadata document's URL).
    pub(crate) client_id: String,
    /// Its secret, if registration gave one (a pre-registered client's stays in the
    /// config's environment variable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) client_secret: Option<String>,
    /// The redirect URI it was registered with.
    pub(crate) redirect_uri: String,
    /// The authorization server's issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) issuer: Option<String>,
}

impl std::fmt::Debug for KeptClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptClient")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("redirect_uri", &self.redirect_uri)
            .field("issuer", &self.issuer)
            .finish()
    }
}

/// The file of one server's authorization. Clones share it.
#[derive(Clone)]
pub(crate) struct LoginFile {
    path: Arc<PathBuf>,
    /// One read-change-write at a time in this process.
    lock: Arc<Mutex<()>>,
}

impl LoginFile {
    pub(crate) fn new(path: PathBuf) -> LoginFile {
        LoginFile {
            path: Arc::new(path),
            lock: Arc::new(Mutex::new(())),
        }
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The client kept, if any.
    pub(crate) fn client(&self) -> Result<Option<KeptClient>, AuthError> {
        let _one = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(self.read()?.client)
    }

    /// Keeps `client` (a client registered anew drops the token of the one before).
    pub(crate) fn keep_client(&self, client: KeptClient) -> Result<(), AuthError> {
        self.change(|kept| {
            if kept.client.as_ref() != Some(&client) {
                kept.credentials = None;
            }
            kept.client = Some(client);
        })
    }

    /// Whether a pending authorization has this `state`.
    pub(crate) fn is_pending(&self, state: &str) -> Result<bool, AuthError> {
        let _one = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(self.read()?.pending.contains_key(state))
    }

    fn read(&self) -> Result<Kept, AuthError> {
        let text = match std::fs::read_to_string(&*self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Kept::default()),
            Err(e) => return Err(store_error(&self.path, e)),
        };
        serde_json::from_str(&text).map_err(|e| {
            store_error(
                &self.path,
                format!("not an authorization file of terminus: {e}"),
            )
        })
    }

    /// Reads the file, applies `f`, writes it back whole.
    fn change<R>(&self, f: impl FnOnce(&mut Kept) -> R) -> Result<R, AuthError> {
        let _one = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let mut kept = self.read()?;
        let out = f(&mut kept);
        let now = crate::clock::now_secs();
        kept.pending
            .retain(|_, s| now.saturating_sub(s.created_at) < PENDING_SECS);
        // A host that retries a connection (Restate, a loop) asks for a login each time: the
        // newest are kept.
        while kept.pending.len() > MAX_PENDING {
            let oldest = kept
                .pending
                .iter()
                .min_by_key(|(_, s)| s.created_at)
                .map(|(state, _)| state.clone());
            if let Some(state) = oldest {
                kept.pending.remove(&state);
            }
        }
        self.write(&kept)?;
        Ok(out)
    }

    fn write(&self, kept: &Kept) -> Result<(), AuthError> {
        use std::io::Write as _;
        use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
        let fail = |e: std::io::Error| store_error(&self.path, e);
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(fail)?;
        }
        let text = serde_json::to_vec_pretty(kept).map_err(|e| store_error(&self.path, e))?;
        // Each process its own temporary file: two writing at once never mix theirs.
        let mut tmp = self.path.as_os_str().to_owned();
        tmp.push(format!(".{}.tmp", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(fail)?;
        file.write_all(&text)
            .and_then(|()| file.sync_all())
            .map_err(fail)?;
        std::fs::rename(&tmp, &*self.path).map_err(fail)
    }
}

fn store_error(path: &Path, e: impl std::fmt::Display) -> AuthError {
    AuthError::CredentialStoreError(format!("{}: {e}", path.display()))
}

#[async_trait::async_trait]
impl CredentialStore for LoginFile {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let _one = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(self.read()?.credentials)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.change(|kept| kept.credentials = Some(credentials))
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.change(|kept| kept.credentials = None)
    }
}

#[async_trait::async_trait]
impl StateStore for LoginFile {
    async fn save(&self, state: &str, pending: StoredAuthorizationState) -> Result<(), AuthError> {
        self.change(|kept| {
            kept.pending.insert(state.to_owned(), pending);
        })
    }

    async fn load(&self, state: &str) -> Result<Option<StoredAuthorizationState>, AuthError> {
        let _one = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(self.read()?.pending.get(state).cloned())
    }

    async fn delete(&self, state: &str) -> Result<(), AuthError> {
        self.change(|kept| {
            kept.pending.remove(state);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[tokio::test]
    async fn the_file_keeps_what_a_login_needs_for_its_owner_alone() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("auth").join("remote.json");
        let file = LoginFile::new(path.clone());
        assert!(CredentialStore::load(&file).await.expect("empty").is_none());

        let client = KeptClient {
            client_id: "c1".into(),
            client_secret: Some("s3cret".into()),
            redirect_uri: "http://127.0.0.1:8976/callback".into(),
            issuer: Some("http://127.0.0.1:1".into()),
        };
        file.keep_client(client.clone()).expect("kept");
        let verifier = oauth2::PkceCodeVerifier::new("v".repeat(43));
        let state = oauth2::CsrfToken::new("st1".into());
        StateStore::save(
            &file,
            "st1",
            StoredAuthorizationState::new(&verifier, &state),
        )
        .await
        .expect("saved");
        // Another process (another `LoginFile`) reads the same.
        let again = LoginFile::new(path.clone());
        assert!(again.is_pending("st1").expect("read"));
        assert!(!again.is_pending("other").expect("read"));
        assert_eq!(again.client().expect("read"), Some(client.clone()));
        StateStore::delete(&again, "st1").await.expect("deleted");
        assert!(!file.is_pending("st1").expect("read"));

        let mode = std::fs::metadata(&path).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let dir_mode = std::fs::metadata(path.parent().expect("dir"))
            .expect("dir")
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700, "{dir_mode:o}");
        let left: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("listed")
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect();
        assert_eq!(
            left,
            [std::ffi::OsString::from("remote.json")],
            "no temporary file left"
        );

        // A client registered anew drops the token of the one before.
        CredentialStore::save(
            &file,
            StoredCredentials::new("c1".into(), None, vec!["mcp".into()], Some(1)),
        )
        .await
        .expect("saved");
        file.keep_client(client.clone()).expect("same client");
        assert!(CredentialStore::load(&file).await.expect("read").is_some());
        file.keep_client(KeptClient {
            client_id: "c2".into(),
            ..client
        })
        .expect("new client");
        assert!(CredentialStore::load(&file).await.expect("read").is_none());
    }

    #[tokio::test]
    async fn a_file_that_is_not_one_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("remote.json");
        std::fs::write(&path, "[1, 2]").expect("write");
        let file = LoginFile::new(path.clone());
        let err = CredentialStore::load(&file).await.expect_err("not ours");
        let text = err.to_string();
        assert!(text.contains("remote.json"), "{text}");
        assert!(text.contains("not an authorization file"), "{text}");
        // Nothing was written over it.
        assert!(
            file.keep_client(KeptClient {
                client_id: "c".into(),
                client_secret: None,
                redirect_uri: "http://127.0.0.1/cb".into(),
                issuer: None,
            })
            .is_err()
        );
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "[1, 2]");
    }

    #[tokio::test]
    async fn stale_pending_authorizations_are_dropped() {
        let dir = tempfile::tempdir().expect("dir");
        let file = LoginFile::new(dir.path().join("remote.json"));
        let verifier = oauth2::PkceCodeVerifier::new("v".repeat(43));
        let mut old =
            StoredAuthorizationState::new(&verifier, &oauth2::CsrfToken::new("old".into()));
        old.created_at = crate::clock::now_secs() - PENDING_SECS - 1;
        StateStore::save(&file, "old", old).await.expect("saved");
        let new = StoredAuthorizationState::new(&verifier, &oauth2::CsrfToken::new("new".into()));
        StateStore::save(&file, "new", new).await.expect("saved");
        assert!(!file.is_pending("old").expect("read"));
        assert!(file.is_pending("new").expect("read"));

        // At most MAX_PENDING, the newest.
        for i in 0..MAX_PENDING + 3 {
            let state = format!("s{i}");
            let mut pending =
                StoredAuthorizationState::new(&verifier, &oauth2::CsrfToken::new(state.clone()));
            pending.created_at = crate::clock::now_secs() + 1 + i as u64;
            StateStore::save(&file, &state, pending)
                .await
                .expect("saved");
        }
        assert!(
            !file.is_pending("new").expect("read"),
            "the oldest went first"
        );
        assert!(!file.is_pending("s2").expect("read"));
        assert!(file.is_pending("s3").expect("read"));
        assert!(
            file.is_pending(&format!("s{}", MAX_PENDING + 2))
                .expect("read")
        );
    }
}
