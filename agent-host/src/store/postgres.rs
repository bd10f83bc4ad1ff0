//! The task store (`postgres/tasks.rs`) and task events across processes
//! (`postgres/feed.rs`) on the PostgreSQL database replicas share
//! (`sagaplane_storage::postgres`).

mod feed;
mod tasks;

pub use feed::PostgresFeed;
pub use tasks::PostgresTaskStore;
