//! Goal templates: how a goal names its outcome. A template maps an intent (and the
//! phrases that express it) to the skills whose effects make up that outcome; the
//! deterministic planner finds those skills in the executor's catalog and binds, orders
//! and classifies them from the catalog alone.

use serde::{Deserialize, Serialize};

/// One kind of goal the deterministic planner knows how to plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GoalTemplate {
    /// The template's id, as a data part's `intent` names it (`supplier-onboarding`).
    pub intent: String,
    /// What the outcome is, in a few words (used in messages).
    pub summary: String,
    /// Phrases that start a goal's text with this intent (`onboard supplier`); the words
    /// after the phrase are the subject.
    pub phrases: Vec<String>,
    /// The parameter the subject sets (`legalName`), if the intent has one.
    #[serde(default)]
    pub subject: Option<String>,
    /// The skills whose effects make up the outcome, in the order that breaks ties when
    /// data dependencies and reversibility leave a choice.
    pub skills: Vec<String>,
    /// Inputs bound from a parameter or output of another name.
    #[serde(default)]
    pub aliases: Vec<Alias>,
    /// Skills to plan instead of one whose failure unwound a saga, when the goal is
    /// planned again.
    #[serde(default)]
    pub alternatives: Vec<Alternative>,
}

/// When a saga unwound because `skill` failed, the next plan calls `instead`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Alternative {
    pub skill: String,
    pub instead: String,
}

/// `skill`'s input `input` is bound from the parameter or output property `from`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Alias {
    pub skill: String,
    pub input: String,
    pub from: String,
}

impl GoalTemplate {
    /// This template with `failed` replaced by its alternative; `None` when it has none.
    pub fn instead_of(&self, failed: &str) -> Option<Self> {
        let alternative = self.alternatives.iter().find(|a| a.skill == failed)?;
        let mut replanned = self.clone();
        for skill in &mut replanned.skills {
            if *skill == failed {
                skill.clone_from(&alternative.instead);
            }
        }
        Some(replanned)
    }

    /// The name an input of `skill` is looked up by.
    pub fn source_of<'a>(&'a self, skill: &str, input: &'a str) -> &'a str {
        self.aliases
            .iter()
            .find(|a| a.skill == skill && a.input == input)
            .map_or(input, |a| a.from.as_str())
    }
}

/// The templates a planner knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Templates(Vec<GoalTemplate>);

impl Templates {
    pub fn new(templates: Vec<GoalTemplate>) -> Self {
        Self(templates)
    }

    /// The built-in templates: supplier onboarding and the MCP checkout (docs/getting-started.md).
    pub fn builtin() -> Self {
        let alias = |skill: &str, input: &str, from: &str| Alias {
            skill: skill.into(),
            input: input.into(),
            from: from.into(),
        };
        let phrases = [
            "onboard supplier",
            "onboard a supplier",
            "onboard the supplier",
            "onboard new supplier",
            "onboard a new supplier",
            "onboard vendor",
            "onboard a vendor",
            "onboard the vendor",
            "onboard new vendor",
            "onboard a new vendor",
        ];
        let checkout = GoalTemplate {
            intent: "checkout".into(),
            summary:
                "check out an order (reserve the stock, charge the payment, create the shipment)"
                    .into(),
            phrases: ["check out order", "checkout order", "check out", "checkout"]
                .iter()
                .map(|p| p.to_string())
                .collect(),
            subject: Some("orderId".into()),
            skills: ["reserve_inventory", "charge_payment", "create_shipment"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            aliases: Vec::new(),
            alternatives: Vec::new(),
        };
        Self(vec![GoalTemplate {
            intent: "supplier-onboarding".into(),
            summary: "onboard a supplier (vendor record, budget line, sandbox tenant, compliance check, setup fee, credentials email)".into(),
            phrases: phrases.iter().map(|p| p.to_string()).collect(),
            subject: Some("legalName".into()),
            skills: [
                "vendor.create",
                "budget.reserve",
                "sandbox.provision",
                "compliance.check",
                "payments.capture",
                "email.send",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            aliases: vec![
                alias("email.send", "to", "contactEmail"),
                alias("payments.capture", "complianceReference", "reference"),
            ],
            // A check that failed may be reviewed by a person instead.
            alternatives: vec![Alternative {
                skill: "compliance.check".into(),
                instead: "compliance.review".into(),
            }],
        }, checkout])
    }

    /// These templates with `template` in place of the one of its intent.
    pub fn with(&self, template: GoalTemplate) -> Self {
        let mut all = self.0.clone();
        match all.iter_mut().find(|t| t.intent == template.intent) {
            Some(slot) => *slot = template,
            None => all.push(template),
        }
        Self(all)
    }

    pub fn get(&self, intent: &str) -> Option<&GoalTemplate> {
        self.0.iter().find(|t| t.intent == intent)
    }

    pub fn all(&self) -> &[GoalTemplate] {
        &self.0
    }

    /// The template whose phrase starts `clause` (ignoring case; the longest phrase wins),
    /// and the rest of the clause after it.
    pub fn match_phrase<'a>(&self, clause: &'a str) -> Option<(&GoalTemplate, &'a str)> {
        let mut best: Option<(&GoalTemplate, usize)> = None;
        for template in &self.0 {
            for phrase in &template.phrases {
                let Some(head) = clause.get(..phrase.len()) else {
                    continue;
                };
                let boundary = clause[phrase.len()..]
                    .chars()
                    .next()
                    .is_none_or(char::is_whitespace);
                if head.eq_ignore_ascii_case(phrase)
                    && boundary
                    && best.is_none_or(|(_, len)| phrase.len() > len)
                {
                    best = Some((template, phrase.len()));
                }
            }
        }
        best.map(|(t, len)| (t, &clause[len..]))
    }

    /// `"onboard supplier" (supplier-onboarding)`, … for messages.
    pub fn describe(&self) -> String {
        self.0
            .iter()
            .map(|t| {
                format!(
                    "\"{}\" ({})",
                    t.phrases.first().map_or("", String::as_str),
                    t.intent
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Default for Templates {
    fn default() -> Self {
        Self::builtin()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phrases_match_whole_words_and_the_longest_wins() {
        let t = Templates::builtin();
        let (template, rest) = t.match_phrase("Onboard a new supplier ACME").unwrap();
        assert_eq!(template.intent, "supplier-onboarding");
        assert_eq!(rest, " ACME");
        assert!(t.match_phrase("onboard suppliers now").is_none());
        assert!(t.match_phrase("onboard supplier").is_some());
        assert_eq!(template.source_of("email.send", "to"), "contactEmail");
        assert_eq!(template.source_of("email.send", "login"), "login");
    }

    #[test]
    fn a_failed_skill_is_replaced_by_its_alternative() {
        let t = Templates::builtin();
        let supplier = t.get("supplier-onboarding").unwrap();
        let replanned = supplier.instead_of("compliance.check").unwrap();
        assert_eq!(replanned.skills[3], "compliance.review");
        assert_eq!(replanned.skills.len(), supplier.skills.len());
        assert!(supplier.instead_of("payments.capture").is_none());
        let again = t.with(replanned.clone());
        assert_eq!(again.get("supplier-onboarding"), Some(&replanned));
        assert_eq!(again.all().len(), t.all().len());
    }
}
