//! A journal in memory, for tests: the same ownership and fencing rules as the SQLite
//! journal, nothing durable, no mandate accounting (a saga's mandate hold is not
//! reserved). Journals made with `as_other_owner` share one state, as replicas share a
//! database.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use super::{
    Claim, DEFAULT_LEASE, Ending, Entry, Epoch, Forgettable, Headers, Ownership, SagaHeader,
    SagaLog,
};
use crate::error::{Error, Result};
use crate::sync;

#[derive(Debug, Clone)]
struct Stored {
    header: SagaHeader,
    entries: Vec<Entry>,
    finished_ms: Option<i64>,
    owner: Option<Arc<str>>,
    epoch: Epoch,
    lease_until_ms: i64,
}

#[derive(Debug, Default)]
struct State {
    sagas: BTreeMap<String, Stored>,
}

/// The in-memory journal.
#[derive(Debug, Clone)]
pub struct MemoryJournal {
    state: Arc<Mutex<State>>,
    owner: Arc<str>,
    lease: Duration,
    finishes: Arc<watch::Sender<usize>>,
}

impl Default for MemoryJournal {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryJournal {
    pub fn new() -> Self {
        Self {
            state: Arc::default(),
            owner: uuid::Uuid::new_v4().to_string().into(),
            lease: DEFAULT_LEASE,
            finishes: Arc::new(watch::Sender::new(0)),
        }
    }

    /// The same journal, whose claims hold a saga for `lease` without renewal.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The same state, seen by another owner.
    pub fn as_other_owner(&self) -> Self {
        Self {
            owner: uuid::Uuid::new_v4().to_string().into(),
            ..self.clone()
        }
    }

    /// How many sagas have been marked finished, as it changes.
    pub fn finishes(&self) -> watch::Receiver<usize> {
        self.finishes.subscribe()
    }

    fn lease_until(&self, now_ms: i64) -> i64 {
        super::lease_until(self.lease, now_ms)
    }

    fn held_here(&self, stored: &Stored, epoch: Epoch) -> bool {
        stored.epoch == epoch && stored.owner.as_deref() == Some(&*self.owner)
    }
}

#[async_trait]
impl SagaLog for MemoryJournal {
    async fn begin_creating(
        &self,
        header: &SagaHeader,
        first: &[Entry],
        task: Option<&agent_host::store::TaskWrite>,
    ) -> Result<Epoch> {
        if task.is_some() {
            return Err(Error::Journal(
                "a journal in memory keeps no tasks: create the saga's task with the task store"
                    .into(),
            ));
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        let mut state = sync::lock(&self.state);
        if state.sagas.contains_key(&header.saga_id) {
            return Err(Error::Journal(format!(
                "saga {} was begun already",
                header.saga_id
            )));
        }
        state.sagas.insert(
            header.saga_id.clone(),
            Stored {
                header: header.clone(),
                entries: first.to_vec(),
                finished_ms: None,
                owner: Some(self.owner.clone()),
                epoch: 1,
                lease_until_ms: self.lease_until(now_ms),
            },
        );
        Ok(1)
    }

    async fn append_carrying(
        &self,
        saga_id: &str,
        epoch: Epoch,
        entries: &[Entry],
        task: Option<&agent_host::store::TaskWrite>,
        // Never given (`checks_revocations` is false): the driver reads the revocations.
        _unrevoked: Option<super::Unrevoked<'_>>,
    ) -> Result<()> {
        if task.is_some() {
            return Err(Error::Journal(
                "a journal in memory keeps no tasks: write the saga's task with the task store"
                    .into(),
            ));
        }
        let mut state = sync::lock(&self.state);
        match state.sagas.get_mut(saga_id) {
            Some(stored) if self.held_here(stored, epoch) => {
                stored.entries.extend_from_slice(entries);
                Ok(())
            }
            Some(_) => Err(Error::Fenced {
                saga_id: saga_id.to_owned(),
                epoch,
            }),
            None => Err(Error::Journal(format!("saga {saga_id} was never begun"))),
        }
    }

    async fn end(
        &self,
        saga_id: &str,
        epoch: Epoch,
        entries: &[Entry],
        _ending: &Ending,
        task: Option<&agent_host::store::TaskWrite>,
    ) -> Result<()> {
        if task.is_some() {
            return Err(Error::Journal(
                "a journal in memory keeps no tasks: end the saga's task with the task store"
                    .into(),
            ));
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        let mut state = sync::lock(&self.state);
        match state.sagas.get_mut(saga_id) {
            Some(stored) if self.held_here(stored, epoch) => {
                stored.entries.extend_from_slice(entries);
                if stored.finished_ms.is_none() {
                    stored.finished_ms = Some(now_ms);
                    self.finishes.send_modify(|n| *n += 1);
                }
                Ok(())
            }
            Some(_) => Err(Error::Fenced {
                saga_id: saga_id.to_owned(),
                epoch,
            }),
            None => Err(Error::Journal(format!("saga {saga_id} was never begun"))),
        }
    }

    async fn load(&self, saga_id: &str) -> Result<Option<(SagaHeader, Vec<Entry>)>> {
        let state = sync::lock(&self.state);
        Ok(state
            .sagas
            .get(saga_id)
            .map(|s| (s.header.clone(), s.entries.clone())))
    }

    async fn unfinished(&self) -> Result<Vec<String>> {
        let state = sync::lock(&self.state);
        Ok(state
            .sagas
            .iter()
            .filter(|(_, s)| s.finished_ms.is_none())
            .map(|(id, _)| id.clone())
            .collect())
    }

    async fn forgettable(
        &self,
        finished_before_ms: i64,
        now_ms: i64,
        at_most: usize,
    ) -> Result<Vec<Forgettable>> {
        let state = sync::lock(&self.state);
        let mut found: Vec<(i64, Forgettable)> = state
            .sagas
            .values()
            .filter_map(|s| {
                let finished = s.finished_ms?;
                (finished < finished_before_ms && s.header.spec.expires_at_ms < now_ms).then(|| {
                    (
                        finished,
                        Forgettable {
                            saga_id: s.header.saga_id.clone(),
                            task_id: s.header.task_id.clone(),
                        },
                    )
                })
            })
            .collect();
        found.sort_by_key(|(finished, _)| *finished);
        Ok(found.into_iter().take(at_most).map(|(_, f)| f).collect())
    }

    async fn forget(&self, saga_ids: &[String]) -> Result<()> {
        let mut state = sync::lock(&self.state);
        for saga_id in saga_ids {
            if state
                .sagas
                .get(saga_id)
                .is_some_and(|s| s.finished_ms.is_some())
            {
                state.sagas.remove(saga_id);
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Ownership for MemoryJournal {
    async fn claim(&self, saga_id: &str, now_ms: i64, how: Claim) -> Result<Option<Epoch>> {
        let lease_until_ms = self.lease_until(now_ms);
        let mut state = sync::lock(&self.state);
        let Some(stored) = state.sagas.get_mut(saga_id) else {
            return Ok(None);
        };
        let free = stored.owner.is_none() || stored.lease_until_ms < now_ms;
        if stored.finished_ms.is_some() || !(free || how == Claim::TakeOver) {
            return Ok(None);
        }
        stored.owner = Some(self.owner.clone());
        stored.epoch += 1;
        stored.lease_until_ms = lease_until_ms;
        Ok(Some(stored.epoch))
    }

    async fn renew(&self, now_ms: i64) -> Result<usize> {
        let lease_until_ms = self.lease_until(now_ms);
        let mut state = sync::lock(&self.state);
        let mut renewed = 0;
        for stored in state.sagas.values_mut() {
            if stored.finished_ms.is_none() && stored.owner.as_deref() == Some(&*self.owner) {
                stored.lease_until_ms = lease_until_ms;
                renewed += 1;
            }
        }
        Ok(renewed)
    }

    async fn release(&self, saga_id: &str, epoch: Epoch) -> Result<()> {
        let mut state = sync::lock(&self.state);
        if let Some(stored) = state.sagas.get_mut(saga_id)
            && self.held_here(stored, epoch)
        {
            stored.owner = None;
            stored.lease_until_ms = 0;
        }
        Ok(())
    }

    async fn claim_lapsed(&self, now_ms: i64, at_most: usize) -> Result<Vec<(String, Epoch)>> {
        let lease_until_ms = self.lease_until(now_ms);
        let mut state = sync::lock(&self.state);
        let mut claimed = Vec::new();
        for (saga_id, stored) in &mut state.sagas {
            if claimed.len() == at_most {
                break;
            }
            let free = stored.owner.is_none() || stored.lease_until_ms < now_ms;
            let mine = stored.owner.as_deref() == Some(self.owner.as_ref());
            if stored.finished_ms.is_none() && free && !mine {
                stored.owner = Some(self.owner.clone());
                stored.epoch += 1;
                stored.lease_until_ms = lease_until_ms;
                claimed.push((saga_id.clone(), stored.epoch));
            }
        }
        Ok(claimed)
    }

    async fn claimable(&self, now_ms: i64, at_most: usize) -> Result<Vec<String>> {
        let state = sync::lock(&self.state);
        Ok(state
            .sagas
            .iter()
            .filter(|(_, s)| {
                s.finished_ms.is_none() && (s.owner.is_none() || s.lease_until_ms < now_ms)
            })
            .map(|(id, _)| id.clone())
            .take(at_most)
            .collect())
    }
}

#[async_trait]
impl Headers for MemoryJournal {
    async fn header(&self, saga_id: &str) -> Result<Option<SagaHeader>> {
        let state = sync::lock(&self.state);
        Ok(state.sagas.get(saga_id).map(|s| s.header.clone()))
    }

    async fn saga_of_task(&self, task_id: &str) -> Result<Option<(String, bool)>> {
        let state = sync::lock(&self.state);
        Ok(state
            .sagas
            .iter()
            .find(|(_, s)| s.header.task_id == task_id)
            .map(|(saga_id, s)| (saga_id.clone(), s.finished_ms.is_some())))
    }
}
