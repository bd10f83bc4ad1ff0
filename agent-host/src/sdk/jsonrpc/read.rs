//! `SendMessage`'s parameters read with serde into the SDK's types, skipping the SDK's
//! trip through protobuf (`protojson_conv::from_value`: every data part rebuilt as a
//! protobuf `Value` and back, its integers turned into doubles on the way; about 5% of
//! the executor's CPU on the whole path, and a plan's integers then read back from
//! doubles).
//!
//! The two readings agree only on the form every official client sends: the wire's
//! camelCase names, one content per part, enum values by name, no raw bytes. The SDK's
//! reading takes more (the proto's snake_case names, numbers as strings, enum numbers)
//! and refuses what our types' serde forgives (a part with two contents), so this reader
//! takes a request only when every member it holds is one both read alike, and leaves any
//! other to the SDK, which reads, answers and refuses it as before. What a data part or a
//! metadata map holds is the sender's JSON either way; here its numbers stay as they were
//! sent.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::sdk::SendMessageRequest;

/// The request, when its parameters are in the form both readings agree on.
pub(super) fn send_message(params: &Value) -> Option<SendMessageRequest> {
    if !plain_request(params) {
        return None;
    }
    SendMessageRequest::deserialize(params)
        .ok()
        .map(as_the_sdk_holds)
}

/// `request` with what the SDK's reading holds as absent made absent: an empty string or
/// list where the proto has a plain field, `returnImmediately: false`, empty metadata on
/// a part (the proto cannot tell these from a member not sent).
fn as_the_sdk_holds(mut request: SendMessageRequest) -> SendMessageRequest {
    let message = &mut request.message;
    message.context_id.take_if(|id| id.is_empty());
    message.task_id.take_if(|id| id.is_empty());
    message.extensions.take_if(|uris| uris.is_empty());
    message.reference_task_ids.take_if(|ids| ids.is_empty());
    for part in &mut message.parts {
        part.filename.take_if(|name| name.is_empty());
        part.media_type.take_if(|media_type| media_type.is_empty());
        part.metadata.take_if(|metadata| metadata.is_empty());
    }
    if let Some(configuration) = request.configuration.as_mut() {
        configuration
            .accepted_output_modes
            .take_if(|modes| modes.is_empty());
        configuration
            .return_immediately
            .take_if(|immediately| !*immediately);
    }
    request.tenant.take_if(|tenant| tenant.is_empty());
    request
}

/// A member's name and what its value must be.
type Member = (&'static str, fn(&Value) -> bool);

/// Whether `value` is an object holding only `members`, each passing its check.
fn object_of(value: &Value, members: &[Member]) -> bool {
    let Value::Object(map) = value else {
        return false;
    };
    map.iter().all(|(name, member)| {
        members
            .iter()
            .any(|(known, check)| known == name && check(member))
    })
}

fn plain_request(params: &Value) -> bool {
    object_of(
        params,
        &[
            ("message", plain_message),
            ("configuration", plain_configuration),
            ("metadata", Value::is_object),
            ("tenant", Value::is_string),
        ],
    )
}

fn plain_message(message: &Value) -> bool {
    object_of(
        message,
        &[
            ("messageId", Value::is_string),
            ("contextId", Value::is_string),
            ("taskId", Value::is_string),
            ("role", |role| {
                matches!(role.as_str(), Some("ROLE_USER" | "ROLE_AGENT"))
            }),
            ("parts", |parts| {
                parts
                    .as_array()
                    .is_some_and(|parts| parts.iter().all(plain_part))
            }),
            ("metadata", Value::is_object),
            ("extensions", strings),
            ("referenceTaskIds", strings),
        ],
    )
}

/// A part with exactly one content, text, a URL or data that is not `null` (the SDK reads a
/// `null` one as no content); raw bytes are left to the SDK, whose base64 reading is its
/// own.
fn plain_part(part: &Value) -> bool {
    let contents = |map: &Map<String, Value>| {
        ["text", "raw", "url", "data"]
            .iter()
            .filter(|c| map.contains_key(**c))
            .count()
    };
    part.as_object().is_some_and(|map| contents(map) == 1)
        && object_of(
            part,
            &[
                ("text", Value::is_string),
                ("url", Value::is_string),
                ("data", |data| !data.is_null()),
                ("filename", Value::is_string),
                ("mediaType", Value::is_string),
                ("metadata", Value::is_object),
            ],
        )
}

/// Configuration without a push notification config (rare on this path; the SDK reads
/// it), and a history length that is an `i32` written as an integer.
fn plain_configuration(configuration: &Value) -> bool {
    object_of(
        configuration,
        &[
            ("acceptedOutputModes", strings),
            ("historyLength", |length| {
                length.as_i64().is_some_and(|l| i32::try_from(l).is_ok())
            }),
            ("returnImmediately", Value::is_boolean),
        ],
    )
}

fn strings(value: &Value) -> bool {
    value
        .as_array()
        .is_some_and(|items| items.iter().all(Value::is_string))
}
