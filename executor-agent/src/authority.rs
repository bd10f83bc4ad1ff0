//! Authority checked at the moment of effect. A plan's mandate is checked when it is
//! accepted, and a revocation heard by the replica that drives a saga reaches it as an
//! event; but a revocation acknowledged by another replica, or an expiry the saga's timer
//! has not fired for yet, must stop the next forward call all the same. So immediately
//! before a forward call at or before the point of no return is journaled as made, the
//! driver reads whether the saga's mandate is still in force: revoked (what the database
//! holds now) or past `notAfter` (the clock now). If it is not, the call is not made: the
//! engine hears the lapse, then that the call failed definitely without being made, and
//! unwinds; all of it journaled in the one write the call's intent would have been.
//! Past the point of no return nothing is checked: the remaining steps complete a
//! commitment already made.

use async_trait::async_trait;

use crate::error::Result;
use crate::journal::Entry;
use crate::mandates::MandateBook;
use crate::saga::{CallOutcome, Command, Event, FailureClass, Saga, Target, Timer};

/// Where the driver reads whether a principal revoked a mandate: the mandates' tables
/// (`MandateBook`), which every replica shares.
#[async_trait]
pub trait Revocations: Send + Sync + 'static {
    async fn is_revoked(&self, principal_key: &str, mandate_id: &str) -> Result<bool>;
}

#[async_trait]
impl Revocations for MandateBook {
    async fn is_revoked(&self, principal_key: &str, mandate_id: &str) -> Result<bool> {
        MandateBook::is_revoked(self, principal_key, mandate_id).await
    }
}

/// Why a saga's mandate no longer allows a forward call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lapse {
    Revoked,
    Expired,
}

/// The forward calls among `commands` that authority must allow before they are made:
/// those at or before the point of no return, of a saga held against a mandate (several
/// when independent branches start at once).
pub fn guarded(saga: &Saga, commands: &[Command]) -> Vec<(Target, u32)> {
    if saga.spec.mandate.is_none() {
        return Vec::new();
    }
    commands
        .iter()
        .filter_map(|command| match command {
            Command::Invoke(invocation) => match invocation.target {
                Target::Forward(i) if saga.spec.point_of_no_return.is_none_or(|p| i <= p) => {
                    Some((invocation.target, invocation.attempt))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// Whether the mandate of `saga` has lapsed at `now_ms`, read from `book` (revocations)
/// and the saga's spec (`notAfter`).
pub async fn lapse(saga: &Saga, book: &dyn Revocations, now_ms: i64) -> Result<Option<Lapse>> {
    let Some(hold) = &saga.spec.mandate else {
        return Ok(None);
    };
    if book
        .is_revoked(&hold.principal_key, &hold.mandate_id)
        .await?
    {
        return Ok(Some(Lapse::Revoked));
    }
    Ok(expired(saga, now_ms))
}

/// Whether the mandate of `saga` has expired at `now_ms` (`notAfter`): the half of
/// `lapse` a journal that checks revocations in its writes leaves to the driver.
pub fn expired(saga: &Saga, now_ms: i64) -> Option<Lapse> {
    let held = saga.spec.mandate.is_some();
    (held && now_ms >= saga.spec.expires_at_ms).then_some(Lapse::Expired)
}

/// The entries an event and the commands it led to are journaled as: the event, then the
/// intent of each call.
pub fn entries_of(event: Event, commands: &[Command]) -> Vec<Entry> {
    let mut entries = vec![Entry::Event(event)];
    entries.extend(commands.iter().filter_map(|c| match c {
        Command::Invoke(invocation) => Some(Entry::Intent(invocation.clone())),
        _ => None,
    }));
    entries
}

/// The calls `calls` that stepping `event` decided are not made, for `lapse`: the engine
/// hears the lapse, then that each call failed definitely having never been made. No
/// intent is journaled for them, so replaying these entries decides them and answers
/// them the same way, and recovery never makes them. Returns the entries to journal and
/// the commands to act on.
pub fn not_made(
    saga: &mut Saga,
    event: Event,
    mut commands: Vec<Command>,
    calls: &[(Target, u32)],
    lapse: Lapse,
    now_ms: i64,
) -> (Vec<Entry>, Vec<Command>) {
    commands.retain(|c| !matches!(c, Command::Invoke(i) if calls.contains(&(i.target, i.attempt))));
    let mut entries = entries_of(event, &commands);
    let (heard, why) = match lapse {
        Lapse::Revoked => (
            Event::MandateRevoked { now_ms },
            "not made: the mandate was revoked before the call",
        ),
        Lapse::Expired => (
            Event::TimerFired {
                timer: Timer::MandateExpiry,
                now_ms,
            },
            "not made: the mandate had expired before the call",
        ),
    };
    let failed = calls.iter().map(|&(target, attempt)| Event::Result {
        target,
        attempt,
        outcome: CallOutcome::Failed {
            reason: why.into(),
            failure: Some(FailureClass::Permanent),
        },
        now_ms,
    });
    for event in std::iter::once(heard).chain(failed) {
        let more = saga.step(event.clone());
        entries.extend(entries_of(event, &more));
        commands.extend(more);
    }
    (entries, commands)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::saga::spec::MandateHold;
    use crate::saga::tests::{ok, supplier};
    use crate::saga::{Ending, Invocation};

    const T0: i64 = 1_800_000_000_000;

    /// The supplier saga held against a mandate, stepped (every call succeeding) until an
    /// event decides the forward call of step `step`: the saga, the journal before that
    /// event, the event and its commands.
    fn deciding(step: usize) -> (Saga, Vec<Entry>, Event, Vec<Command>) {
        let mut saga = supplier();
        saga.spec_mut().mandate = Some(MandateHold {
            principal_key: "p".into(),
            mandate_id: "md".into(),
            principal: "P".into(),
            budget: serde_json::from_value(
                serde_json::json!({"currency": "EUR", "amountMinor": 100000}),
            )
            .unwrap(),
            max_sagas: None,
            document_sha256: String::new(),
            reserved_minor: 0,
            spend_minor: vec![0; 6],
        });
        saga.spec_mut().expires_at_ms = T0 + 1_000_000;
        let mut journal = Vec::new();
        let mut event = Event::Start { now_ms: T0 };
        loop {
            let commands = saga.step(event.clone());
            let invocation = first_call(&commands).expect("a call is decided");
            if invocation.target == Target::Forward(step) {
                return (saga, journal, event, commands);
            }
            journal.extend(entries_of(event, &commands));
            event = answered(&invocation);
        }
    }

    fn first_call(commands: &[Command]) -> Option<Invocation> {
        commands.iter().find_map(|c| match c {
            Command::Invoke(inv) => Some(inv.clone()),
            _ => None,
        })
    }

    fn answered(invocation: &Invocation) -> Event {
        Event::Result {
            target: invocation.target,
            attempt: invocation.attempt,
            outcome: ok(invocation),
            now_ms: T0 + 10,
        }
    }

    #[test]
    fn a_call_not_allowed_is_not_journaled_as_made_and_the_saga_unwinds() {
        for (lapse, cause) in [
            (Lapse::Revoked, "the mandate was revoked"),
            (Lapse::Expired, "the mandate expired"),
        ] {
            let (mut saga, mut journal, event, commands) = deciding(2);
            let (entries, commands) = not_made(
                &mut saga,
                event,
                commands,
                &[(Target::Forward(2), 1)],
                lapse,
                T0 + 20,
            );
            let intents: Vec<Target> = entries
                .iter()
                .filter_map(|e| match e {
                    Entry::Intent(i) => Some(i.target),
                    Entry::Event(_) => None,
                })
                .collect();
            // No intent for s2: the compensation of s1 is the next call.
            assert_eq!(intents, [Target::Compensation(1)], "{lapse:?}");
            assert_eq!(
                first_call(&commands).map(|i| i.target),
                Some(Target::Compensation(1))
            );
            // Replaying what is journaled rebuilds the same saga and never makes s2.
            journal.extend(entries);
            let recovered = crate::recovery::replay(saga.spec.clone(), &journal, T0 + 30).unwrap();
            assert_eq!(recovered.saga.records, saga.records);
            // The compensation's intent is journaled: made as far as recovery knows.
            assert!(
                matches!(
                    recovered.lost.as_slice(),
                    [Event::InFlightLost {
                        target: Target::Compensation(1),
                        ..
                    }]
                ),
                "{:?}",
                recovered.lost
            );
            assert!(
                recovered
                    .to_invoke
                    .iter()
                    .all(|i| i.target != Target::Forward(2)),
                "{:?}",
                recovered.to_invoke
            );
            // Unwound to the end, for the lapse.
            let mut next: Vec<Invocation> = first_call(&commands).into_iter().collect();
            let mut finished = None;
            while let Some(invocation) = next.pop() {
                for command in saga.step(answered(&invocation)) {
                    match command {
                        Command::Invoke(i) => next.push(i),
                        Command::Finish { ending, reason } => finished = Some((ending, reason)),
                        _ => {}
                    }
                }
            }
            let (ending, reason) = finished.expect("the saga ends");
            assert_eq!(ending, Ending::Compensated);
            assert!(reason.contains(cause), "{reason}");
        }
    }

    #[test]
    fn past_the_point_of_no_return_or_without_a_mandate_nothing_is_guarded() {
        let (saga, _, _, commands) = deciding(4);
        assert_eq!(guarded(&saga, &commands), vec![(Target::Forward(4), 1)]);
        let (saga, _, _, commands) = deciding(5);
        assert!(guarded(&saga, &commands).is_empty(), "s5 is past the pivot");
        let (mut saga, _, _, commands) = deciding(2);
        saga.spec_mut().mandate = None;
        assert!(guarded(&saga, &commands).is_empty());
    }
}
