//! A journal around another. `Wrapped` forwards every method of the journal it wraps,
//! through the one hook of what it adds (`Around`: a crash switch, a test's faults, a
//! benchmark's clock), so that a wrapper says what it changes and nothing else, and no
//! method it does not name can be forgotten (a forgotten one would fall back to the
//! trait's slower default, or skip the wrapper's effect).

use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;

use super::{
    Claim, Ending, Entry, Epoch, Forgettable, Headers, Journal, Ownership, SagaHeader, SagaLog,
};
use crate::error::Result;
use agent_host::store::TaskWrite;

/// One method of the journal, as a wrapper sees it.
#[derive(Debug, Clone, Copy)]
pub enum Call<'a> {
    Begin {
        header: &'a SagaHeader,
        first: &'a [Entry],
        task: Option<&'a TaskWrite>,
    },
    Append {
        saga_id: &'a str,
        epoch: Epoch,
        entries: &'a [Entry],
    },
    End {
        saga_id: &'a str,
        epoch: Epoch,
        entries: &'a [Entry],
    },
    Claim {
        saga_id: &'a str,
    },
    Renew,
    Release {
        saga_id: &'a str,
    },
    Claimable,
    ClaimLapsed,
    Load {
        saga_id: &'a str,
    },
    Unfinished,
    Header {
        saga_id: &'a str,
    },
    SagaOfTask {
        task_id: &'a str,
    },
    Forgettable,
    Forget {
        saga_ids: &'a [String],
    },
}

impl Call<'_> {
    /// Whether the call writes (and is durable when it returns `Ok`).
    pub fn writes(&self) -> bool {
        matches!(
            self,
            Self::Begin { .. }
                | Self::Append { .. }
                | Self::End { .. }
                | Self::Claim { .. }
                | Self::ClaimLapsed
                | Self::Renew
                | Self::Release { .. }
                | Self::Forget { .. }
        )
    }
}

/// What a wrapper does around each call of the journal it wraps.
pub trait Around: Send + Sync + 'static {
    /// Runs `call`, the wrapped journal's method for `what` (it runs only if awaited);
    /// by default just that.
    fn around<'a, T: Send + 'a>(
        &'a self,
        what: Call<'a>,
        call: BoxFuture<'a, Result<T>>,
    ) -> BoxFuture<'a, Result<T>> {
        let _ = what;
        call
    }
}

/// `inner`, with `around` run around each of its calls. Dereferences to `around`, so a
/// wrapper's own methods (a test's switches) are called on the journal itself.
#[derive(Debug)]
pub struct Wrapped<J, A> {
    pub inner: Arc<J>,
    pub around: A,
}

impl<J, A> std::ops::Deref for Wrapped<J, A> {
    type Target = A;

    fn deref(&self) -> &A {
        &self.around
    }
}

#[async_trait]
impl<J: Journal, A: Around> SagaLog for Wrapped<J, A> {
    async fn begin_creating(
        &self,
        header: &SagaHeader,
        first: &[Entry],
        task: Option<&TaskWrite>,
    ) -> Result<Epoch> {
        let call = self.inner.begin_creating(header, first, task);
        self.around
            .around(
                Call::Begin {
                    header,
                    first,
                    task,
                },
                call,
            )
            .await
    }

    async fn append_carrying(
        &self,
        saga_id: &str,
        epoch: Epoch,
        entries: &[Entry],
        task: Option<&TaskWrite>,
        unrevoked: Option<super::Unrevoked<'_>>,
    ) -> Result<()> {
        let call = self
            .inner
            .append_carrying(saga_id, epoch, entries, task, unrevoked);
        let what = Call::Append {
            saga_id,
            epoch,
            entries,
        };
        self.around.around(what, call).await
    }

    fn checks_revocations(&self) -> bool {
        self.inner.checks_revocations()
    }

    async fn end(
        &self,
        saga_id: &str,
        epoch: Epoch,
        entries: &[Entry],
        ending: &Ending,
        task: Option<&agent_host::store::TaskWrite>,
    ) -> Result<()> {
        let call = self.inner.end(saga_id, epoch, entries, ending, task);
        let what = Call::End {
            saga_id,
            epoch,
            entries,
        };
        self.around.around(what, call).await
    }

    async fn load(&self, saga_id: &str) -> Result<Option<(SagaHeader, Vec<Entry>)>> {
        let call = self.inner.load(saga_id);
        self.around.around(Call::Load { saga_id }, call).await
    }

    async fn unfinished(&self) -> Result<Vec<String>> {
        let call = self.inner.unfinished();
        self.around.around(Call::Unfinished, call).await
    }

    async fn forgettable(
        &self,
        finished_before_ms: i64,
        now_ms: i64,
        at_most: usize,
    ) -> Result<Vec<Forgettable>> {
        let call = self.inner.forgettable(finished_before_ms, now_ms, at_most);
        self.around.around(Call::Forgettable, call).await
    }

    async fn forget(&self, saga_ids: &[String]) -> Result<()> {
        let call = self.inner.forget(saga_ids);
        self.around.around(Call::Forget { saga_ids }, call).await
    }
}

#[async_trait]
impl<J: Journal, A: Around> Ownership for Wrapped<J, A> {
    async fn claim(&self, saga_id: &str, now_ms: i64, how: Claim) -> Result<Option<Epoch>> {
        let call = self.inner.claim(saga_id, now_ms, how);
        self.around.around(Call::Claim { saga_id }, call).await
    }

    async fn renew(&self, now_ms: i64) -> Result<usize> {
        let call = self.inner.renew(now_ms);
        self.around.around(Call::Renew, call).await
    }

    async fn release(&self, saga_id: &str, epoch: Epoch) -> Result<()> {
        let call = self.inner.release(saga_id, epoch);
        self.around.around(Call::Release { saga_id }, call).await
    }

    async fn claimable(&self, now_ms: i64, at_most: usize) -> Result<Vec<String>> {
        let call = self.inner.claimable(now_ms, at_most);
        self.around.around(Call::Claimable, call).await
    }

    async fn claim_lapsed(&self, now_ms: i64, at_most: usize) -> Result<Vec<(String, Epoch)>> {
        let call = self.inner.claim_lapsed(now_ms, at_most);
        self.around.around(Call::ClaimLapsed, call).await
    }

    fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }

    // Not around the hook: a planned stop's last word, which no fault or crash switch
    // is about.
    async fn retire(&self) -> Result<()> {
        self.inner.retire().await
    }
}

#[async_trait]
impl<J: Journal, A: Around> Headers for Wrapped<J, A> {
    async fn header(&self, saga_id: &str) -> Result<Option<SagaHeader>> {
        let call = self.inner.header(saga_id);
        self.around.around(Call::Header { saga_id }, call).await
    }

    async fn saga_of_task(&self, task_id: &str) -> Result<Option<(String, bool)>> {
        let call = self.inner.saga_of_task(task_id);
        self.around.around(Call::SagaOfTask { task_id }, call).await
    }
}
