//! The plan's partial order: which steps each step waits for, by position.
//!
//! A step's `after` names the steps it waits for; absent, it waits for the step listed
//! just before it (none for the first), so a plan without `after` is a sequence. The
//! validator reads the order to decide which results a step may read, which steps may
//! stand around the point of no return and how long an undo may wait; the executor reads
//! it to decide which steps may start. Both must read it the same way, hence one type.
//!
//! Building never fails: an id that names no step, the step itself or a step already
//! named is left out of the graph, and a wait for a step listed later is kept (it may
//! close a cycle); each is reported among the [`DependencyProblem`]s, for the validator
//! to refuse the plan.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::plan::Plan;

/// What is wrong with a plan's `after` members. Positions are indexes into the steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DependencyProblem {
    /// `step`'s `after` names `id`, which no step of the plan has.
    Unknown { step: usize, id: String },
    /// `step`'s `after` names the step itself.
    Itself { step: usize },
    /// `step`'s `after` names `id` more than once.
    Repeated { step: usize, id: String },
    /// `step` waits for `waits_for`, which is listed after it (without a cycle).
    Later { step: usize, waits_for: usize },
    /// These steps wait for each other in a circle: each must run before the next, and
    /// the last before the first. The first is the cycle's step listed first.
    Cycle { steps: Vec<usize> },
}

impl DependencyProblem {
    /// The step the problem is reported on.
    pub fn step(&self) -> usize {
        match self {
            Self::Unknown { step, .. }
            | Self::Itself { step }
            | Self::Repeated { step, .. }
            | Self::Later { step, .. } => *step,
            Self::Cycle { steps } => steps.first().copied().unwrap_or(0),
        }
    }
}

/// The steps each step waits for, resolved to positions, and what could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependencies {
    /// `after[i]`: the positions step `i` waits for, in the order written, each once.
    after: Vec<Vec<usize>>,
    /// `before[j]`: the steps that wait for step `j` directly, in list order.
    before: Vec<Vec<usize>>,
    problems: Vec<DependencyProblem>,
    /// Every step waits exactly for the one listed before it.
    sequence: bool,
    /// Every step waits only for steps listed before it (so there is no cycle).
    ordered: bool,
}

impl Dependencies {
    /// The order of a plan's steps.
    pub fn of(plan: &Plan) -> Self {
        let ids: Vec<&str> = plan.steps.iter().map(|s| s.id.as_str()).collect();
        let after: Vec<Option<Vec<&str>>> = plan
            .steps
            .iter()
            .map(|s| {
                s.after
                    .as_ref()
                    .map(|ids| ids.iter().map(String::as_str).collect())
            })
            .collect();
        Self::new(&ids, &after)
    }

    /// The order of steps with these `ids` (in list order) and these `after` members
    /// (`None`: absent, the step listed before). An id shared by several steps names
    /// the first of them (the plan is refused for the repeated id anyway).
    pub fn new(ids: &[&str], after: &[Option<Vec<&str>>]) -> Self {
        let n = ids.len();
        let mut positions: HashMap<&str, usize> = HashMap::with_capacity(n);
        for (i, id) in ids.iter().enumerate() {
            positions.entry(*id).or_insert(i);
        }
        let mut problems = Vec::new();
        let mut resolved: Vec<Vec<usize>> = Vec::with_capacity(n);
        for i in 0..n {
            let mut waits = Vec::new();
            match after.get(i) {
                Some(Some(names)) => {
                    let mut named = BTreeSet::new();
                    let mut repeated = BTreeSet::new();
                    for &name in names {
                        if !named.insert(name) {
                            if repeated.insert(name) {
                                problems.push(DependencyProblem::Repeated {
                                    step: i,
                                    id: name.to_owned(),
                                });
                            }
                            continue;
                        }
                        match positions.get(name) {
                            None => problems.push(DependencyProblem::Unknown {
                                step: i,
                                id: name.to_owned(),
                            }),
                            Some(&j) if j == i => {
                                problems.push(DependencyProblem::Itself { step: i });
                            }
                            Some(&j) => waits.push(j),
                        }
                    }
                }
                _ => waits.extend(i.checked_sub(1)),
            }
            resolved.push(waits);
        }
        let mut before = vec![Vec::new(); n];
        for (i, waits) in resolved.iter().enumerate() {
            for &j in waits {
                before[j].push(i);
            }
        }
        let sequence = resolved
            .iter()
            .enumerate()
            .all(|(i, w)| w.as_slice() == i.checked_sub(1).as_slice());
        let ordered = resolved
            .iter()
            .enumerate()
            .all(|(i, w)| w.iter().all(|&j| j < i));
        let mut dependencies = Self {
            after: resolved,
            before,
            problems,
            sequence,
            ordered,
        };
        if !ordered {
            dependencies.find_order_problems();
        }
        dependencies.problems.sort_by_key(DependencyProblem::step);
        dependencies
    }

    /// The number of steps.
    pub fn len(&self) -> usize {
        self.after.len()
    }

    pub fn is_empty(&self) -> bool {
        self.after.is_empty()
    }

    /// What is wrong with the `after` members, by step.
    pub fn problems(&self) -> &[DependencyProblem] {
        &self.problems
    }

    /// The steps step `i` waits for directly (none for a position out of range).
    pub fn waits_for(&self, i: usize) -> &[usize] {
        self.after.get(i).map_or(&[], Vec::as_slice)
    }

    /// The steps that wait for step `i` directly.
    pub fn waited_for_by(&self, i: usize) -> &[usize] {
        self.before.get(i).map_or(&[], Vec::as_slice)
    }

    /// Every step `i` waits for, directly or through others, by position. `i` is among
    /// them only when it is on a cycle.
    pub fn ancestors(&self, i: usize) -> Vec<bool> {
        Self::reach(&self.after, i)
    }

    /// Every step that waits for step `i`, directly or through others, by position.
    pub fn descendants(&self, i: usize) -> Vec<bool> {
        Self::reach(&self.before, i)
    }

    /// Whether step `b` waits for step `a`, directly or through others.
    pub fn is_ancestor(&self, a: usize, b: usize) -> bool {
        if a >= self.len() || b >= self.len() {
            return false;
        }
        if self.sequence {
            return a < b;
        }
        let mut seen = vec![false; self.len()];
        let mut todo = self.after[b].clone();
        while let Some(j) = todo.pop() {
            if j == a {
                return true;
            }
            // Listed in order, a step listed before `a` cannot lead back to it.
            if seen[j] || (self.ordered && j < a) {
                continue;
            }
            seen[j] = true;
            todo.extend(&self.after[j]);
        }
        false
    }

    /// Whether one of the two steps runs before the other, whatever the schedule.
    pub fn comparable(&self, a: usize, b: usize) -> bool {
        a == b || self.is_ancestor(a, b) || self.is_ancestor(b, a)
    }

    /// Whether every step waits exactly for the one listed before it (a plan without
    /// `after`, in particular).
    pub fn is_sequence(&self) -> bool {
        self.sequence
    }

    /// Whether every step waits only for steps listed before it.
    pub fn is_ordered(&self) -> bool {
        self.ordered
    }

    fn reach(edges: &[Vec<usize>], i: usize) -> Vec<bool> {
        let mut seen = vec![false; edges.len()];
        let mut todo: Vec<usize> = edges.get(i).cloned().unwrap_or_default();
        while let Some(j) = todo.pop() {
            if !seen[j] {
                seen[j] = true;
                todo.extend(&edges[j]);
            }
        }
        seen
    }

    /// Waits for later steps: each closes a cycle (reported once per set of steps that
    /// wait for each other) or is only listed out of order.
    fn find_order_problems(&mut self) {
        let component = strongly_connected(&self.after);
        let mut size = vec![0usize; self.len()];
        for &c in &component {
            size[c] += 1;
        }
        let mut reported = vec![false; self.len()];
        for i in 0..self.len() {
            for &j in &self.after[i] {
                if j <= i {
                    continue;
                }
                let c = component[i];
                if component[j] != c {
                    self.problems.push(DependencyProblem::Later {
                        step: i,
                        waits_for: j,
                    });
                } else if !reported[c] && size[c] > 1 {
                    reported[c] = true;
                    let steps = self.cycle_through(&component, c);
                    self.problems.push(DependencyProblem::Cycle { steps });
                }
            }
        }
    }

    /// A shortest cycle through the first-listed step of component `c`, in the order the
    /// steps must run.
    fn cycle_through(&self, component: &[usize], c: usize) -> Vec<usize> {
        let Some(start) = component.iter().position(|&x| x == c) else {
            return Vec::new();
        };
        let mut parent: Vec<Option<usize>> = vec![None; self.len()];
        let mut queue = VecDeque::from([start]);
        while let Some(u) = queue.pop_front() {
            for &w in &self.before[u] {
                if component[w] != c {
                    continue;
                }
                if w == start {
                    // Back from the step that closes the cycle to `start`.
                    let mut path = vec![u];
                    let mut at = u;
                    while let Some(p) = parent[at] {
                        path.push(p);
                        at = p;
                    }
                    path.reverse();
                    return path;
                }
                if parent[w].is_none() {
                    parent[w] = Some(u);
                    queue.push_back(w);
                }
            }
        }
        vec![start]
    }
}

/// Tarjan's strongly connected components, without recursion (plans may be long): the
/// component of each node.
fn strongly_connected(edges: &[Vec<usize>]) -> Vec<usize> {
    const UNSET: usize = usize::MAX;
    let n = edges.len();
    let mut index = vec![UNSET; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut component = vec![UNSET; n];
    let mut next = 0;
    let mut components = 0;
    for root in 0..n {
        if index[root] != UNSET {
            continue;
        }
        let mut calls = vec![(root, 0usize)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&(v, e)) = calls.last() {
            if let Some(&w) = edges[v].get(e) {
                if let Some(call) = calls.last_mut() {
                    call.1 += 1;
                }
                if index[w] == UNSET {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    calls.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(parent, _)) = calls.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component[w] = components;
                    if w == v {
                        break;
                    }
                }
                components += 1;
            }
        }
    }
    component
}

/// Steps named `s0`, `s1`, … with these `after` members (for tests).
#[cfg(test)]
pub(crate) fn order(after: &[Option<&[&str]>]) -> Dependencies {
    let ids: Vec<String> = (0..after.len()).map(|i| format!("s{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let after: Vec<Option<Vec<&str>>> = after.iter().map(|a| a.map(<[_]>::to_vec)).collect();
    Dependencies::new(&ids, &after)
}

/// s0 → {s1, s2} → s3 → s4 (for tests).
#[cfg(test)]
pub(crate) fn diamond() -> Dependencies {
    order(&[
        None,
        Some(&["s0"]),
        Some(&["s0"]),
        Some(&["s1", "s2"]),
        None,
    ])
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn absent_after_is_a_sequence() {
        let d = order(&[None, None, None]);
        assert!(d.is_sequence() && d.problems().is_empty());
        assert_eq!(d.waits_for(0), &[] as &[usize]);
        assert_eq!(d.waits_for(2), &[1]);
        assert!(d.is_ancestor(0, 2) && !d.is_ancestor(2, 0) && !d.is_ancestor(1, 1));
        assert_eq!(d.ancestors(2), vec![true, true, false]);
        // Written out, the same sequence.
        assert!(order(&[Some(&[]), Some(&["s0"]), Some(&["s1"])]).is_sequence());
        // A first step waiting for nothing, a later one too: not a sequence.
        assert!(!order(&[None, Some(&[])]).is_sequence());
    }

    #[test]
    fn a_diamond_orders_its_ends_and_not_its_sides() {
        let d = diamond();
        assert!(d.problems().is_empty() && !d.is_sequence() && d.is_ordered());
        assert_eq!(d.ancestors(3), vec![true, true, true, false, false]);
        assert_eq!(d.descendants(1), vec![false, false, false, true, true]);
        assert_eq!(d.waited_for_by(0), &[1, 2]);
        assert!(!d.comparable(1, 2) && d.comparable(0, 4) && d.comparable(4, 0));
        assert!(d.is_ancestor(0, 4) && !d.is_ancestor(1, 2));
    }

    #[test]
    fn each_problem_is_reported_on_its_step() {
        let d = order(&[
            Some(&["s0"]),
            Some(&["s9", "s0", "s0", "s0"]),
            Some(&["s3"]),
            Some(&[]),
        ]);
        assert_eq!(
            d.problems(),
            &[
                DependencyProblem::Itself { step: 0 },
                DependencyProblem::Unknown {
                    step: 1,
                    id: "s9".into()
                },
                DependencyProblem::Repeated {
                    step: 1,
                    id: "s0".into()
                },
                DependencyProblem::Later {
                    step: 2,
                    waits_for: 3
                },
            ]
        );
        // Left out of the graph: the unknown, the step itself, the repeat.
        assert_eq!(d.waits_for(0), &[] as &[usize]);
        assert_eq!(d.waits_for(1), &[0]);
        assert_eq!(d.waits_for(2), &[3]);
    }

    #[test]
    fn a_cycle_is_reported_once_in_the_order_its_steps_would_run() {
        // s1 waits for s3, s3 for s2, s2 for s1: s1 → s2 → s3 → s1.
        let d = order(&[None, Some(&["s0", "s3"]), None, None, Some(&["s3"])]);
        assert_eq!(
            d.problems(),
            &[DependencyProblem::Cycle {
                steps: vec![1, 2, 3]
            }]
        );
        assert!(d.ancestors(2)[2], "a step on a cycle waits for itself");
        assert!(!d.ancestors(0)[0] && d.ancestors(4)[1]);
        // Two steps waiting for each other, and an unrelated step out of order.
        let d = order(&[Some(&["s1"]), Some(&["s0"]), Some(&["s3"]), Some(&[])]);
        assert_eq!(
            d.problems(),
            &[
                DependencyProblem::Cycle { steps: vec![0, 1] },
                DependencyProblem::Later {
                    step: 2,
                    waits_for: 3
                },
            ]
        );
    }

    #[test]
    fn out_of_range_positions_are_no_one() {
        let d = order(&[None, None]);
        assert_eq!(d.waits_for(7), &[] as &[usize]);
        assert_eq!(d.ancestors(7), vec![false, false]);
        assert!(!d.is_ancestor(0, 7) && !d.comparable(7, 0));
        assert!(order(&[]).is_empty() && order(&[]).is_sequence());
    }

    /// A random plan order: for each step, `None` or the earlier steps it waits for.
    fn dag() -> impl Strategy<Value = Vec<Option<Vec<usize>>>> {
        (1usize..40).prop_flat_map(|n| {
            (0..n)
                .map(|i| {
                    prop_oneof![
                        Just(None),
                        proptest::sample::subsequence((0..i).collect::<Vec<_>>(), 0..=i)
                            .prop_shuffle()
                            .prop_map(Some),
                    ]
                })
                .collect::<Vec<_>>()
        })
    }

    /// What one `after` entry names.
    #[derive(Debug, Clone)]
    enum Wait {
        Earlier(usize),
        Later(usize),
        Itself,
        Unknown(u8),
    }

    fn waits() -> impl Strategy<Value = Vec<Vec<Wait>>> {
        let wait = prop_oneof![
            4 => any::<usize>().prop_map(Wait::Earlier),
            2 => any::<usize>().prop_map(Wait::Later),
            1 => Just(Wait::Itself),
            1 => (0u8..3).prop_map(Wait::Unknown),
        ];
        proptest::collection::vec(proptest::collection::vec(wait, 0..4), 1..16)
    }

    fn from_positions(after: &[Option<Vec<usize>>]) -> Dependencies {
        let ids: Vec<String> = (0..after.len()).map(|i| format!("s{i}")).collect();
        let names: Vec<Option<Vec<&str>>> = after
            .iter()
            .map(|a| {
                a.as_ref()
                    .map(|w| w.iter().map(|&j| ids[j].as_str()).collect())
            })
            .collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        Dependencies::new(&ids, &names)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Steps that name only earlier steps, once each: no problem, and the ancestors
        /// are a strict order (transitive, acyclic) that the listing follows.
        #[test]
        fn random_dags_have_a_transitive_acyclic_order(after in dag()) {
            let d = from_positions(&after);
            prop_assert_eq!(d.problems(), &[] as &[DependencyProblem]);
            prop_assert!(d.is_ordered());
            let n = after.len();
            let all: Vec<Vec<bool>> = (0..n).map(|i| d.ancestors(i)).collect();
            for i in 0..n {
                prop_assert!(!all[i][i], "s{} waits for itself", i);
                for &j in d.waits_for(i) {
                    prop_assert!(all[i][j]);
                }
                for j in 0..n {
                    prop_assert_eq!(d.is_ancestor(j, i), all[i][j]);
                    prop_assert_eq!(d.descendants(j)[i], all[i][j]);
                    prop_assert_eq!(d.comparable(i, j), d.comparable(j, i));
                    if all[i][j] {
                        prop_assert!(j < i);
                        prop_assert!(!all[j][i]);
                        // What j waits for, i waits for.
                        let transitive = all[j].iter().zip(&all[i]).all(|(&by_j, &by_i)| !by_j || by_i);
                        prop_assert!(transitive, "s{} waits for s{} but not for all it waits for", i, j);
                    }
                }
            }
        }

        /// Every wait for a step listed later, for the step itself or for no step is
        /// reported, and nothing else is.
        #[test]
        fn every_bad_wait_is_reported(waits in waits()) {
            let n = waits.len();
            let ids: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
            let names: Vec<Vec<String>> = waits
                .iter()
                .enumerate()
                .map(|(i, ws)| {
                    ws.iter()
                        .map(|w| match *w {
                            Wait::Earlier(k) if i > 0 => ids[k % i].clone(),
                            Wait::Later(k) if i + 1 < n => ids[i + 1 + k % (n - i - 1)].clone(),
                            Wait::Earlier(_) | Wait::Later(_) | Wait::Itself => ids[i].clone(),
                            Wait::Unknown(u) => format!("x{u}"),
                        })
                        .collect()
                })
                .collect();
            let after: Vec<Option<Vec<&str>>> = names
                .iter()
                .map(|ns| Some(ns.iter().map(String::as_str).collect()))
                .collect();
            let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            let d = Dependencies::new(&id_refs, &after);
            let problems = d.problems();
            let mut expected = 0;
            for (i, ns) in names.iter().enumerate() {
                let mut seen = BTreeSet::new();
                let mut repeated = BTreeSet::new();
                for name in ns {
                    if !seen.insert(name) {
                        if repeated.insert(name) {
                            expected += 1;
                            let problem = DependencyProblem::Repeated { step: i, id: name.clone() };
                            prop_assert!(problems.contains(&problem), "{:?} in {:?}", problem, problems);
                        }
                        continue;
                    }
                    let Some(j) = ids.iter().position(|id| id == name) else {
                        expected += 1;
                        let problem = DependencyProblem::Unknown { step: i, id: name.clone() };
                        prop_assert!(problems.contains(&problem), "{:?} in {:?}", problem, problems);
                        continue;
                    };
                    if j == i {
                        expected += 1;
                        let problem = DependencyProblem::Itself { step: i };
                        prop_assert!(problems.contains(&problem), "{:?} in {:?}", problem, problems);
                    } else if j > i {
                        let later = DependencyProblem::Later { step: i, waits_for: j };
                        if problems.contains(&later) {
                            expected += 1;
                            prop_assert!(!d.is_ancestor(i, j), "s{} and s{} are on a cycle", i, j);
                        } else {
                            // On a cycle: reported once, through steps of that cycle.
                            prop_assert!(d.is_ancestor(i, j) && d.is_ancestor(j, i));
                            let on_it = |s: usize| s == i || (d.is_ancestor(s, i) && d.is_ancestor(i, s));
                            let reported = problems.iter().any(|p| matches!(p,
                                DependencyProblem::Cycle { steps } if steps.iter().all(|&s| on_it(s))));
                            prop_assert!(reported, "no cycle through s{} in {:?}", i, problems);
                        }
                    }
                }
            }
            let cycles: Vec<&Vec<usize>> = problems
                .iter()
                .filter_map(|p| match p {
                    DependencyProblem::Cycle { steps } => Some(steps),
                    _ => None,
                })
                .collect();
            prop_assert_eq!(problems.len(), expected + cycles.len());
            for steps in cycles {
                // Each step of a cycle waits for the one before it, the first for the last.
                prop_assert!(steps.len() >= 2);
                for (k, &s) in steps.iter().enumerate() {
                    let previous = steps[(k + steps.len() - 1) % steps.len()];
                    prop_assert!(d.waits_for(s).contains(&previous));
                }
                prop_assert_eq!(steps.iter().min(), steps.first());
            }
            // Problems come by step.
            prop_assert!(problems.windows(2).all(|w| w[0].step() <= w[1].step()));
        }
    }
}
