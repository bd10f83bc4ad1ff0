//! The invariants every tool agent's ledger must satisfy, checked without I/O: each key
//! applied at most once, every undo matched to a forward effect it really reversed (of
//! the skill it compensates, applied before it), each forward effect undone at most
//! once, and no forward effect applied under a key whose undo (or a status call that
//! found it not applied) came first.

use std::collections::{HashMap, HashSet};

use super::ledger::{EffectKind, LedgerReport};
use super::skills::{Behaviour, spec};

/// Every broken invariant of `ledger`, as sentences; empty when it is sound.
pub fn check_ledger(ledger: &LedgerReport) -> Vec<String> {
    let mut problems = Vec::new();
    let mut by_key = HashMap::new();
    for effect in &ledger.effects {
        if let Some(key) = &effect.key
            && by_key.insert(key.as_str(), effect).is_some()
        {
            problems.push(format!("key {key:?} was applied more than once"));
        }
    }
    let mut undone = HashSet::new();
    for effect in &ledger.effects {
        let key = effect.key.as_deref().unwrap_or("(no key)");
        match effect.kind {
            EffectKind::Undo => {
                let Some(target) = &effect.undoes else {
                    continue;
                };
                if !undone.insert(target.as_str()) {
                    problems.push(format!("{target:?} was undone more than once"));
                }
                let Some(forward) = by_key.get(target.as_str()) else {
                    problems.push(format!(
                        "undo {key:?} reversed {target:?}, which was never applied"
                    ));
                    continue;
                };
                if forward.kind != EffectKind::Forward {
                    problems.push(format!(
                        "undo {key:?} reversed {target:?}, which is not an effect"
                    ));
                }
                if forward.seq >= effect.seq {
                    problems.push(format!(
                        "undo {key:?} is recorded before the effect {target:?} it reversed"
                    ));
                }
                if forward.undone_by.as_deref() != effect.key.as_deref() {
                    problems.push(format!(
                        "undo {key:?} reversed {target:?}, but that effect names {:?} as its undo",
                        forward.undone_by
                    ));
                }
                let compensates = spec(&effect.skill).and_then(|s| match s.behaviour {
                    Behaviour::Undo { of, .. } => Some(of),
                    _ => None,
                });
                if compensates != Some(forward.skill.as_str()) {
                    problems.push(format!(
                        "undo {key:?} ({}) cannot reverse {target:?} ({})",
                        effect.skill, forward.skill
                    ));
                }
            }
            EffectKind::Forward | EffectKind::Read => {
                let Some(undo_key) = &effect.undone_by else {
                    continue;
                };
                if effect.kind == EffectKind::Read {
                    problems.push(format!("read {key:?} claims to be undone"));
                }
                match by_key.get(undo_key.as_str()) {
                    Some(undo)
                        if undo.kind == EffectKind::Undo
                            && undo.undoes.as_deref() == effect.key.as_deref() => {}
                    _ => problems.push(format!(
                        "{key:?} names {undo_key:?} as its undo, but no such undo reversed it"
                    )),
                }
            }
        }
    }
    for tombstone in &ledger.tombstones {
        if by_key
            .get(tombstone.forward_key.as_str())
            .is_some_and(|e| e.kind == EffectKind::Forward)
        {
            problems.push(format!(
                "{:?} was applied although {:?} found nothing to undo under it",
                tombstone.forward_key, tombstone.undo_key
            ));
        }
        // Laid by an undo of nothing (an effect), or by a status call that found the key
        // not applied (a call, which applies nothing).
        let by_status = ledger.call_log.iter().any(|call| {
            call.key.as_deref() == Some(tombstone.undo_key.as_str())
                && spec(&call.skill)
                    .is_some_and(|s| matches!(s.behaviour, Behaviour::Status { .. }))
        });
        if !by_key.contains_key(tombstone.undo_key.as_str()) && !by_status {
            problems.push(format!(
                "the tombstone of {:?} names an undo or a status call {:?} that is not recorded",
                tombstone.forward_key, tombstone.undo_key
            ));
        }
    }
    problems
}
