//! The published JSON Schemas (`spec/schemas/*.schema.json`, draft 2020-12) held against
//! the Rust types they describe, so that neither drifts from the other:
//!
//! - every schema is there, compiles, has a unique `$id` and describes every property
//!   (`published`);
//! - every example document in the repository validates, and the Rust parser takes it
//!   (`examples`);
//! - on documents mutated from those examples, a schema accepts exactly what the Rust
//!   parser accepts (`schema.is_valid(doc) == parser(doc).is_ok()`): one to three random
//!   mutations at a time (proptest, `mutations`), and every single mutation of every node
//!   (a sweep, `sweep`), but for the one mutation class `mutations::mutate` names, which
//!   JSON Schema cannot express (`forms`);
//! - date-times agree with the parsers field by field, RFC 3339 and nothing more
//!   (`dates`);
//! - the A2A documents (a tool call, a tool's answer), for which this crate has no parser,
//!   are checked on documents shaped as the executor and the A2A SDK write them
//!   (`tool_messages`).
//!
//! The parsers of plans, mandates, revocations and skill declarations are strict
//! (`shared-types/src/strict.rs`), and so is the executor's reading of a person's answer
//! (`executor-agent/src/answers.rs`, replicated in `answer`, since this crate cannot
//! depend on the executor): an object only as a JSON object, never as the array of its
//! members' values that serde's derive also reads; an enum value only as a string, never
//! as serde's one-member object `{"variant": null}`; a date-time only as RFC 3339. The
//! mutations still write those forms, and both sides must refuse them.
//!
//! One test target (Cargo builds `tests/schemas/main.rs` as `schemas`), in modules so
//! that the schemas are loaded and compiled once for all of them (`registry`).

mod answer;
mod dates;
mod examples;
mod forms;
mod kind;
mod mutations;
mod published;
mod registry;
mod sweep;
mod tool_messages;
