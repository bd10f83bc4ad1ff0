//! What the demo says of a plan with branches, from the executor's ledger (what each
//! step waits for) and the saga's timeline (the status lines `<step>: <what>`): which
//! steps ran side by side (neither waits for the other, and both were out at once), and,
//! when the saga unwound, the order the steps started in and the order they were
//! compensated in (the reverse).

use std::collections::BTreeSet;

/// Words that start a status line saying a step's forward call is no longer out.
const ENDED: [&str; 7] = [
    "succeeded",
    "failed",
    "outcome unknown",
    "verified",
    "escalated",
    "compensat",
    "cannot",
];

/// What the timeline said of the saga's steps, in order: `(step id, what)`; and of the
/// sagas of earlier attempts at the goal, when the planner planned it again.
#[derive(Debug, Default)]
pub struct StepEvents {
    said: Vec<(String, String)>,
    earlier: Vec<StepEvents>,
}

impl StepEvents {
    /// Keeps the lines of a status text that speak of a step (`s1: started (attempt 1)`);
    /// a new plan superseding the saga (`attempt 2: plan … supersedes …`) starts anew.
    pub fn record(&mut self, text: &str) {
        for line in text.lines() {
            if line.starts_with("attempt ") && line.contains(" supersedes ") {
                let ended = std::mem::take(&mut self.said);
                self.earlier.push(StepEvents {
                    said: ended,
                    earlier: Vec::new(),
                });
                continue;
            }
            let Some((id, what)) = line.split_once(": ") else {
                continue;
            };
            let plain = !id.is_empty()
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if plain {
                self.said.push((id.to_owned(), what.to_owned()));
            }
        }
    }

    /// The steps in the order of their first line starting with `what`.
    fn first(&self, what: &str) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for (id, said) in &self.said {
            if said.starts_with(what) && !out.contains(&id.as_str()) {
                out.push(id);
            }
        }
        out
    }

    /// The steps in the order they started.
    pub fn started(&self) -> Vec<&str> {
        self.first("started")
    }

    /// The steps in the order their compensation started.
    pub fn compensated(&self) -> Vec<&str> {
        self.first("compensating")
    }

    /// Pairs of steps whose forward calls were out at once: the second started while
    /// the first had started and not ended. In the order the second started.
    pub fn side_by_side(&self) -> Vec<(&str, &str)> {
        let mut out_now: Vec<&str> = Vec::new();
        let mut ended: BTreeSet<&str> = BTreeSet::new();
        let mut pairs = Vec::new();
        for (id, what) in &self.said {
            let id = id.as_str();
            if what.starts_with("started") {
                if !out_now.contains(&id) && !ended.contains(id) {
                    pairs.extend(out_now.iter().map(|&other| (other, id)));
                    out_now.push(id);
                }
            } else if ENDED.iter().any(|e| what.starts_with(e)) {
                out_now.retain(|&other| other != id);
                ended.insert(id);
            }
        }
        pairs
    }
}

/// The lines the demo prints about the run's branches and its unwinding: nothing for a
/// plan that is a sequence (`waits` is `None`) that did not unwind. `waits`: what each
/// step waits for, `(step, skill, waits)` (`commands::ledger_waits`).
pub fn describe(
    waits: Option<&[(String, String, Vec<String>)]>,
    events: &StepEvents,
) -> Vec<String> {
    let mut lines = Vec::new();
    let named = |id: &str| match waits.and_then(|w| w.iter().find(|(s, _, _)| s == id)) {
        Some((_, skill, _)) => format!("{id} {skill}"),
        None => id.to_owned(),
    };
    if let Some(waits) = waits {
        let order: Vec<String> = waits
            .iter()
            .map(|(id, _, after)| match after.as_slice() {
                [] => format!("{id} first"),
                after => format!("{id} after {}", after.join(", ")),
            })
            .collect();
        lines.push(format!("the plan's branches: {}", order.join("; ")));
        let pairs: Vec<String> = events
            .side_by_side()
            .into_iter()
            .map(|(a, b)| format!("{} and {}", named(a), named(b)))
            .collect();
        if pairs.is_empty() {
            lines.push("no two steps were out at once".to_owned());
        } else {
            lines.push(format!(
                "ran side by side (neither waits for the other; both were out at once): {}",
                pairs.join("; ")
            ));
        }
    }
    // An earlier attempt's steps are another plan's: named by id alone.
    for (n, earlier) in events.earlier.iter().enumerate() {
        let compensated = earlier.compensated();
        if !compensated.is_empty() {
            lines.push(format!(
                "attempt {} unwound in the reverse order of start: started {}; compensated {}",
                n + 1,
                earlier.started().join(", "),
                compensated.join(", ")
            ));
        }
    }
    let compensated = events.compensated();
    if !compensated.is_empty() {
        let started = events.started();
        lines.push(format!(
            "unwound in the reverse order of start: started {}; compensated {}",
            started.join(", "),
            compensated
                .iter()
                .map(|id| named(id))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(lines: &[&str]) -> StepEvents {
        let mut events = StepEvents::default();
        for line in lines {
            events.record(line);
        }
        events
    }

    #[test]
    fn steps_out_at_once_ran_side_by_side_and_the_unwind_is_the_reverse_of_the_start() {
        // The supplier plan's branches: s1 and s2 after s0, s3 after s2.
        let waits: Vec<(String, String, Vec<String>)> = [
            ("s0", "vendor.create", vec![]),
            ("s1", "budget.reserve", vec!["s0"]),
            ("s2", "sandbox.provision", vec!["s0"]),
            ("s3", "compliance.check", vec!["s2"]),
        ]
        .into_iter()
        .map(|(id, skill, after)| {
            (
                id.to_owned(),
                skill.to_owned(),
                after.into_iter().map(str::to_owned).collect(),
            )
        })
        .collect();
        let run = events(&[
            "planning with rules-v1 under mandate \"md_demo\": Onboard supplier",
            "s0: started (attempt 1)",
            "s0: succeeded",
            "s1: started (attempt 1)",
            "s2: started (attempt 1)",
            "s2: succeeded",
            "s3: started (attempt 1)",
            "s1: succeeded",
            "s3: retrying after: no answer",
            "s3: started (attempt 2)",
            "s3: outcome unknown: no answer",
            "s2: compensating (attempt 1)",
            "s2: compensated",
            "s1: compensating (attempt 1)",
            "s1: compensated",
            "s0: compensating (attempt 1)",
            "s0: compensated",
        ]);
        assert_eq!(run.side_by_side(), [("s1", "s2"), ("s1", "s3")]);
        assert_eq!(
            describe(Some(&waits), &run),
            [
                "the plan's branches: s0 first; s1 after s0; s2 after s0; s3 after s2",
                "ran side by side (neither waits for the other; both were out at once): \
                 s1 budget.reserve and s2 sandbox.provision; s1 budget.reserve and s3 compliance.check",
                "unwound in the reverse order of start: started s0, s1, s2, s3; \
                 compensated s2 sandbox.provision, s1 budget.reserve, s0 vendor.create",
            ]
        );
        // Planned again: the first attempt's unwinding is its own, named by ids.
        let mut replanned = events(&[
            "s0: started (attempt 1)",
            "s0: succeeded",
            "s1: started (attempt 1)",
            "s1: failed: declined",
            "s0: compensating (attempt 1)",
            "s0: compensated",
            "attempt 2: plan sg_b supersedes sg_a",
            "s0: started (attempt 1)",
            "s0: succeeded",
        ]);
        replanned.record("s1: started (attempt 1)");
        assert_eq!(replanned.started(), ["s0", "s1"]);
        assert!(replanned.compensated().is_empty());
        assert_eq!(
            describe(None, &replanned),
            ["attempt 1 unwound in the reverse order of start: started s0, s1; compensated s0"]
        );
        // A sequence that completed: nothing to say.
        let sequence = events(&["s0: started (attempt 1)", "s0: succeeded"]);
        assert!(describe(None, &sequence).is_empty());
    }
}
