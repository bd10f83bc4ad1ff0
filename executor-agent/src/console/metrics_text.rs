//! Reads back the OpenMetrics text the executor serves on `/metrics`, so that the
//! console's overview shows the very numbers a scrape would. Only what that text holds:
//! `name{label="value",…} number` samples; comments and anything unreadable are skipped.

use std::collections::BTreeMap;

use super::views::ByLabels;

/// One sample: its metric name, labels and value.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// The samples of one scrape.
#[derive(Debug, Clone, Default)]
pub struct Families {
    samples: Vec<Sample>,
}

/// The samples in `text`.
pub fn read(text: &str) -> Families {
    Families {
        samples: text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(sample)
            .collect(),
    }
}

impl Families {
    /// The sum of every sample of `name`.
    pub fn sum(&self, name: &str) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.value)
            .sum()
    }

    /// The samples of `name` by the values of two of their labels.
    pub fn by_labels(&self, name: &str, first: &str, second: &str) -> ByLabels {
        let mut by: ByLabels = BTreeMap::new();
        for s in self.samples.iter().filter(|s| s.name == name) {
            let label = |key: &str| {
                s.labels
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            *by.entry(label(first))
                .or_default()
                .entry(label(second))
                .or_default() += s.value;
        }
        by
    }
}

fn sample(line: &str) -> Option<Sample> {
    let line = line.trim();
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return None,
    };
    let (labels, rest) = if let Some(inner) = rest.strip_prefix('{') {
        labels(inner)?
    } else {
        (Vec::new(), rest)
    };
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// The labels of `{…}` up to its closing brace, and what follows it. Values are quoted,
/// with `\\`, `\"` and `\n` escaped.
fn labels(mut text: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start_matches(',');
        if let Some(rest) = text.strip_prefix('}') {
            return Some((labels, rest));
        }
        let (key, rest) = text.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.to_owned(), value));
        text = &rest[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_read_with_their_labels_escapes_included_and_the_rest_is_skipped() {
        let text = "# HELP sagaplane_compensations Compensations\n\
            # TYPE sagaplane_compensations counter\n\
            sagaplane_compensations_total{agent=\"vendor-registry\",outcome=\"succeeded\"} 3\n\
            sagaplane_compensations_total{agent=\"vendor-registry\",outcome=\"failed\"} 1\n\
            sagaplane_compensations_total{agent=\"od\\\"d\\\\one\",outcome=\"succeeded\"} 2\n\
            sagaplane_undo_handles_open{agent=\"a\"} 4\n\
            sagaplane_undo_handles_open{agent=\"b\"} 1\n\
            sagaplane_sagas_live 7\n\
            not a sample\n\
            broken{agent=\"x} 1\n\
            # EOF\n";
        let families = read(text);
        assert_eq!(families.sum("sagaplane_undo_handles_open"), 5.0);
        assert_eq!(families.sum("sagaplane_sagas_live"), 7.0);
        let by = families.by_labels("sagaplane_compensations_total", "agent", "outcome");
        assert_eq!(by["vendor-registry"]["succeeded"], 3.0);
        assert_eq!(by["vendor-registry"]["failed"], 1.0);
        assert_eq!(by["od\"d\\one"]["succeeded"], 2.0);
        assert_eq!(families.sum("broken"), 0.0);
    }
}
