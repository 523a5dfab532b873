//! Layers: one piece of middleware around every model, tool and verifier call of a run.
//!
//! A [`Layer`] has one method, [`Layer::around`], that is given the [`Call`] (what is called:
//! a model request, a tool's name and arguments, a verification) and the [`Next`] step (the
//! wrapped adapter, or the next layer), and answers with an [`Answer`]. It may look at the
//! call, pass it on ([`Next::run`]) changed or not, look at or replace the answer, or answer
//! without passing the call on at all. The wrappers that make a layer a [`Model`], a [`Tool`]
//! and a [`Verifier`] are written here once: apply a layer with [`model`], [`tools`] (every
//! tool of a set) and [`verifier`], or to all of a run's adapters with [`Adapters::layer`].
//! What an adapter says about itself ([`Model::info`], [`Model::reads_messages`],
//! [`Tool::description`], [`Tool::parameters`], [`Tool::idempotent`],
//! [`Verifier::reads_transcript`]) is passed through unchanged.
//!
//! **When it runs.** The wrappers call [`Layer::around`] when the runtime calls the adapter,
//! not when the call's future is first polled, and so does [`Next::run`] with the adapter
//! below. The synchronous part of `around` (before its future) therefore runs in the order the
//! runtime makes its calls (a batch of tool calls in the model's order, even though the calls
//! then run concurrently); work that must wait belongs in the returned future. A layer that
//! keeps one slot per call in call order takes the slot in that prelude; one that journals
//! each call begins its step there.
//!
//! Layers stack: the layer applied last is the outermost, and sees each call first.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use terminus_runtime::layer::{self, Answer, BoxFuture, Call, Layer, Next};
//! use terminus_runtime::ToolSet;
//! use terminus_kernel::{ToolErrorKind, ToolOutcome};
//!
//! /// Counts the tool calls, and refuses every call of `rm`.
//! #[derive(Default)]
//! struct Guard {
//!     tool_calls: AtomicUsize,
//! }
//!
//! impl Layer for Guard {
//!     fn around<'a>(&'a self, call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Answer> {
//!         if let Call::Tool { name, .. } = &call {
//!             self.tool_calls.fetch_add(1, Ordering::Relaxed);
//!             if *name == "rm" {
//!                 let refused = ToolOutcome::Error {
//!                     kind: ToolErrorKind::PermissionDenied,
//!                     message: "rm is not allowed here".into(),
//!                 };
//!                 return Box::pin(async move { Answer::Tool(Ok(refused)) });
//!             }
//!         }
//!         next.run(call)
//!     }
//! }
//!
//! let guard = Arc::new(Guard::default());
//! let tools = layer::tools(&ToolSet::new(), guard.clone());
//! assert!(tools.contains("write_todos"));
//! ```

use crate::driver::Adapters;
use crate::fault::Fault;
use crate::model::{Model, ModelError, ModelInfo, ModelRequest};
use crate::tool::{Tool, ToolSet, ToolSource};
use crate::verifier::{Verification, Verifier};
use async_trait::async_trait;
use serde_json::Value;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use terminus_kernel::{ModelTurn, ToolOutcome, Verdict};

/// A boxed future that can be sent between threads (the same type as `futures::BoxFuture`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Middleware around every model, tool and verifier call (see the [module docs](self)).
pub trait Layer: Send + Sync {
    /// Carries out `call`: usually by handing it (changed or not) to `next` with
    /// [`Next::run`], possibly with work before and after. The synchronous part of this method
    /// runs when the runtime makes the call; the answer must be of the call's [`Site`] (a model
    /// call answered with a tool outcome becomes a fault that stops the run).
    fn around<'a>(&'a self, call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Answer>;
}

/// What is called.
#[derive(Debug)]
pub enum Call<'a> {
    /// The model is asked for a turn (or, [`crate::Purpose::Verify`], for a verdict of
    /// [`crate::LlmVerifier`]).
    Model(ModelRequest<'a>),
    /// A tool is called.
    Tool {
        /// The tool's name in its [`ToolSet`].
        name: &'a str,
        /// Whether the tool says it is idempotent ([`Tool::idempotent`]).
        idempotent: bool,
        /// The call's arguments.
        arguments: Value,
    },
    /// The verifier is asked for a verdict.
    Verify(Verification<'a>),
}

impl Call<'_> {
    /// Which kind of adapter is called.
    pub fn site(&self) -> Site {
        match self {
            Call::Model(_) => Site::Model,
            Call::Tool { .. } => Site::Tool,
            Call::Verify(_) => Site::Verifier,
        }
    }
}

/// Which kind of adapter a call goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Site {
    /// A [`Model`].
    Model,
    /// A [`Tool`].
    Tool,
    /// A [`Verifier`].
    Verifier,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Site::Model => "a model call",
            Site::Tool => "a tool call",
            Site::Verifier => "a verification",
        })
    }
}

/// The answer to a [`Call`], of the same [`Site`].
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A model's answer.
    Model(Result<ModelTurn, ModelError>),
    /// A tool's answer.
    Tool(Result<ToolOutcome, Fault>),
    /// A verifier's answer.
    Verdict(Result<Verdict, Fault>),
}

impl Answer {
    /// The answer of `site` that is `fault`: the adapter cannot go on, and the run stops with
    /// it.
    pub fn fault(site: Site, fault: Fault) -> Answer {
        match site {
            Site::Model => Answer::Model(Err(ModelError::Fault(fault))),
            Site::Tool => Answer::Tool(Err(fault)),
            Site::Verifier => Answer::Verdict(Err(fault)),
        }
    }

    /// Which kind of adapter answered.
    pub fn site(&self) -> Site {
        match self {
            Answer::Model(_) => Site::Model,
            Answer::Tool(_) => Site::Tool,
            Answer::Verdict(_) => Site::Verifier,
        }
    }

    /// The fault that a layer's answer of the wrong site becomes.
    fn mismatch(self, site: Site) -> Fault {
        Fault::internal(format!(
            "a layer answered {site} with the answer to {}",
            self.site()
        ))
    }

    fn into_model(self) -> Result<ModelTurn, ModelError> {
        match self {
            Answer::Model(answer) => answer,
            other => Err(ModelError::Fault(other.mismatch(Site::Model))),
        }
    }

    fn into_tool(self) -> Result<ToolOutcome, Fault> {
        match self {
            Answer::Tool(answer) => answer,
            other => Err(other.mismatch(Site::Tool)),
        }
    }

    fn into_verdict(self) -> Result<Verdict, Fault> {
        match self {
            Answer::Verdict(answer) => answer,
            other => Err(other.mismatch(Site::Verifier)),
        }
    }
}

/// The rest of the chain below a layer: the wrapped adapter (itself possibly layered).
pub struct Next<'a> {
    inner: Inner<'a>,
}

#[derive(Clone, Copy)]
enum Inner<'a> {
    Model(&'a dyn Model),
    Tool(&'a dyn Tool),
    Verifier(&'a dyn Verifier),
}

impl fmt::Debug for Next<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Next")
            .field("site", &self.site())
            .finish_non_exhaustive()
    }
}

impl<'a> Next<'a> {
    /// Which kind of adapter is below.
    pub fn site(&self) -> Site {
        match self.inner {
            Inner::Model(_) => Site::Model,
            Inner::Tool(_) => Site::Tool,
            Inner::Verifier(_) => Site::Verifier,
        }
    }

    /// Calls the adapter below with `call`, now: its own synchronous part runs before this
    /// returns (a tool that takes its place in a batch when it is called takes it here). A
    /// call of another [`Site`] than the adapter's is not made: it is answered with a fault
    /// naming both.
    pub fn run(self, call: Call<'a>) -> BoxFuture<'a, Answer> {
        match (self.inner, call) {
            (Inner::Model(model), Call::Model(request)) => {
                let answer = model.complete(request);
                Box::pin(async move { Answer::Model(answer.await) })
            }
            (Inner::Tool(tool), Call::Tool { arguments, .. }) => {
                let answer = tool.call(arguments);
                Box::pin(async move { Answer::Tool(answer.await) })
            }
            (Inner::Verifier(verifier), Call::Verify(verification)) => {
                let answer = verifier.verify(verification);
                Box::pin(async move { Answer::Verdict(answer.await) })
            }
            (_, call) => {
                let site = self.site();
                let fault = Fault::internal(format!(
                    "a layer passed {} on to {site}'s adapter",
                    call.site()
                ));
                Box::pin(std::future::ready(Answer::fault(site, fault)))
            }
        }
    }
}

/// `inner` with `layer` around each of its calls.
pub fn model(inner: Arc<dyn Model>, layer: Arc<dyn Layer>) -> Arc<dyn Model> {
    Arc::new(Layered { inner, layer })
}

/// Every tool of `tools` (the built-in `write_todos` too) with `layer` around each of its
/// calls; the holds are kept.
pub fn tools(tools: &ToolSet, layer: Arc<dyn Layer>) -> ToolSet {
    let mut out = ToolSet::empty();
    out.hold_as(tools);
    for name in tools.names() {
        if let Some(tool) = tools.get(name) {
            out.insert(
                name,
                Arc::new(LayeredTool {
                    name: name.to_owned(),
                    inner: tool.clone(),
                    layer: layer.clone(),
                }),
            );
        }
    }
    // A list that changes during the run: the tools a source answers later are layered too.
    for (source, names) in tools.sources() {
        out.watch(
            Arc::new(LayeredSource {
                inner: source,
                layer: layer.clone(),
            }),
            names,
        );
    }
    out
}

/// A [`ToolSource`] whose tools get the layer, as those of the set it was watched in.
struct LayeredSource {
    inner: Arc<dyn ToolSource>,
    layer: Arc<dyn Layer>,
}

#[async_trait]
impl ToolSource for LayeredSource {
    async fn refresh(&self) -> Option<ToolSet> {
        let now = self.inner.refresh().await?;
        Some(tools(&now, self.layer.clone()))
    }
}

/// `inner` with `layer` around each of its verifications.
pub fn verifier(inner: Arc<dyn Verifier>, layer: Arc<dyn Layer>) -> Arc<dyn Verifier> {
    Arc::new(Layered { inner, layer })
}

impl Adapters<'_> {
    /// Puts `layer` around the run's model, every tool and the verifier the host gave (the
    /// default rule verifier calls nothing and is left as it is).
    pub fn layer(&mut self, layer: Arc<dyn Layer>) {
        *self.model = model(self.model.clone(), layer.clone());
        *self.tools = tools(self.tools, layer.clone());
        if let Some(inner) = self.verifier.take() {
            *self.verifier = Some(verifier(inner, layer));
        }
    }
}

/// A model or a verifier with a layer around it.
struct Layered<T: ?Sized> {
    inner: Arc<T>,
    layer: Arc<dyn Layer>,
}

// Written out rather than with `async_trait` (here and below): `around` runs when the runtime
// calls the adapter, not when the future is first polled.
impl Model for Layered<dyn Model> {
    fn complete<'life0, 'life1, 'async_trait>(
        &'life0 self,
        request: ModelRequest<'life1>,
    ) -> BoxFuture<'async_trait, Result<ModelTurn, ModelError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        let next = Next {
            inner: Inner::Model(self.inner.as_ref()),
        };
        let answer = self.layer.around(Call::Model(request), next);
        Box::pin(async move { answer.await.into_model() })
    }

    fn info(&self) -> ModelInfo {
        self.inner.info()
    }

    fn reads_messages(&self) -> bool {
        self.inner.reads_messages()
    }
}

impl Verifier for Layered<dyn Verifier> {
    fn verify<'life0, 'life1, 'async_trait>(
        &'life0 self,
        verification: Verification<'life1>,
    ) -> BoxFuture<'async_trait, Result<Verdict, Fault>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        let next = Next {
            inner: Inner::Verifier(self.inner.as_ref()),
        };
        let answer = self.layer.around(Call::Verify(verification), next);
        Box::pin(async move { answer.await.into_verdict() })
    }

    fn reads_transcript(&self) -> bool {
        self.inner.reads_transcript()
    }
}

/// A tool with a layer around it, under its name in the set.
struct LayeredTool {
    name: String,
    inner: Arc<dyn Tool>,
    layer: Arc<dyn Layer>,
}

impl Tool for LayeredTool {
    fn description(&self) -> &str {
        self.inner.description()
    }

    fn parameters(&self) -> Value {
        self.inner.parameters()
    }

    fn idempotent(&self) -> bool {
        self.inner.idempotent()
    }

    fn call<'life0, 'async_trait>(
        &'life0 self,
        arguments: Value,
    ) -> BoxFuture<'async_trait, Result<ToolOutcome, Fault>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        let call = Call::Tool {
            name: &self.name,
            idempotent: self.inner.idempotent(),
            arguments,
        };
        let next = Next {
            inner: Inner::Tool(self.inner.as_ref()),
        };
        let answer = self.layer.around(call, next);
        Box::pin(async move { answer.await.into_tool() })
    }
}
