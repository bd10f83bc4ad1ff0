//! The media types an agent takes, read from its card (`defaultInputModes` and every
//! skill's `inputModes`), and the check of an incoming message's parts against them: a
//! part of another type is refused with A2A's ContentTypeNotSupportedError (-32005;
//! HTTP 415 on the HTTP+JSON binding) before the agent sees the message.
//!
//! A part's media type is its `mediaType` when it has one (parameters such as
//! `charset` ignored, case-insensitive); otherwise a text part is `text/plain`, a data
//! part `application/json`, and a raw or url part `application/octet-stream` (RFC 2046's
//! type for content nobody named), which an agent takes only when its card says so.
//! A message does not say which skill it is for, so the agent takes what any of its
//! skills or its defaults take. A card that declares no input modes at all takes any
//! part (every Sagaplane agent declares its own).

use serde_json::Value;

use crate::sdk::{A2AError, Message, Part, PartContent, error_code};

/// The longest media type quoted back in a refusal.
const MAX_SHOWN_MEDIA_TYPE: usize = 100;

/// The media types (or `type/*`, `*/*` ranges) an agent takes; empty means any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InputModes {
    accepted: Vec<String>,
}

impl InputModes {
    /// The modes a card declares: its defaults and every skill's.
    pub fn from_card(card: &Value) -> Self {
        let mut accepted: Vec<String> = Vec::new();
        let skills = card.get("skills").and_then(Value::as_array);
        let declared = std::iter::once(card.get("defaultInputModes"))
            .chain(skills.into_iter().flatten().map(|s| s.get("inputModes")))
            .filter_map(|modes| modes.and_then(Value::as_array))
            .flatten()
            .filter_map(Value::as_str);
        for mode in declared {
            let mode = essence(mode);
            if !mode.is_empty() && !accepted.contains(&mode) {
                accepted.push(mode);
            }
        }
        Self { accepted }
    }

    /// Refuses a message with a part whose media type the agent does not take.
    pub fn check(&self, message: &Message) -> Result<(), A2AError> {
        if self.accepted.is_empty() {
            return Ok(());
        }
        for (index, part) in message.parts.iter().enumerate() {
            let media_type = media_type_of(part);
            if !self.accepted.iter().any(|mode| covers(mode, &media_type)) {
                let shown: String = media_type.chars().take(MAX_SHOWN_MEDIA_TYPE).collect();
                return Err(A2AError::new(
                    error_code::CONTENT_TYPE_NOT_SUPPORTED,
                    format!(
                        "message.parts[{index}] is {shown:?}, which this agent does not take; \
                         it takes {}",
                        self.accepted.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The media type a part is read as (see the module's comment).
fn media_type_of(part: &Part) -> String {
    if let Some(named) = part.media_type.as_deref().map(essence)
        && !named.is_empty()
    {
        return named;
    }
    match &part.content {
        PartContent::Text(_) => "text/plain",
        PartContent::Data(_) => "application/json",
        PartContent::Raw(_) | PartContent::Url(_) => "application/octet-stream",
    }
    .to_owned()
}

/// `Text/Plain; charset=utf-8` -> `text/plain`.
fn essence(media_type: &str) -> String {
    media_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Whether the mode (a type or a `type/*` or `*/*` range) covers the media type.
fn covers(mode: &str, media_type: &str) -> bool {
    mode == "*/*"
        || mode == media_type
        || mode
            .strip_suffix('*')
            .is_some_and(|prefix| prefix.ends_with('/') && media_type.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdk::Role;
    use serde_json::json;

    fn message(parts: Vec<Part>) -> Message {
        Message {
            message_id: "m".into(),
            context_id: None,
            task_id: None,
            role: Role::User,
            parts,
            metadata: None,
            extensions: None,
            reference_task_ids: None,
        }
    }

    fn code(modes: &InputModes, parts: Vec<Part>) -> Option<i32> {
        modes.check(&message(parts)).err().map(|e| e.code)
    }

    #[test]
    fn parts_without_a_media_type_are_read_by_kind() {
        let json_only = InputModes::from_card(&json!({"defaultInputModes": ["application/json"]}));
        assert_eq!(code(&json_only, vec![Part::data(json!({}))]), None);
        assert_eq!(code(&json_only, vec![Part::text("hi")]), Some(-32005));
        assert_eq!(
            code(&json_only, vec![Part::raw(b"x".to_vec())]),
            Some(-32005)
        );
        assert_eq!(
            code(&json_only, vec![Part::data(json!({})), Part::text("note")]),
            Some(-32005),
            "every part must be taken"
        );
        let bytes =
            InputModes::from_card(&json!({"defaultInputModes": ["application/octet-stream"]}));
        assert_eq!(code(&bytes, vec![Part::url("https://x.invalid/f")]), None);
    }

    #[test]
    fn a_named_media_type_is_compared_without_parameters_or_case() {
        let modes = InputModes::from_card(&json!({"defaultInputModes": ["text/plain"]}));
        let named = |media_type: &str| Part::text("hi").with_media_type(media_type);
        assert_eq!(code(&modes, vec![named("Text/Plain; charset=utf-8")]), None);
        assert_eq!(
            code(&modes, vec![named("")]),
            None,
            "empty reads as unnamed"
        );
        assert_eq!(code(&modes, vec![named("text/markdown")]), Some(-32005));
        let raw = Part::raw(b"tck".to_vec()).with_media_type("application/x-unsupported");
        assert_eq!(code(&modes, vec![raw]), Some(-32005));
    }

    #[test]
    fn skills_add_to_the_defaults_and_ranges_cover_subtypes() {
        let modes = InputModes::from_card(&json!({
            "defaultInputModes": ["text/plain"],
            "skills": [{"inputModes": ["image/*"]}, {"inputModes": ["application/json"]}]
        }));
        assert_eq!(code(&modes, vec![Part::data(json!(1))]), None);
        let png = Part::raw(vec![0]).with_media_type("image/png");
        assert_eq!(code(&modes, vec![png]), None);
        let pdf = Part::raw(vec![0]).with_media_type("application/pdf");
        assert_eq!(code(&modes, vec![pdf.clone()]), Some(-32005));
        let any = InputModes::from_card(&json!({"defaultInputModes": ["*/*"]}));
        assert_eq!(code(&any, vec![pdf.clone()]), None);
        let undeclared = InputModes::from_card(&json!({"defaultInputModes": []}));
        assert_eq!(
            code(&undeclared, vec![pdf]),
            None,
            "no declaration: any part"
        );
    }

    #[test]
    fn the_refusal_quotes_a_bounded_media_type() {
        let modes = InputModes::from_card(&json!({"defaultInputModes": ["text/plain"]}));
        let long = format!("application/{}", "x\n".repeat(5_000));
        let error = modes
            .check(&message(vec![Part::raw(vec![0]).with_media_type(long)]))
            .unwrap_err();
        assert!(error.message.len() < 300, "{}", error.message);
        assert!(!error.message.contains('\n'), "quoted, escaped");
    }
}
