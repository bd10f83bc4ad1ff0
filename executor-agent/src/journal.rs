//! The write-ahead journal: for each saga, its spec, then every event and every
//! invocation intent in the order they happened. An event and the intents it leads to
//! are journaled together, in one durable write, before any of those calls is made;
//! replaying the journal therefore rebuilds the saga exactly, and shows which calls were
//! made but never answered.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::saga::spec::MandateHold;
use crate::saga::{Event, Invocation, SagaSpec};

#[cfg(test)]
pub(crate) mod conformance;
mod memory;
mod postgres;
mod sqlite;
mod wrapped;

pub use memory::MemoryJournal;
pub use postgres::PostgresJournal;
pub use sqlite::{DEFAULT_LEASE, SqliteJournal};
pub use wrapped::{Around, Call, Wrapped};

/// One journal entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "camelCase")]
pub enum Entry {
    Event(Event),
    Intent(Invocation),
}

/// The format of the journal this build writes and reads: of the header, the entries and
/// what replay derives from them. A saga journaled in a format this build does not know
/// (by a newer executor) is refused, not replayed under other rules.
pub const JOURNAL_FORMAT: u32 = 1;

/// Journals from before the header carried its format are format 1.
fn first_format() -> u32 {
    1
}

/// What the journal keeps about a saga besides its entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SagaHeader {
    /// The journal format the saga was written in (`JOURNAL_FORMAT` when it was begun).
    #[serde(default = "first_format")]
    pub format: u32,
    pub saga_id: String,
    pub plan_version: u32,
    /// The A2A task that reports this saga, and its context.
    pub task_id: String,
    pub context_id: String,
    /// The signed plan as received (to recognise a resubmission), shared with the plan
    /// as taken in rather than copied.
    pub plan: Arc<serde_json::Value>,
    /// Shared with the saga's state (`Saga::spec`).
    pub spec: Arc<SagaSpec>,
    /// On a registry replicas share, the newest registration the plan was validated
    /// against (`Registry::registrations_read`): the accepting write is refused when the
    /// database holds a newer one (`Error::RegistryChanged`), and the plan is validated
    /// again. `None` where the executor's registry is its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registrations_read: Option<i64>,
}

/// Which claim on a saga a write is made under. Every claim of a saga gives a higher
/// epoch, and the journal refuses a write made under an older one (`Error::Fenced`): an
/// owner that was paused past its lease, or cut off, cannot write for a saga another
/// owner took over.
pub type Epoch = u64;

/// When a claim made at `now_ms` for `lease` lapses, in ms since the epoch.
fn lease_until(lease: std::time::Duration, now_ms: i64) -> i64 {
    let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    now_ms.saturating_add(lease_ms)
}

/// How a claim treats a saga that another owner holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Only if nobody holds it, or its owner's lease has lapsed.
    IfLapsed,
    /// Whoever holds it: for the one process that owns a state file (its lock proves no
    /// other process drives these sagas), at its start.
    TakeOver,
}

/// Where sagas are journaled: the three concerns below, which every journal implements
/// (SQLite and in memory now; PostgreSQL for replicas) and which the executor holds as one
/// `dyn Journal`. Each journal belongs to one owner (a process), which drives the sagas it
/// began or claimed, each under an epoch, and renews its leases on them.
pub trait Journal: SagaLog + Ownership + Headers {}

impl<J: SagaLog + Ownership + Headers> Journal for J {}

/// A mandate that must not be revoked for a write to be made (`SagaLog::append_carrying`):
/// the write carries forward calls at or before the saga's point of no return.
#[derive(Debug, Clone, Copy)]
pub struct Unrevoked<'a> {
    pub principal_key: &'a str,
    pub mandate_id: &'a str,
}

/// The sagas' entries: begun, appended to under the owner's fence, finished, read back
/// for recovery, and forgotten.
#[async_trait]
pub trait SagaLog: Send + Sync + 'static {
    /// Records a new saga with the entries of its first step, as one durable write that
    /// also reserves the plan's worst case against its mandate (`Error::Mandate` when the
    /// mandate cannot cover it, or was revoked: nothing is then written), claimed by this
    /// journal's owner. Durable when it returns; the saga's first epoch.
    async fn begin(&self, header: &SagaHeader, first: &[Entry]) -> Result<Epoch> {
        self.begin_creating(header, first, None).await
    }
    /// `begin`, carrying the creation of the saga's task (`Expected::Absent`) in the same
    /// write, all of it or none, when given: a journal keeping its tables in the task
    /// store's database writes it (`ExecutorConfig::tasks_beside_journal`). A task that
    /// exists already refuses it, and nothing is written (a task id is new, so that is a
    /// defect: SQLite says `agent_host::Error::Conflict`, PostgreSQL its unique key).
    async fn begin_creating(
        &self,
        header: &SagaHeader,
        first: &[Entry],
        task: Option<&agent_host::store::TaskWrite>,
    ) -> Result<Epoch>;
    /// Appends entries, in order, as one durable write: all of them or none, under
    /// `epoch` (`Error::Fenced`, and nothing written, when the saga was claimed since).
    /// Durable when it returns; concurrent appends share an fsync.
    async fn append(&self, saga_id: &str, epoch: Epoch, entries: &[Entry]) -> Result<()> {
        self.append_carrying(saga_id, epoch, entries, None, None)
            .await
    }
    /// `append`, carrying the write of the saga's task in the same write, all of it or
    /// none, when given (a step that changes the state its task shows): a journal keeping
    /// its tables in the task store's database writes it
    /// (`ExecutorConfig::tasks_beside_journal`). A task store that holds another version
    /// of the task than `task` expects refuses it (`agent_host::Error::Conflict`, nothing
    /// written). Given `unrevoked` (only by a driver told so by `checks_revocations`), the
    /// write is made only if that mandate is not revoked as the write is made
    /// (`Error::RevokedAtWrite`, nothing written, otherwise).
    async fn append_carrying(
        &self,
        saga_id: &str,
        epoch: Epoch,
        entries: &[Entry],
        task: Option<&agent_host::store::TaskWrite>,
        unrevoked: Option<Unrevoked<'_>>,
    ) -> Result<()>;
    /// Whether `append_carrying` checks a mandate's revocation in the write itself
    /// (`unrevoked`): where the revocations live in a database other replicas write, this
    /// saves the driver a read before each forward call. A journal that does not is
    /// never given one: the driver reads the revocations first.
    fn checks_revocations(&self) -> bool {
        false
    }
    /// Ends a saga in one durable write, all of it or none: `entries` (the step that
    /// ended it; none when the end was journaled before, by a process that died before
    /// marking it), its finish mark (it needs no recovery), its mandate's reservation
    /// settled at what it really spent (`Ending`),
    /// and, given `task`, its task's last write, which a journal keeping its tables in
    /// the task store's database carries (`ExecutorConfig::tasks_beside_journal`). Under `epoch`
    /// (`Error::Fenced`, nothing written); a task store that holds another version of the
    /// task than `task` expects refuses it too (`agent_host::Error::Conflict`, nothing
    /// written). Durable when it returns.
    async fn end(
        &self,
        saga_id: &str,
        epoch: Epoch,
        entries: &[Entry],
        ending: &Ending,
        task: Option<&agent_host::store::TaskWrite>,
    ) -> Result<()>;
    async fn load(&self, saga_id: &str) -> Result<Option<(SagaHeader, Vec<Entry>)>>;
    /// Sagas not finished: the ones to resume after a restart.
    async fn unfinished(&self) -> Result<Vec<String>>;
    /// The oldest finished sagas (at most `at_most`) that may be forgotten: finished before
    /// `finished_before_ms`, with a plan whose mandate expired before `now_ms`, so that the
    /// same plan sent again is refused instead of run again.
    async fn forgettable(
        &self,
        finished_before_ms: i64,
        now_ms: i64,
        at_most: usize,
    ) -> Result<Vec<Forgettable>>;
    /// Deletes finished sagas (entries and header), in one durable write; an unfinished
    /// one among them is kept.
    async fn forget(&self, saga_ids: &[String]) -> Result<()>;
}

/// Who drives each unfinished saga: claims at a new epoch, leases renewed together, and
/// released at a stop.
#[async_trait]
pub trait Ownership: Send + Sync + 'static {
    /// This journal's owner claims an unfinished saga (`how`), and holds it for the
    /// journal's lease; the new epoch, or `None` when it is finished, unknown, or held by
    /// a live owner.
    async fn claim(&self, saga_id: &str, now_ms: i64, how: Claim) -> Result<Option<Epoch>>;
    /// Extends every lease this journal's owner holds, in one write; how many. A store
    /// whose rows other transactions lock may skip a saga locked at that moment (its end
    /// or a claim is being written), which the next renewal extends if it is still held.
    async fn renew(&self, now_ms: i64) -> Result<usize>;
    /// Gives a saga up (a stop): any owner may claim it at once.
    async fn release(&self, saga_id: &str, epoch: Epoch) -> Result<()>;
    /// Unfinished sagas that nobody holds or whose owner's lease lapsed before `now_ms`,
    /// at most `at_most`.
    async fn claimable(&self, now_ms: i64, at_most: usize) -> Result<Vec<String>>;
    /// Claims at most `at_most` of those sagas, other than this journal's owner's own, for
    /// this owner, each at a new epoch, in one write; the sagas and their epochs. An
    /// owner's own lapsed sagas are still driven by it: its next renewal holds them again,
    /// and a claim would only fence its own drivers out. Owners claiming at once get
    /// disjoint sets (each saga goes to one of them). On PostgreSQL each owner claims
    /// only its share among the owners alive, so a dead owner's sagas spread over the
    /// others whichever claims first.
    async fn claim_lapsed(&self, now_ms: i64, at_most: usize) -> Result<Vec<(String, Epoch)>>;
    /// Whether other executors (replicas) may own sagas in this journal. Then a start
    /// claims only the sagas nobody holds, and the sagas whose owner stops renewing are
    /// taken over while running (`Executor::take_over_lapsed`); otherwise the one
    /// process that opens the journal takes every unfinished saga over at its start.
    fn is_shared(&self) -> bool {
        false
    }
    /// This owner stops (a planned stop, before its drivers give their sagas up): on a
    /// shared journal the others stop counting it among the owners alive, so the sagas it
    /// gives up are shared out among them at once.
    async fn retire(&self) -> Result<()> {
        Ok(())
    }
}

/// A saga's header by its id, read on every submission (one row, not the saga's
/// entries).
#[async_trait]
pub trait Headers: Send + Sync + 'static {
    /// The header of a saga, if one with this id was ever begun.
    async fn header(&self, saga_id: &str) -> Result<Option<SagaHeader>>;
    /// The saga begun on task `task_id`, and whether it was marked finished; `None` if
    /// none was (its plan not begun yet, or never, or the saga forgotten). A task's saga
    /// is found here, not in the task.
    async fn saga_of_task(&self, task_id: &str) -> Result<Option<(String, bool)>>;
}

/// What a saga's end settles besides its entries: its mandate's reservation, at what the
/// saga really spent.
#[derive(Debug, Clone, Default)]
pub struct Ending {
    /// The mandate the saga holds (`SagaSpec::mandate`), if any: a shared journal
    /// commits the settlement with the other writes under it.
    pub mandate: Option<MandateHold>,
    pub spent_minor: u64,
}

/// A saga the journal forgot, and the task that reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forgettable {
    pub saga_id: String,
    pub task_id: String,
}

/// Fault injection for crash tests (`Wrapped<J, PauseAfter>`, made by
/// `PauseAfter::writes`): after the `after`-th durable write (a begin, an append or a
/// finish) it announces it on stderr and never returns, so that a test can SIGKILL the
/// process at exactly that journal point.
pub type PauseAfterWrites<J> = Wrapped<J, PauseAfter>;

/// The hook of `PauseAfterWrites`.
#[derive(Debug)]
pub struct PauseAfter {
    after: u64,
    writes: std::sync::atomic::AtomicU64,
}

impl PauseAfter {
    /// `inner`, pausing after its `after`-th durable write.
    pub fn writes<J>(inner: J, after: u64) -> PauseAfterWrites<J> {
        Wrapped {
            inner: std::sync::Arc::new(inner),
            around: Self {
                after,
                writes: std::sync::atomic::AtomicU64::new(0),
            },
        }
    }
}

impl Around for PauseAfter {
    fn around<'a, T: Send + 'a>(
        &'a self,
        what: Call<'a>,
        call: futures::future::BoxFuture<'a, Result<T>>,
    ) -> futures::future::BoxFuture<'a, Result<T>> {
        Box::pin(async move {
            let done = call.await?;
            let written = match what {
                Call::Begin { .. } => "begin".to_owned(),
                Call::End { entries, .. } => entries
                    .iter()
                    .map(|entry| match entry {
                        Entry::Event(_) => "event",
                        Entry::Intent(_) => "intent",
                    })
                    .chain(["end"])
                    .collect::<Vec<_>>()
                    .join("+"),
                Call::Append { entries, .. } => entries
                    .iter()
                    .map(|entry| match entry {
                        Entry::Event(_) => "event",
                        Entry::Intent(_) => "intent",
                    })
                    .collect::<Vec<_>>()
                    .join("+"),
                _ => return Ok(done),
            };
            let n = self
                .writes
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                + 1;
            if n == self.after {
                eprintln!("journal write {n} ({written}) is durable; pausing for a crash test");
                std::future::pending::<()>().await;
            }
            Ok(done)
        })
    }
}
