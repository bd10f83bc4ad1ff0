//! A journal for the tests: appends that fail as on a full disk, begins and loads held
//! or failed on a switch, and counts of what was written.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use executor_agent::journal::{Around, Call, Entry, Wrapped};
use futures::future::BoxFuture;

/// A journal whose appends fail (as on a full disk) while their number (from 0) is in
/// the range set by `fail`; with switches that hold or fail other calls, and counts of
/// what it wrote. Every other call goes to the journal it wraps as it is.
pub type FlakyJournal<J> = Wrapped<J, JournalFaults>;

/// The journal `inner`, failing the appends numbered in `failing`.
pub fn flaky<J>(inner: Arc<J>, failing: std::ops::Range<u32>) -> FlakyJournal<J> {
    Wrapped {
        inner,
        around: JournalFaults {
            appends: Default::default(),
            headers_read: Default::default(),
            failing: Mutex::new(failing),
            refused: tokio::sync::Notify::new(),
            finishes: tokio::sync::watch::Sender::new(0),
            cancels: tokio::sync::watch::Sender::new(0),
            holds_begins: Default::default(),
            fails_begins: Mutex::new(None),
            begin_failed: tokio::sync::Notify::new(),
            begin_reached: tokio::sync::Notify::new(),
            begin_release: tokio::sync::Notify::new(),
            holds_loads: Default::default(),
            load_reached: tokio::sync::Notify::new(),
            load_release: tokio::sync::Notify::new(),
        },
    }
}

/// What `FlakyJournal` does around the journal it wraps.
pub struct JournalFaults {
    appends: std::sync::atomic::AtomicU32,
    /// How many saga headers were read (admission's lookups of a saga id).
    pub headers_read: std::sync::atomic::AtomicU32,
    failing: Mutex<std::ops::Range<u32>>,
    /// Signalled when the inner journal itself refuses an append.
    pub refused: tokio::sync::Notify,
    /// How many sagas were marked finished.
    pub finishes: tokio::sync::watch::Sender<u32>,
    /// How many appends carried a cancel.
    pub cancels: tokio::sync::watch::Sender<u32>,
    /// Set by `hold_begins`: each `begin` is notified on `begin_reached`, then waits for
    /// `begin_release`.
    holds_begins: std::sync::atomic::AtomicBool,
    /// Set by `fail_begins`: each `begin` fails as a full disk under this path would.
    fails_begins: Mutex<Option<String>>,
    pub begin_reached: tokio::sync::Notify,
    /// Notified at each `begin` failed by `fail_begins`.
    pub begin_failed: tokio::sync::Notify,
    pub begin_release: tokio::sync::Notify,
    /// Set by `hold_loads`: each `load` is notified on `load_reached`, then waits for
    /// `load_release`.
    holds_loads: std::sync::atomic::AtomicBool,
    pub load_reached: tokio::sync::Notify,
    pub load_release: tokio::sync::Notify,
}

impl JournalFaults {
    /// Holds every `begin` from now on until `begin_release` is notified.
    pub fn hold_begins(&self) {
        self.holds_begins.store(true, Ordering::SeqCst);
    }

    /// Fails every `begin` from now on, as a full disk under `path` would.
    pub fn fail_begins(&self, path: &str) {
        *self.fails_begins.lock().unwrap() = Some(path.to_owned());
    }

    /// Lets every `begin` from now on through again.
    pub fn stop_failing_begins(&self) {
        *self.fails_begins.lock().unwrap() = None;
    }

    /// Holds every `load` (recovery's read of a saga) from now on until `load_release` is
    /// notified.
    pub fn hold_loads(&self) {
        self.holds_loads.store(true, Ordering::SeqCst);
    }

    /// Fails every append from now on.
    pub fn fail_from_now(&self) {
        *self.failing.lock().unwrap() = self.appends.load(Ordering::SeqCst)..u32::MAX;
    }
}

impl Around for JournalFaults {
    fn around<'a, T: Send + 'a>(
        &'a self,
        what: Call<'a>,
        call: BoxFuture<'a, executor_agent::Result<T>>,
    ) -> BoxFuture<'a, executor_agent::Result<T>> {
        Box::pin(async move {
            match what {
                Call::Begin { .. } => {
                    if self.holds_begins.load(Ordering::SeqCst) {
                        self.begin_reached.notify_one();
                        self.begin_release.notified().await;
                    }
                    let failing = self.fails_begins.lock().unwrap().clone();
                    if let Some(path) = failing {
                        self.begin_failed.notify_one();
                        return Err(executor_agent::Error::Io {
                            what: format!("cannot write {path}"),
                            source: std::io::Error::other("No space left on device"),
                        });
                    }
                    call.await
                }
                // A saga's end is the append of its last step and its finish mark, in one
                // write: counted, and failed, as both.
                Call::Append { entries, .. } | Call::End { entries, .. } => {
                    let n = self.appends.fetch_add(1, Ordering::SeqCst);
                    if self.failing.lock().unwrap().contains(&n) {
                        return Err(executor_agent::Error::Journal(
                            "database or disk is full".into(),
                        ));
                    }
                    let appended = call.await;
                    let cancel = entries.iter().any(|e| {
                        matches!(e, Entry::Event(executor_agent::saga::Event::Cancel { .. }))
                    });
                    match &appended {
                        Ok(_) if cancel => self.cancels.send_modify(|n| *n += 1),
                        Ok(_) => {}
                        Err(_) => self.refused.notify_one(),
                    }
                    if appended.is_ok() && matches!(what, Call::End { .. }) {
                        self.finishes.send_modify(|n| *n += 1);
                    }
                    appended
                }
                Call::Header { .. } => {
                    self.headers_read.fetch_add(1, Ordering::SeqCst);
                    call.await
                }
                Call::Load { .. } => {
                    if self.holds_loads.load(Ordering::SeqCst) {
                        self.load_reached.notify_one();
                        self.load_release.notified().await;
                    }
                    call.await
                }
                _ => call.await,
            }
        })
    }
}
