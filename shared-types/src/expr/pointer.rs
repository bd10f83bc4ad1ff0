//! RFC 6901 JSON pointers: parsing with `~1`/`~0` decoding, escaping, and lookup.

use std::fmt;

use serde_json::Value;

use crate::error::{Error, Result};

/// A parsed JSON pointer: the sequence of unescaped reference tokens.
///
/// The empty pointer (`""`) refers to the whole document.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JsonPointer {
    tokens: Vec<String>,
}

impl JsonPointer {
    /// The pointer to the whole document.
    pub fn root() -> Self {
        Self { tokens: Vec::new() }
    }

    /// Builds a pointer from unescaped tokens.
    pub fn from_tokens<I, S>(tokens: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            tokens: tokens.into_iter().map(Into::into).collect(),
        }
    }

    /// Parses the string form (`/a/b~1c`). Decoding replaces `~1` before `~0`,
    /// as RFC 6901 §4 requires, so `~01` decodes to `~1` and not to `/`.
    pub fn parse(text: &str) -> Result<Self> {
        if text.is_empty() {
            return Ok(Self::root());
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(Error::Expr(format!(
                "a JSON pointer must be empty or start with '/', found {text:?}"
            )));
        };
        let mut tokens = Vec::new();
        for raw in rest.split('/') {
            tokens.push(unescape_token(raw).ok_or_else(|| {
                Error::Expr(format!(
                    "'~' must be followed by '0' or '1' in JSON pointer {text:?}"
                ))
            })?);
        }
        Ok(Self { tokens })
    }

    /// The unescaped reference tokens.
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// Looks the pointer up in `doc`. `None` when any token does not resolve.
    pub fn resolve<'v>(&self, doc: &'v Value) -> Option<&'v Value> {
        let mut current = doc;
        for token in &self.tokens {
            current = match current {
                Value::Object(map) => map.get(token)?,
                Value::Array(items) => items.get(array_index(token)?)?,
                _ => return None,
            };
        }
        Some(current)
    }
}

/// Array indices are decimal digits without leading zeros ("0", "1", "10"; not "01", "-", "+1").
pub(crate) fn array_index(token: &str) -> Option<usize> {
    let leading_zero = token.len() > 1 && token.starts_with('0');
    if token.is_empty() || leading_zero || !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    token.parse().ok()
}

fn unescape_token(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// Escapes one token: `~` becomes `~0` first, then `/` becomes `~1`.
pub fn escape_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

impl fmt::Display for JsonPointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for token in &self.tokens {
            write!(f, "/{}", escape_token(token))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The examples of RFC 6901 §5.
    #[test]
    fn rfc6901_examples_resolve() {
        let doc = json!({
            "foo": ["bar", "baz"], "": 0, "a/b": 1, "c%d": 2, "e^f": 3,
            "g|h": 4, "i\\j": 5, "k\"l": 6, " ": 7, "m~n": 8
        });
        let cases: &[(&str, Value)] = &[
            ("", doc.clone()),
            ("/foo", json!(["bar", "baz"])),
            ("/foo/0", json!("bar")),
            ("/", json!(0)),
            ("/a~1b", json!(1)),
            ("/c%d", json!(2)),
            ("/e^f", json!(3)),
            ("/g|h", json!(4)),
            ("/i\\j", json!(5)),
            ("/k\"l", json!(6)),
            ("/ ", json!(7)),
            ("/m~0n", json!(8)),
        ];
        for (text, expected) in cases {
            let pointer = JsonPointer::parse(text).unwrap();
            assert_eq!(pointer.resolve(&doc), Some(expected), "pointer {text:?}");
            assert_eq!(&pointer.to_string(), text);
        }
    }

    #[test]
    fn decoding_order_is_tilde_one_first() {
        let pointer = JsonPointer::parse("/~01").unwrap();
        assert_eq!(pointer.tokens(), ["~1"]);
        let doc = json!({"~1": "right", "/": "wrong"});
        assert_eq!(pointer.resolve(&doc), Some(&json!("right")));
    }

    #[test]
    fn malformed_pointers_are_errors() {
        assert!(
            JsonPointer::parse("foo")
                .unwrap_err()
                .to_string()
                .contains("start with")
        );
        assert!(
            JsonPointer::parse("/a~2")
                .unwrap_err()
                .to_string()
                .contains("'~'")
        );
        assert!(JsonPointer::parse("/a~").is_err());
    }

    #[test]
    fn array_indices_are_strict() {
        let doc = json!({"a": [10, 11]});
        assert_eq!(
            JsonPointer::parse("/a/1").unwrap().resolve(&doc),
            Some(&json!(11))
        );
        for bad in ["/a/01", "/a/-", "/a/+1", "/a/2", "/a/"] {
            assert_eq!(
                JsonPointer::parse(bad).unwrap().resolve(&doc),
                None,
                "{bad}"
            );
        }
    }
}
