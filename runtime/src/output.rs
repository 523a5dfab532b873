//! `policy.output_schema`: the check of a completion claim against the run's JSON Schema
//! (`docs/design.md`, "The policy"). The claim's text must be JSON valid against the schema; the
//! first error (its JSON path and message) is what the kernel gets as the verdict's `missing`
//! item, so the model is told exactly what to fix.
//!
//! The check lives here, not in the kernel: the validator (`jsonschema`) is a large crate that
//! draws on a random source for its hash maps, and the kernel's dependency tree stays small and
//! free of randomness. The kernel only knows that a schema implies verification
//! ([`terminus_kernel::Policy::verifies`]); it sees an ordinary verdict.

use jsonschema::paths::LocationSegment;
use serde_json::Value;
use terminus_kernel::Verdict;

/// The claim checked against `schema`: the parsed output, or the verdict that rejects it with
/// the first error. `Err(problem)` with a schema that cannot be compiled is a fault of the
/// policy, not of the claim.
pub(crate) fn check_claim(schema: &Value, claim: &str) -> Result<Result<Value, Verdict>, String> {
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| format!("policy.output_schema is not a valid JSON Schema: {e}"))?;
    let reject = |item: String| Verdict {
        complete: false,
        missing: vec![item],
    };
    let output: Value = match serde_json::from_str(claim.trim()) {
        Ok(value) => value,
        Err(e) => {
            return Ok(Err(reject(format!(
                "the answer must be JSON valid against the output schema: $: not JSON ({e})"
            ))));
        }
    };
    let first = validator.iter_errors(&output).next().map(|error| {
        format!(
            "the answer must be JSON valid against the output schema: {}: {error}",
            json_path(error.instance_path().segments())
        )
    });
    Ok(match first {
        Some(problem) => Err(reject(problem)),
        None => Ok(output),
    })
}

/// A location as a JSON path: `$`, then `.name` (or `["odd name"]`) and `[index]` segments.
fn json_path<'a>(segments: impl Iterator<Item = LocationSegment<'a>>) -> String {
    let mut path = String::from("$");
    for segment in segments {
        match segment {
            LocationSegment::Index(i) => path.push_str(&format!("[{i}]")),
            LocationSegment::Property(name) => {
                let plain = !name.is_empty()
                    && !name.starts_with(|c: char| c.is_ascii_digit())
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if plain {
                    path.push('.');
                    path.push_str(&name);
                } else {
                    path.push_str(&format!("[{}]", Value::String(name.into_owned())));
                }
            }
        }
    }
    path
}

/// The output a report carries: the parsed claim of a run that completed verified under an
/// output schema (its `result`); none otherwise.
pub(crate) fn report_output(
    schema: Option<&Value>,
    outcome: terminus_kernel::Outcome,
    result: Option<&str>,
) -> Option<Value> {
    schema?;
    if outcome != terminus_kernel::Outcome::Complete(terminus_kernel::CompleteReason::Verified) {
        return None;
    }
    serde_json::from_str(result?.trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["title", "tags"],
            "properties": {
                "title": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "odd key": {"type": "integer"}
            }
        })
    }

    fn problem(claim: &str) -> String {
        match check_claim(&schema(), claim) {
            Ok(Err(verdict)) => {
                assert!(!verdict.complete);
                assert_eq!(verdict.missing.len(), 1, "{verdict:?}");
                verdict.missing[0].clone()
            }
            other => panic!("not a rejection: {other:?}"),
        }
    }

    #[test]
    fn prose_is_rejected_as_not_json() {
        let p = problem("The title is Release notes.");
        assert!(p.contains("$: not JSON"), "{p}");
    }

    #[test]
    fn the_first_error_names_its_json_path() {
        let p = problem(r#"{"title": "x", "tags": ["a", 3]}"#);
        assert!(p.contains("$.tags[1]: 3 is not of type \"string\""), "{p}");
        let p = problem(r#"{"title": "x", "tags": [], "odd key": "no"}"#);
        assert!(p.contains(r#"$["odd key"]: "#), "{p}");
        let p = problem(r#"{"tags": []}"#);
        assert!(p.contains("$: \"title\" is a required property"), "{p}");
    }

    #[test]
    fn a_valid_claim_is_its_parsed_output() {
        let out = check_claim(&schema(), " {\"title\": \"x\", \"tags\": [\"a\"]}\n");
        assert_eq!(out, Ok(Ok(json!({"title": "x", "tags": ["a"]}))));
    }

    #[test]
    fn a_schema_that_does_not_compile_is_a_policy_fault() {
        let bad = json!({"type": 12});
        let out = check_claim(&bad, "{}");
        assert!(
            out.as_ref()
                .is_err_and(|e| e.starts_with("policy.output_schema")),
            "{out:?}"
        );
    }

    #[test]
    fn only_a_verified_completion_has_an_output() {
        let s = schema();
        let verified =
            terminus_kernel::Outcome::Complete(terminus_kernel::CompleteReason::Verified);
        let forced = terminus_kernel::Outcome::Complete(terminus_kernel::CompleteReason::Forced);
        assert_eq!(
            report_output(Some(&s), verified, Some("[1]")),
            Some(json!([1]))
        );
        assert_eq!(report_output(Some(&s), forced, Some("[1]")), None);
        assert_eq!(report_output(None, verified, Some("[1]")), None);
        assert_eq!(report_output(Some(&s), verified, Some("prose")), None);
    }
}
