//! Native tools: host functions with typed arguments.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use terminus_kernel::{ToolErrorKind, ToolOutcome};
use terminus_runtime::{Fault, Tool};

/// A failed call of a native tool: its class (which the kernel counts, rule 7) and a message for
/// the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFailure {
    /// The class.
    pub kind: ToolErrorKind,
    /// What the model is told.
    pub message: String,
}

impl ToolFailure {
    /// A failure of `kind`.
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> ToolFailure {
        ToolFailure {
            kind,
            message: message.into(),
        }
    }

    /// Any other failure (`failed`).
    pub fn failed(message: impl Into<String>) -> ToolFailure {
        ToolFailure::new(ToolErrorKind::Failed, message)
    }

    /// The target does not exist (`not_found`, unrecoverable).
    pub fn not_found(message: impl Into<String>) -> ToolFailure {
        ToolFailure::new(ToolErrorKind::NotFound, message)
    }

    /// Not allowed (`permission_denied`, unrecoverable).
    pub fn permission_denied(message: impl Into<String>) -> ToolFailure {
        ToolFailure::new(ToolErrorKind::PermissionDenied, message)
    }

    /// The arguments are wrong in a way the schema cannot say (`invalid_arguments`).
    pub fn invalid_arguments(message: impl Into<String>) -> ToolFailure {
        ToolFailure::new(ToolErrorKind::InvalidArguments, message)
    }
}

impl From<std::io::Error> for ToolFailure {
    /// `NotFound` and `PermissionDenied` keep their class; any other IO error is `failed`.
    fn from(e: std::io::Error) -> ToolFailure {
        let kind = match e.kind() {
            std::io::ErrorKind::NotFound => ToolErrorKind::NotFound,
            std::io::ErrorKind::PermissionDenied => ToolErrorKind::PermissionDenied,
            std::io::ErrorKind::TimedOut => ToolErrorKind::Timeout,
            std::io::ErrorKind::InvalidInput => ToolErrorKind::InvalidArguments,
            _ => ToolErrorKind::Failed,
        };
        ToolFailure::new(kind, e.to_string())
    }
}

impl fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

/// A host function as a tool: built by [`native`].
pub struct NativeTool<A, F> {
    description: String,
    parameters: Value,
    idempotent: bool,
    run: F,
    args: PhantomData<fn(A)>,
}

impl<A, F> fmt::Debug for NativeTool<A, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NativeTool")
            .field("description", &self.description)
            .field("idempotent", &self.idempotent)
            .finish_non_exhaustive()
    }
}

/// A tool that runs `run` with its arguments parsed into `A`. Its schema is `A`'s JSON Schema;
/// arguments that do not parse into `A` are answered `invalid_arguments` (with the path of the
/// field at fault) without running it. Native tools are idempotent unless
/// [`NativeTool::with_idempotent`] says otherwise (that decides whether a resumed run may repeat a
/// call that was in flight at a crash).
pub fn native<A, F, Fut, R>(description: impl Into<String>, run: F) -> NativeTool<A, F>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, ToolFailure>> + Send + 'static,
    R: Serialize + 'static,
{
    let mut parameters = schemars::schema_for!(A).to_value();
    if let Value::Object(map) = &mut parameters {
        // The model needs the shape, not the meta-schema or the Rust type's name.
        map.remove("$schema");
        map.remove("title");
    }
    NativeTool {
        description: description.into(),
        parameters,
        idempotent: true,
        run,
        args: PhantomData,
    }
}

impl<A, F> NativeTool<A, F> {
    /// Whether calling it twice with the same arguments is harmless (default true).
    #[must_use]
    pub fn with_idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }
}

#[async_trait]
impl<A, F, Fut, R> Tool for NativeTool<A, F>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, ToolFailure>> + Send + 'static,
    R: Serialize + 'static,
{
    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn idempotent(&self) -> bool {
        self.idempotent
    }

    async fn call(&self, arguments: Value) -> Result<ToolOutcome, Fault> {
        let args: A = match serde_path_to_error::deserialize(arguments) {
            Ok(args) => args,
            Err(e) => {
                let path = e.path().to_string();
                let at = if path == "." {
                    String::new()
                } else {
                    format!(" at `{path}`")
                };
                return Ok(ToolOutcome::Error {
                    kind: ToolErrorKind::InvalidArguments,
                    message: format!("invalid arguments{at}: {}", e.into_inner()),
                });
            }
        };
        Ok(match (self.run)(args).await {
            Ok(output) => match serde_json::to_value(output) {
                Ok(value) => ToolOutcome::ok(value),
                Err(e) => ToolOutcome::Error {
                    kind: ToolErrorKind::Failed,
                    message: format!("the tool's output cannot be sent as JSON: {e}"),
                },
            },
            Err(failure) => ToolOutcome::Error {
                kind: failure.kind,
                message: failure.message,
            },
        })
    }
}
