//! The table: every way a call can fail, as one of the kernel's tool error kinds.

use rmcp::service::ServiceError;
use terminus_kernel::{ToolErrorKind, ToolOutcome};

pub(super) fn error(kind: ToolErrorKind, message: impl Into<String>) -> ToolOutcome {
    ToolOutcome::Error {
        kind,
        message: message.into(),
    }
}

/// Whether the error means the connection (or the child) is gone.
pub(super) fn lost(e: &ServiceError) -> bool {
    matches!(
        e,
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
    ) && !auth_status(e)
}

/// Whether an HTTP transport error is a 401 or 403 (with or without `WWW-Authenticate`).
pub(super) fn auth_status(e: &ServiceError) -> bool {
    if matches!(e, ServiceError::McpError(_)) {
        return false;
    }
    let text = e.to_string();
    e.auth_challenge().is_some()
        || [
            "HTTP 401",
            "HTTP 403",
            "Auth required",
            "Insufficient scope",
        ]
        .iter()
        .any(|s| text.contains(s))
}

/// The table: an SDK error to a tool error kind and a message for the model.
pub fn error_kind(e: &ServiceError) -> (ToolErrorKind, String) {
    match e {
        ServiceError::McpError(data) => {
            let kind = match data.code {
                rmcp::model::ErrorCode::METHOD_NOT_FOUND => ToolErrorKind::NotFound,
                rmcp::model::ErrorCode::INVALID_PARAMS => ToolErrorKind::InvalidArguments,
                _ => ToolErrorKind::Failed,
            };
            (kind, format!("MCP error {}: {}", data.code.0, data.message))
        }
        ServiceError::Timeout { timeout } => (
            ToolErrorKind::Timeout,
            format!("no result within {} ms", timeout.as_millis()),
        ),
        _ if auth_status(e) => (
            ToolErrorKind::AuthFailed,
            format!("the server refused the credentials: {e}"),
        ),
        ServiceError::TransportClosed => (
            ToolErrorKind::Failed,
            "the server exited or the connection dropped during the call".into(),
        ),
        other => (ToolErrorKind::Failed, other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ErrorCode, ErrorData};
    use std::time::Duration;

    fn rpc(code: ErrorCode) -> ServiceError {
        ServiceError::McpError(ErrorData::new(code, "from the server", None))
    }

    #[test]
    fn json_rpc_errors_map_by_code() {
        assert_eq!(
            error_kind(&rpc(ErrorCode::METHOD_NOT_FOUND)).0,
            ToolErrorKind::NotFound
        );
        assert_eq!(
            error_kind(&rpc(ErrorCode::INVALID_PARAMS)).0,
            ToolErrorKind::InvalidArguments
        );
        assert_eq!(
            error_kind(&rpc(ErrorCode::INTERNAL_ERROR)).0,
            ToolErrorKind::Failed
        );
        let (_, message) = error_kind(&rpc(ErrorCode::INVALID_PARAMS));
        assert_eq!(message, "MCP error -32602: from the server");
    }

    #[test]
    fn a_timeout_and_a_closed_transport() {
        let timeout = ServiceError::Timeout {
            timeout: Duration::from_millis(250),
        };
        assert_eq!(
            error_kind(&timeout),
            (ToolErrorKind::Timeout, "no result within 250 ms".into())
        );
        assert_eq!(
            error_kind(&ServiceError::TransportClosed).0,
            ToolErrorKind::Failed
        );
        assert!(lost(&ServiceError::TransportClosed));
        assert!(!lost(&rpc(ErrorCode::INTERNAL_ERROR)));
    }
}
