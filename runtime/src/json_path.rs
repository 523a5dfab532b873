//! Reading JSON files whose errors name the JSON path at fault (`$.agents[2].id`): the scenario
//! format and plan files read theirs with [`read`], so both word a problem the same way.

use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;

/// Why a JSON text is not the value asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// The JSON path of the value at fault, `$` for the whole text.
    pub path: String,
    /// What is wrong with it (`invalid JSON: ...` for text that is not JSON).
    pub problem: String,
    /// Line and column (1-based), when the reader knows them.
    pub position: Option<(usize, usize)>,
}

/// Reads `json` as a `T`; an error names the JSON path at fault, the problem and the position.
pub fn read<T: DeserializeOwned>(json: &str) -> Result<T, JsonError> {
    let mut de = serde_json::Deserializer::from_str(json);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let mut path = String::from("$");
        for segment in e.path().iter() {
            match segment {
                Segment::Seq { index } => path.push_str(&format!("[{index}]")),
                Segment::Map { key } => push_key(&mut path, key),
                Segment::Enum { variant } => push_key(&mut path, variant),
                // Where the reader could not tell (a syntax error): the position says it.
                _ => {}
            }
        }
        error(path, e.inner())
    })?;
    de.end().map_err(|e| error("$".into(), &e))?;
    Ok(value)
}

fn error(path: String, e: &serde_json::Error) -> JsonError {
    // serde_json appends " at line L column C"; the position is kept apart.
    let mut problem = e.to_string();
    if let Some(at) = problem.rfind(" at line ") {
        problem.truncate(at);
    }
    if e.is_syntax() || e.is_eof() {
        problem = format!("invalid JSON: {problem}");
    }
    JsonError {
        path,
        problem,
        position: (e.line() > 0).then(|| (e.line(), e.column())),
    }
}

/// Appends `key` to a `$`-notation path: `.key` for a plain name (ASCII letters, digits, `_`
/// and `-`), `["key"]` (a JSON string literal, unambiguous for any key) otherwise.
pub fn push_key(path: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        path.push('.');
        path.push_str(key);
    } else {
        path.push('[');
        path.push_str(&serde_json::Value::String(key.to_owned()).to_string());
        path.push(']');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct File {
        items: Vec<BTreeMap<String, u32>>,
    }

    #[test]
    fn errors_name_the_path_and_position() {
        let e = read::<File>(r#"{"items": [{"a": 1}, {"odd key": "x"}]}"#)
            .expect_err("a string is no number");
        assert_eq!(e.path, r#"$.items[1]["odd key"]"#);
        assert!(e.problem.starts_with("invalid type: string"), "{e:?}");
        assert_eq!(e.position, Some((1, 36)));

        let e = read::<File>("{\"items\": [").expect_err("cut short");
        assert_eq!(e.path, "$.items");
        assert!(e.problem.starts_with("invalid JSON: EOF"), "{e:?}");

        let e = read::<File>(r#"{"items": []} 1"#).expect_err("trailing");
        assert_eq!(e.path, "$");
        assert!(e.problem.starts_with("invalid JSON: trailing"), "{e:?}");
    }
}
