//! Appending a JSON string literal, still escaped as it came over the wire, to a buffer: the
//! streaming parsers borrow text and argument fragments as raw JSON and decode them straight
//! into the text they keep, so a chunk costs no allocation of its own.

use serde_json::value::RawValue;

/// What a raw JSON value held, when it was not a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotAString {
    /// `null`.
    Null,
    /// A number, an object, an array or a boolean.
    Other,
}

/// Appends the string `raw` holds to `out`, decoding its escapes (`\n`, `\"`, `\uXXXX` with
/// surrogate pairs). A lone surrogate becomes U+FFFD, as a lenient reader should.
pub(crate) fn push_raw_str(out: &mut String, raw: &RawValue) -> Result<(), NotAString> {
    let text = raw.get();
    let Some(inner) = text
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    else {
        return Err(if text == "null" {
            NotAString::Null
        } else {
            NotAString::Other
        });
    };
    push_unescaped(out, inner);
    Ok(())
}

/// Appends the body of a JSON string literal (between its quotes; serde_json has validated it)
/// with its escapes decoded.
pub(crate) fn push_unescaped(out: &mut String, mut s: &str) {
    while let Some(slash) = s.find('\\') {
        out.push_str(&s[..slash]);
        let bytes = s.as_bytes();
        let Some(&kind) = bytes.get(slash + 1) else {
            return;
        };
        let mut next = slash + 2;
        match kind {
            b'n' => out.push('\n'),
            b't' => out.push('\t'),
            b'r' => out.push('\r'),
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'u' => {
                let first = hex4(s, slash + 2);
                next = slash + 6;
                let c = match first {
                    Some(high @ 0xD800..=0xDBFF) => {
                        match (s.get(next..next + 2), hex4(s, next + 2)) {
                            (Some("\\u"), Some(low @ 0xDC00..=0xDFFF)) => {
                                next += 6;
                                char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
                            }
                            _ => None,
                        }
                    }
                    Some(code) => char::from_u32(code),
                    None => None,
                };
                out.push(c.unwrap_or('\u{FFFD}'));
            }
            // `\"`, `\\`, `\/`.
            other => out.push(char::from(other)),
        }
        s = s.get(next..).unwrap_or("");
    }
    out.push_str(s);
}

fn hex4(s: &str, at: usize) -> Option<u32> {
    s.get(at..at + 4)
        .and_then(|h| u32::from_str_radix(h, 16).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode(literal: &str) -> String {
        let raw: Box<RawValue> = serde_json::from_str(literal).expect("a JSON literal");
        let mut out = String::new();
        push_raw_str(&mut out, &raw).expect("a string");
        out
    }

    #[test]
    fn escapes_and_surrogate_pairs() {
        assert_eq!(
            decode(r#""a\"b\\c\/d\n\t\u00e9\ud83d\ude00""#),
            "a\"b\\c/d\n\té😀"
        );
        assert_eq!(decode(r#""\ud83d x""#), "\u{FFFD} x");
    }

    #[test]
    fn null_and_other_values_are_not_strings() {
        let null: Box<RawValue> = serde_json::from_str("null").expect("json");
        let arr: Box<RawValue> = serde_json::from_str("[]").expect("json");
        let mut out = String::new();
        assert_eq!(push_raw_str(&mut out, &null), Err(NotAString::Null));
        assert_eq!(push_raw_str(&mut out, &arr), Err(NotAString::Other));
    }

    proptest! {
        #[test]
        fn decodes_what_serde_json_encodes(s in any::<String>()) {
            let literal = serde_json::to_string(&s).expect("encodes");
            prop_assert_eq!(decode(&literal), s.clone());
            // And the escapes serde_json never writes (\u for every char, \/).
            let mut all_u = String::from("\"");
            for unit in s.encode_utf16() {
                all_u.push_str(&format!("\\u{unit:04x}"));
            }
            all_u.push('"');
            prop_assert_eq!(decode(&all_u), s);
        }
    }
}
