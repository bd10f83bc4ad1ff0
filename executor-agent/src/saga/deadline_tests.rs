//! The undo deadline through the engine: the earlier of the reported time and the TTL,
//! the TTL alone when the result says nothing usable, an expired undo put to a person
//! instead of being called, the ledger's `undoDeadline`, and replay finding the same.

use serde_json::{Value, json};

use super::deadline::{Reported, SetBy, rfc3339};
use super::model::{Forward, Phase, Undo};
use super::tests::supplier;
use super::*;

const T0: i64 = 1_800_000_000_000;
const DAY_MS: i64 = 86_400_000;

fn ok(response: Value) -> CallOutcome {
    CallOutcome::Succeeded { response }
}

/// Runs the supplier saga: vendor.create answers at `T0 + 10`, budget.reserve with
/// `reserve` at `reserved_at`, then sandbox.provision declines at `fails_at`. Returns the
/// events fed (the journal) and the commands of the last one.
fn reserve_then_fail(
    saga: &mut Saga,
    reserve: Value,
    reserved_at: i64,
    fails_at: i64,
) -> (Vec<Event>, Vec<Command>) {
    let events = vec![
        Event::Start { now_ms: T0 },
        Event::Result {
            target: Target::Forward(0),
            attempt: 1,
            outcome: ok(json!({"vendorId": "v_1"})),
            now_ms: T0 + 10,
        },
        Event::Result {
            target: Target::Forward(1),
            attempt: 1,
            outcome: ok(reserve),
            now_ms: reserved_at,
        },
        Event::Result {
            target: Target::Forward(2),
            attempt: 1,
            outcome: CallOutcome::failed("declined"),
            now_ms: fails_at,
        },
    ];
    let mut last = Vec::new();
    for event in &events {
        last = saga.step(event.clone());
    }
    (events, last)
}

fn invoked(commands: &[Command]) -> Vec<String> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Invoke(inv) => Some(inv.call.skill.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_hold_the_tool_reports_expired_is_put_to_a_person_instead_of_released() {
    let mut saga = supplier();
    // The hold lapses 20 ms after it was made, long before the card's 24 hours.
    let hold = json!({"reservationId": "r_1", "holdExpiresAt": rfc3339(Some(T0 + 30))});
    let (_, commands) = reserve_then_fail(&mut saga, hold, T0 + 40, T0 + 1_000);
    assert_eq!(invoked(&commands), Vec::<String>::new(), "{commands:?}");
    let Phase::Paused { reason, .. } = &saga.phase else {
        panic!("{:?}", saga.phase);
    };
    assert!(
        reason.starts_with("step s1: the undo expired at 2027-01-15T08:00:00.030Z"),
        "{reason}"
    );
    assert!(
        matches!(&saga.records[1].undo, Undo::Unavailable { reason } if reason.contains("as the tool's result reported")),
        "{:?}",
        saga.records[1].undo
    );
    let deadline = saga.records[1].undo_deadline.clone().unwrap();
    assert_eq!(deadline.at_ms, Some(T0 + 30));
    assert_eq!(deadline.set_by, Some(SetBy::Reported));
    assert!(deadline.earlier_than_declared);
    let shown = &saga.ledger()["steps"][1];
    assert_eq!(
        shown["undoDeadline"],
        json!({"at": "2027-01-15T08:00:00.030Z", "setBy": "reported",
               "reported": "2027-01-15T08:00:00.030Z", "earlierThanDeclared": true,
               "open": false}),
        "the undo it bounded can no longer be run"
    );
    assert_eq!(shown["undo"]["state"], "unavailable");
    // The vendor's undo waits behind the person's answer; the sandbox had nothing to undo.
    assert_eq!(saga.records[0].undo, Undo::Pending);
    assert_eq!(saga.records[2].undo, Undo::NothingToUndo);
}

#[test]
fn before_a_reported_deadline_the_undo_is_called() {
    let mut saga = supplier();
    let hold = json!({"reservationId": "r_1", "holdExpiresAt": rfc3339(Some(T0 + 5_000))});
    let (_, commands) = reserve_then_fail(&mut saga, hold, T0 + 40, T0 + 1_000);
    assert_eq!(invoked(&commands), ["budget.release"]);
}

#[test]
fn a_reported_deadline_after_the_ttl_leaves_the_ttl_in_force() {
    let mut saga = supplier();
    let hold = json!({"reservationId": "r_1", "holdExpiresAt": rfc3339(Some(T0 + 2 * DAY_MS))});
    let (_, commands) = reserve_then_fail(&mut saga, hold, T0 + 40, T0 + DAY_MS + 41);
    let deadline = saga.records[1].undo_deadline.clone().unwrap();
    assert_eq!(deadline.at_ms, Some(T0 + 40 + DAY_MS));
    assert_eq!(deadline.set_by, Some(SetBy::UndoTtlSeconds));
    assert_eq!(
        deadline.reported,
        Reported::At {
            at_ms: T0 + 2 * DAY_MS
        }
    );
    assert!(!deadline.earlier_than_declared);
    assert_eq!(invoked(&commands), Vec::<String>::new());
    assert!(
        matches!(&saga.records[1].undo, Undo::Unavailable { reason } if reason.contains("undoTtlSeconds")),
        "{:?}",
        saga.records[1].undo
    );
}

#[test]
fn an_honest_tool_is_not_misdeclaring_because_its_answer_took_time() {
    // The call went out at T0 + 10 (vendor.create's answer); the tool reserved at T0 + 15
    // for exactly its card's 24 hours; its answer arrived at T0 + 40.
    let mut saga = supplier();
    let hold = json!({"reservationId": "r_1", "holdExpiresAt": rfc3339(Some(T0 + 15 + DAY_MS))});
    let (_, commands) = reserve_then_fail(&mut saga, hold, T0 + 40, T0 + 1_000);
    let deadline = saga.records[1].undo_deadline.clone().unwrap();
    assert_eq!(saga.records[1].started_at_ms, Some(T0 + 10));
    assert_eq!(deadline.at_ms, Some(T0 + 15 + DAY_MS));
    assert_eq!(deadline.set_by, Some(SetBy::Reported));
    assert!(!deadline.earlier_than_declared);
    assert_eq!(invoked(&commands), ["budget.release"]);
}

#[test]
fn a_missing_or_unreadable_deadline_falls_back_to_the_ttl() {
    for (hold, says) in [
        (json!({"reservationId": "r_1"}), "has no deadline"),
        (
            json!({"reservationId": "r_1", "holdExpiresAt": "next tuesday"}),
            "\"next tuesday\", not an RFC 3339 time",
        ),
        (
            json!({"reservationId": "r_1", "holdExpiresAt": 1_800_000_000}),
            "1800000000, not an RFC 3339 time",
        ),
        (
            json!({"reservationId": "r_1", "holdExpiresAt": "9".repeat(10_000)}),
            "…\", not an RFC 3339 time",
        ),
    ] {
        let mut saga = supplier();
        let (_, commands) = reserve_then_fail(&mut saga, hold.clone(), T0 + 40, T0 + 1_000);
        let deadline = saga.records[1].undo_deadline.clone().unwrap();
        let Reported::Unreadable { reason } = &deadline.reported else {
            panic!("{hold}: {deadline:?}");
        };
        assert!(reason.contains(says), "{hold}: {reason}");
        assert!(reason.len() < 300, "a long value is cut: {reason}");
        assert_eq!(deadline.at_ms, Some(T0 + 40 + DAY_MS), "{hold}");
        assert_eq!(deadline.set_by, Some(SetBy::UndoTtlSeconds));
        assert!(!deadline.earlier_than_declared);
        assert_eq!(invoked(&commands), ["budget.release"], "{hold}");
        assert!(
            saga.ledger()["steps"][1]["undoDeadline"]["reportedUnreadable"]
                .as_str()
                .is_some_and(|r| r.contains(says))
        );
    }
}

#[test]
fn steps_without_an_undo_have_no_deadline_and_the_ttl_alone_applies_without_a_declaration() {
    let mut saga = supplier();
    let hold = json!({"reservationId": "r_1", "holdExpiresAt": rfc3339(Some(T0 + 30))});
    reserve_then_fail(&mut saga, hold, T0 + 40, T0 + 1_000);
    // vendor.create declares no TTL and no reported deadline: it never expires.
    let vendor = saga.records[0].undo_deadline.clone().unwrap();
    assert_eq!(
        (vendor.at_ms, vendor.reported),
        (None, Reported::NotDeclared)
    );
    assert_eq!(
        saga.ledger()["steps"][0]["undoDeadline"],
        json!({"at": null, "setBy": null, "open": true})
    );
    // The failed sandbox step never succeeded: no deadline, and none shown.
    assert_eq!(saga.records[2].undo_deadline, None);
    assert!(saga.ledger()["steps"][2].get("undoDeadline").is_none());
}

#[test]
fn replay_finds_the_same_deadlines_from_the_journal_alone() {
    let mut saga = supplier();
    let hold = json!({"reservationId": "r_1", "holdExpiresAt": rfc3339(Some(T0 + 30))});
    let (journal, _) = reserve_then_fail(&mut saga, hold, T0 + 40, T0 + 1_000);
    let mut replayed = supplier();
    for event in journal {
        replayed.step(event);
    }
    assert_eq!(replayed, saga);
    assert_eq!(replayed.ledger(), saga.ledger());
    assert!(matches!(saga.records[1].forward, Forward::Succeeded { .. }));
}
