//! `terminus approve | deny | answer`: decisions on the held calls of a suspended execution
//! (`docs/approvals.md`).

use crate::common::StoreArgs;
use crate::error::CliError;
use clap::Args;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use terminus_kernel::{Decision, Entry, Hold, Record, ToolErrorKind, ToolOutcome, recover};
use terminus_runtime::{HeldState, Journal, held_calls};

/// Which execution and which of its held calls.
#[derive(Debug, Args)]
pub(crate) struct Target {
    #[command(flatten)]
    store: StoreArgs,
    /// The suspended execution.
    #[arg(long, value_name = "ID")]
    execution: String,
}

/// Which held calls a decision names.
#[derive(Debug, Args)]
pub(crate) struct Which {
    /// The held call's id (as the suspension printed it).
    #[arg(
        long,
        value_name = "CALL_ID",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    call: Option<String>,
    /// Every held call not yet decided.
    #[arg(long)]
    all: bool,
}

/// `terminus approve`.
#[derive(Debug, Args)]
pub(crate) struct ApproveArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    which: Which,
    /// Run the call with these arguments instead of the model's (a JSON object); the model is
    /// told the call ran with edited arguments. One call only (`--call`).
    #[arg(long, value_name = "JSON", conflicts_with = "all")]
    arguments: Option<String>,
}

/// `terminus deny`.
#[derive(Debug, Args)]
pub(crate) struct DenyArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    which: Which,
    /// Why, for the model.
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
}

/// `terminus answer`.
#[derive(Debug, Args)]
pub(crate) struct AnswerArgs {
    #[command(flatten)]
    target: Target,
    /// The held call's id (as the suspension printed it).
    #[arg(long, value_name = "CALL_ID")]
    call: String,
    /// The call's output, as JSON (for a call that asked a question: the form's content, a
    /// JSON object).
    #[arg(
        long,
        value_name = "JSON",
        required_unless_present = "error",
        conflicts_with = "error"
    )]
    result: Option<String>,
    /// The call failed: its error kind (permission_denied, not_found, auth_failed, timeout,
    /// invalid_arguments, failed).
    #[arg(long, value_name = "KIND", requires = "message")]
    error: Option<String>,
    /// With --error: the message for the model.
    #[arg(long, value_name = "TEXT")]
    message: Option<String>,
}

pub(crate) async fn approve(args: ApproveArgs) -> Result<u8, CliError> {
    let decision = match &args.arguments {
        None => Decision::Approve,
        Some(json) => match serde_json::from_str::<serde_json::Value>(json) {
            Ok(arguments) if arguments.is_object() => Decision::Edit { arguments },
            Ok(other) => {
                return Err(CliError::Invalid(format!(
                    "--arguments must be a JSON object (a tool's arguments), not {other}"
                )));
            }
            Err(e) => return Err(CliError::Invalid(format!("--arguments is not JSON: {e}"))),
        },
    };
    decide(&args.target, Calls::pick(args.which), decision).await
}

pub(crate) async fn deny(args: DenyArgs) -> Result<u8, CliError> {
    let decision = Decision::Deny {
        reason: args.reason,
    };
    decide(&args.target, Calls::pick(args.which), decision).await
}

pub(crate) async fn answer(args: AnswerArgs) -> Result<u8, CliError> {
    let outcome = match (&args.result, &args.error) {
        (Some(json), _) => match serde_json::from_str::<serde_json::Value>(json) {
            Ok(value) => ToolOutcome::ok(value),
            Err(e) => return Err(CliError::Invalid(format!("--result is not JSON: {e}"))),
        },
        (None, Some(kind)) => {
            let parsed = serde_json::from_value::<ToolErrorKind>(serde_json::json!(kind));
            let Ok(kind) = parsed else {
                let known: Vec<&str> = ToolErrorKind::ALL.iter().map(|k| k.as_str()).collect();
                return Err(CliError::Invalid(format!(
                    "--error `{kind}` is not a tool error kind (one of {})",
                    known.join(", ")
                )));
            };
            ToolOutcome::Error {
                kind,
                message: args.message.clone().unwrap_or_default(),
            }
        }
        (None, None) => {
            return Err(CliError::Invalid(
                "answer needs --result JSON or --error KIND --message TEXT".to_owned(),
            ));
        }
    };
    let decision = Decision::Answer { outcome };
    decide(&args.target, Calls::One(args.call), decision).await
}

/// The calls a decision names.
enum Calls {
    One(String),
    All,
}

impl Calls {
    fn pick(which: Which) -> Calls {
        match which.call {
            Some(call) if !which.all => Calls::One(call),
            _ => Calls::All,
        }
    }
}

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Records `decision` on the held calls `calls` names; 0 once recorded (or already so).
async fn decide(target: &Target, calls: Calls, decision: Decision) -> Result<u8, CliError> {
    // A journal that does not exist is an error, not an empty journal to create.
    let store = crate::common::open_existing(&target.store.journal).await?;
    let execution = &target.execution;
    let held = held_of(store.as_ref(), execution).await?;
    let chosen: Vec<&HeldState> = match &calls {
        Calls::One(id) => match held.iter().find(|h| h.call.call_id == *id) {
            Some(h) => vec![h],
            None => {
                let ids: Vec<&str> = held.iter().map(|h| h.call.call_id.as_str()).collect();
                return Err(CliError::Invalid(format!(
                    "execution {execution} holds no call `{id}`{}",
                    if ids.is_empty() {
                        " (it holds none)".to_owned()
                    } else {
                        format!(" (held: {})", ids.join(", "))
                    }
                )));
            }
        },
        Calls::All => held.iter().filter(|h| h.decision.is_none()).collect(),
    };
    if held.is_empty() {
        return Err(CliError::Invalid(format!(
            "execution {execution} is not suspended: it holds no call"
        )));
    }
    if chosen.is_empty() {
        // `--all` again: every held call is decided already.
        eprintln!("terminus: execution {execution}: every held call is decided; nothing changed");
        return Ok(0);
    }
    for h in &chosen {
        if h.call.kind == Hold::Elicitation
            && let Decision::Answer { outcome } = &decision
            && !matches!(outcome, ToolOutcome::Ok(content) if content.is_object())
        {
            return Err(CliError::Invalid(format!(
                "call `{}` of `{}` asked a question: answer it with the form's content, a JSON \
                 object (`--result '{{...}}'`), or decline it with `terminus deny --call {}`",
                h.call.call_id, h.call.name, h.call.call_id
            )));
        }
        if decision.edited().is_some() && h.call.kind == Hold::Elicitation {
            return Err(CliError::Invalid(format!(
                "call `{}` of `{}` asked a question: its arguments are not edited; answer it \
                 with `terminus answer --call {}`, or approve or deny it as it is",
                h.call.call_id, h.call.name, h.call.call_id
            )));
        }
        if decision.runs() && h.call.kind == Hold::Deferred {
            return Err(CliError::Invalid(format!(
                "call `{}` of `{}` is answered from outside, not approved: use \
                 `terminus answer --call {}`",
                h.call.call_id, h.call.name, h.call.call_id
            )));
        }
        if let Some(earlier) = &h.decision
            && *earlier != decision
        {
            return Err(CliError::Invalid(format!(
                "call `{}` of `{}` was already decided ({}): a decision is final",
                h.call.call_id,
                h.call.name,
                earlier.as_str()
            )));
        }
    }
    let at = unix_ms();
    for h in chosen {
        if h.decision.is_some() {
            eprintln!(
                "terminus: call `{}` of `{}` was already decided so; nothing changed",
                h.call.call_id, h.call.name
            );
            continue;
        }
        record(store.as_ref(), execution, h, &decision, at).await?;
        eprintln!(
            "terminus: {} call `{}` of `{}`{} (execution {execution})",
            past(&decision),
            h.call.call_id,
            h.call.name,
            match decision.edited() {
                Some(arguments) => format!(" with edited arguments {arguments}"),
                None => String::new(),
            }
        );
    }
    match store.suspension(execution).await {
        Ok(s) if s.is_suspended() => eprintln!(
            "terminus: execution {execution}: {} held call(s) still wait for a decision",
            s.pending
        ),
        Ok(_) => eprintln!(
            "terminus: execution {execution}: every held call is decided; `terminus resume \
             --journal {} --execution {execution}`, or a worker, continues it",
            target.store.journal
        ),
        Err(e) => return Err(CliError::store(&e)),
    }
    Ok(0)
}

/// Journals `decision` on the held call `h` of `execution` (not yet decided), at `at` (Unix
/// ms). A different decision journaled meanwhile by someone else is refused: a decision is final.
pub(crate) async fn record(
    store: &dyn Journal,
    execution: &str,
    h: &HeldState,
    decision: &Decision,
    at: u64,
) -> Result<(), CliError> {
    let record = Arc::new(Record {
        key: h.key,
        entry: Entry::Decided {
            call_id: h.call.call_id.as_str().into(),
            decision: decision.clone(),
        },
    });
    match store.decide(execution, Arc::clone(&record), at).await {
        Ok(appended) if appended.already_existed && *appended.record != *record => {
            Err(CliError::Invalid(format!(
                "call `{}` was decided otherwise meanwhile: a decision is final",
                h.call.call_id
            )))
        }
        Ok(_) => Ok(()),
        Err(e) => Err(CliError::store(&e)),
    }
}

fn past(decision: &Decision) -> &'static str {
    match decision {
        Decision::Approve => "approved",
        Decision::Deny { .. } => "denied",
        Decision::Answer { .. } => "answered",
        Decision::Edit { .. } => "approved",
    }
}

/// The held calls of `execution`'s pending tool batch, read from its journal.
pub(crate) async fn held_of(
    store: &dyn Journal,
    execution: &str,
) -> Result<Vec<HeldState>, CliError> {
    let spec = crate::common::spec_of(store, execution).await?;
    if let Some(report) = store
        .report(execution)
        .await
        .map_err(|e| CliError::store(&e))?
    {
        return Err(CliError::Invalid(format!(
            "execution {execution} is not suspended: it ended ({})",
            report.outcome
        )));
    }
    let records = store
        .records(execution)
        .await
        .map_err(|e| CliError::store(&e))?;
    recover(spec.policy, records.iter().map(|r| Record::clone(r)))
        .map(|recovery| held_calls(&recovery))
        .map_err(|e| CliError::Internal(format!("execution {execution}: {e}")))
}
