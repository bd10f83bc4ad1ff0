//! The end of a demo run: every tool agent's own ledger, checked for the saga's promises
//! (each effect once, each undo matching an effect), and the outcome each `--fail-at`
//! mode must reach.

use agent_host::sdk::{Task, TaskState};
use sagaplane_examples::supplier::{LedgerReport, ToolClient, check_ledger};

use super::FailAt;
use crate::a2a::state_name;
use crate::failure::Failure;

/// Reads and prints each agent's ledger (in the order the agents were started).
pub async fn print_ledgers(
    tools: &[(String, String)],
    token: &str,
) -> Result<Vec<LedgerReport>, Failure> {
    println!("tool agents' own ledgers:");
    let mut ledgers = Vec::new();
    for (name, url) in tools {
        let ledger = ToolClient::new(url, Some(token))
            .map_err(|e| Failure::unusable(e.to_string()))?
            .ledger()
            .await
            .map_err(|e| Failure::unusable(format!("cannot read {name}'s ledger: {e}")))?;
        if ledger.effects.is_empty() && ledger.tombstones.is_empty() {
            println!("  {name:<20} (no effect)");
        }
        for effect in &ledger.effects {
            let key = effect.key.as_deref().unwrap_or("-");
            let note = match (&effect.undone_by, &effect.undoes) {
                (Some(undo), _) => format!("undone by {undo}"),
                (None, Some(forward)) => format!("undoes {forward}"),
                (None, None) => String::new(),
            };
            println!(
                "  {name:<20} #{:<3} {:<20} {key:<40} {}",
                effect.seq, effect.skill, note
            );
        }
        for tombstone in &ledger.tombstones {
            println!(
                "  {name:<20}      never applied: {} (found so by {}; refused should it come)",
                tombstone.forward_key, tombstone.undo_key
            );
        }
        ledgers.push(ledger);
    }
    Ok(ledgers)
}

/// What a mode must end in.
pub struct Expected {
    state: TaskState,
    /// Forward skills whose effect must stand at the end.
    standing: &'static [&'static str],
    /// Forward skills whose effect must have been undone.
    undone: &'static [&'static str],
    /// Forward skills that must never have taken effect.
    absent: &'static [&'static str],
    /// Forward skills applied twice, by two attempts: the first's undone, the second's
    /// standing.
    redone: &'static [&'static str],
}

impl Expected {
    /// What `fail_at` ends in; with `replan`, a compliance failure is planned again,
    /// reviewed by a person, and completes.
    pub fn of(fail_at: FailAt, replan: bool) -> Self {
        const ALL: &[&str] = &[
            "vendor.create",
            "budget.reserve",
            "sandbox.provision",
            "payments.capture",
            "email.send",
        ];
        const UNWOUND: &[&str] = &["vendor.create", "budget.reserve", "sandbox.provision"];
        if replan && fail_at == FailAt::Compliance {
            return Self {
                state: TaskState::Completed,
                standing: &["payments.capture", "email.send"],
                undone: &[],
                absent: &[],
                redone: UNWOUND,
            };
        }
        match fail_at {
            FailAt::None
            | FailAt::CaptureUnknown
            | FailAt::CaptureUnverified
            | FailAt::Email
            | FailAt::OverBudget => Self {
                state: TaskState::Completed,
                standing: if fail_at == FailAt::Email {
                    &ALL[..4]
                } else {
                    ALL
                },
                undone: &[],
                absent: &[],
                redone: &[],
            },
            FailAt::Compliance | FailAt::CaptureDecline => Self {
                state: TaskState::Failed,
                standing: &[],
                undone: UNWOUND,
                absent: &[],
                redone: &[],
            },
            FailAt::CaptureLost => Self {
                state: TaskState::Failed,
                standing: &[],
                undone: UNWOUND,
                absent: &["payments.capture", "email.send"],
                redone: &[],
            },
            FailAt::Release => Self {
                state: TaskState::Failed,
                standing: &["budget.reserve"],
                undone: &["vendor.create", "sandbox.provision"],
                absent: &[],
                redone: &[],
            },
        }
    }

    /// What is wrong with the executor's final task and the ledgers (nothing: as expected).
    pub fn problems(&self, task: &Task, ledgers: &[LedgerReport]) -> Vec<String> {
        let mut problems: Vec<String> = ledgers.iter().flat_map(check_ledger).collect();
        if task.status.state != self.state {
            problems.push(format!(
                "the saga ended {}, expected {}",
                state_name(&task.status.state),
                state_name(&self.state)
            ));
        }
        let forwards = |skill: &str| {
            ledgers
                .iter()
                .flat_map(|l| l.forwards(skill))
                .cloned()
                .collect::<Vec<_>>()
        };
        for skill in self.standing {
            let effects = forwards(skill);
            if effects.len() != 1 || effects[0].undone_by.is_some() {
                problems.push(format!("{skill} should stand, once"));
            }
        }
        for skill in self.undone {
            let effects = forwards(skill);
            if effects.len() != 1 || effects[0].undone_by.is_none() {
                problems.push(format!("{skill} should have been applied once and undone"));
            }
        }
        for skill in self.redone {
            let effects = forwards(skill);
            let undone = effects.iter().filter(|e| e.undone_by.is_some()).count();
            if effects.len() != 2 || undone != 1 || effects[1].undone_by.is_some() {
                problems.push(format!(
                    "{skill} should have been applied by each attempt, the first undone"
                ));
            }
        }
        for skill in self.absent {
            if !forwards(skill).is_empty() {
                problems.push(format!("{skill} should never have taken effect"));
            }
        }
        problems
    }
}

/// The verdict, printed.
pub fn verdict(task: &Task, problems: &[String]) -> Result<(), Failure> {
    if problems.is_empty() {
        println!(
            "as expected: {}, every effect exactly once, every compensated effect undone",
            state_name(&task.status.state)
        );
        Ok(())
    } else {
        Err(Failure::rejected(format!(
            "the demo did not end as expected: {}",
            problems.join("; ")
        )))
    }
}
