//! What a write fenced by its saga's row (an append, an end) takes when it carries its
//! task's write, and how its answer reads: whether the fence held, and whether it wrote.

use sagaplane_storage::postgres::{Done, Param, to_i64};

use super::super::Epoch;
use crate::error::{Error, Result};
use agent_host::store::{Expected, TaskWrite};

/// The parameters a task's write takes in a fenced write, after the saga's: the task, the
/// columns of the task store's row, and the version it must replace.
pub(super) fn task_params(task: &TaskWrite) -> Result<Vec<Param>> {
    let Expected::Version(version) = task.expected else {
        return Err(Error::Journal(
            "a saga's step writes its task, which exists already".into(),
        ));
    };
    let mut params = Vec::from(task_columns(task));
    params.push(Box::new(to_i64(version)));
    Ok(params)
}

/// The columns of the task store's row a task's write sets, in their order in the
/// journal's statements that write it.
pub(super) fn task_columns(task: &TaskWrite) -> [Param; 6] {
    [
        Box::new(task.id.clone()),
        Box::new(task.context_id.clone()),
        Box::new(task.state.clone()),
        Box::new(task.owner.clone()),
        Box::new(task.updated_ms),
        Box::new(task.body.clone()),
    ]
}

/// What a fenced write (`what`) answered: whether the fence held, and whether it wrote.
pub(super) fn fenced_outcome(
    done: &[Done],
    saga_id: &str,
    epoch: Epoch,
    task: Option<&TaskWrite>,
    what: &str,
) -> Result<()> {
    let Some(row) = done.last().and_then(|done| match done {
        Done::Rows(rows) => rows.first(),
        _ => None,
    }) else {
        return Err(Error::Journal(format!("{what} answered no row")));
    };
    let (held, written): (bool, bool) = (row.get(0), row.get(1));
    if !held {
        return Err(Error::Fenced {
            saga_id: saga_id.to_owned(),
            epoch,
        });
    }
    if !written {
        return Err(Error::Storage(agent_host::Error::Conflict {
            task_id: task.map(|t| t.id.clone()).unwrap_or_default(),
        }));
    }
    Ok(())
}
