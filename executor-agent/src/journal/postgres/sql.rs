//! The journal's statements that write a saga's rows: each one statement, so that what
//! it checks and what it writes are one step of the database.

/// The fence: the saga's row locked at this epoch and owner, in the append's own
/// statement. A claim locks that row `FOR UPDATE` first, so it waits for this append to
/// commit, or this append waits for it and then finds another epoch. `KEY SHARE` is the
/// weakest lock that a claim's `FOR UPDATE` still waits for; a renewal (a plain update of
/// the lease) does not wait for it, nor it for a renewal: appends of many sagas and the
/// renewal of all of them run at once without deadlocking. The appends of one batch
/// share the statement (`RowWrite`: saga, body, epoch, owner, and the mandate that must
/// not be revoked, or NULLs), each fenced as if alone. An append carrying forward calls
/// names its saga's mandate, and is not written if it is revoked: the check at the moment
/// of effect, in the statement that journals the calls' intents.
pub(super) const APPEND: &str = "WITH r AS (
         SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[],
                              $6::TEXT[])
             WITH ORDINALITY AS r (saga_id, body, epoch, owner, principal_key, mandate_id, n)
     ), fenced AS (
         SELECT r.n, r.saga_id, r.body FROM r
         JOIN sagas ON sagas.saga_id = r.saga_id AND sagas.epoch = r.epoch::BIGINT
                   AND sagas.owner = r.owner
         WHERE r.mandate_id IS NULL OR NOT EXISTS (
             SELECT 1 FROM mandate_revocations v
             WHERE v.principal_key = r.principal_key AND v.mandate_id = r.mandate_id)
         FOR KEY SHARE OF sagas
     ), written AS (
         INSERT INTO entries (saga_id, body) SELECT saga_id, body FROM fenced ORDER BY n
     )
     SELECT n FROM fenced";

/// An append with its task's write, in one statement, all of it or none: under the fence
/// of the saga's row (saga `$1`, epoch `$2`, owner `$3`), task `$5` at version `$11`
/// written with the columns of the task store's row (`$6`-`$10`), and the entries `$4`
/// only if both held; given a mandate (`$12`, `$13`, else NULLs), only if it is not
/// revoked, which the fence then counts as not holding. Answers whether the fence held and
/// whether it wrote.
pub(super) const APPEND_WITH_TASK: &str = "WITH fence AS (
         SELECT saga_id FROM sagas WHERE saga_id = $1 AND epoch = $2 AND owner = $3
           AND ($13::TEXT IS NULL OR NOT EXISTS (
               SELECT 1 FROM mandate_revocations
               WHERE principal_key = $12::TEXT AND mandate_id = $13::TEXT))
         FOR KEY SHARE
     ), task AS (
         UPDATE tasks SET context_id = $6, state = $7, owner = $8, updated_ms = $9,
                          body = $10, version = tasks.version + 1
         WHERE id = $5 AND version = $11 AND EXISTS (SELECT 1 FROM fence)
         RETURNING 1
     ), written AS (
         INSERT INTO entries (saga_id, body) SELECT $1::TEXT, $4::TEXT FROM task
     )
     SELECT EXISTS (SELECT 1 FROM fence), EXISTS (SELECT 1 FROM task)";

/// The mandate's row, the first time a plan under it is accepted. An existing row is
/// seen without waiting for a transaction that holds it (`ON CONFLICT` alone would wait).
pub(super) const MANDATE_IF_NEW: &str = "INSERT INTO mandates
         (principal_key, mandate_id, document_sha256, principal, currency, budget_minor, max_sagas)
     SELECT $1::TEXT, $2::TEXT, $3::TEXT, $4::TEXT, $5::TEXT, $6::BIGINT, $7::BIGINT
     WHERE NOT EXISTS (SELECT 1 FROM mandates WHERE principal_key = $1 AND mandate_id = $2)
     ON CONFLICT DO NOTHING";

/// A saga begun under a mandate, in one statement: the budget taken by a conditional
/// update of the mandate's row (the rules of `mandates::refusal_for`, and no revocation),
/// and the saga's rows written only if it was. `$current` decides whether the registry the
/// plan was validated against is current. Answers whether the budget was taken, whether
/// the mandate was revoked, whether the registry was current, and whether the saga id was
/// begun already (the same plan sent again: nothing is written, and the transaction the
/// begins of the moment share goes on; a saga begun by a transaction not committed yet
/// is found by the keys of its row and its reservation, and fails this one).
macro_rules! begin_under_mandate {
    ($current:expr) => {
        concat!(
            "WITH current AS (SELECT 1 WHERE ",
            $current,
            "), fresh AS (
                 SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM sagas WHERE saga_id = $1::TEXT)
             ), revoked AS (
                 SELECT 1 FROM mandate_revocations WHERE principal_key = $8::TEXT AND mandate_id = $9::TEXT
             ), taken AS (
                 UPDATE mandates SET used_minor = used_minor + $10::BIGINT, sagas = sagas + 1
                 WHERE principal_key = $8 AND mandate_id = $9 AND document_sha256 = $11::TEXT
                   AND $10 <= GREATEST($12::BIGINT - used_minor, 0)
                   AND ($13::BIGINT IS NULL OR sagas < $13)
                   AND NOT EXISTS (SELECT 1 FROM revoked) AND EXISTS (SELECT 1 FROM current)
                   AND EXISTS (SELECT 1 FROM fresh)
                 RETURNING 1
             ), reservation AS (
                 INSERT INTO mandate_reservations
                     (saga_id, principal_key, mandate_id, reserved_minor, spent_minor, at_ms)
                 SELECT $1::TEXT, $8, $9, $10, NULL, $4::BIGINT FROM taken
             ), saga AS (
                 INSERT INTO sagas (saga_id, task_id, header, finished_ms, mandate_ends_ms, owner,
                                    epoch, lease_until_ms)
                 SELECT $1, $2::TEXT, $3::TEXT, $4, $5::BIGINT, $6::TEXT, 1, $7::BIGINT FROM taken
                 RETURNING saga_id
             ), entry AS (
                 INSERT INTO entries (saga_id, body)
                 SELECT saga_id, $14::TEXT FROM saga WHERE $14 IS NOT NULL
             )
             SELECT EXISTS (SELECT 1 FROM taken), EXISTS (SELECT 1 FROM revoked),
                    EXISTS (SELECT 1 FROM current), NOT EXISTS (SELECT 1 FROM fresh)"
        )
    };
}

/// Whether no registration newer than `$15` is in the registry's history (the registry
/// the plan was validated against is current).
macro_rules! registry_current {
    ($seen:literal) => {
        concat!(
            "(SELECT COALESCE(MAX(seq), 0) FROM registry_history) <= ",
            $seen,
            "::BIGINT"
        )
    };
}

/// A saga begun under a mandate (`begin_under_mandate`), the registry not asked.
pub(super) const BEGIN_UNDER_MANDATE: &str = begin_under_mandate!("TRUE");

/// A saga begun under a mandate only if no registration newer than `$15` was made.
pub(super) const BEGIN_UNDER_MANDATE_IF_CURRENT: &str =
    begin_under_mandate!(registry_current!("$15"));

/// A saga begun with no mandate only if no registration newer than `$8` was made: its row
/// (`$1`-`$7`, as a begin's) and its first entries (`$9`, when given). A saga id begun
/// already is not begun again, and fails nothing else of the transaction. Answers whether
/// it was written, and whether the registry was current. (Unasked, the registry's history
/// is not read: a begin is a plain insert.)
pub(super) const BEGIN_IF_CURRENT: &str = concat!(
    "WITH current AS (SELECT 1 WHERE ",
    registry_current!("$8"),
    "), saga AS (
         INSERT INTO sagas (saga_id, task_id, header, finished_ms, mandate_ends_ms, owner,
                            epoch, lease_until_ms)
         SELECT $1::TEXT, $2::TEXT, $3::TEXT, $4::BIGINT, $5::BIGINT, $6::TEXT, 1, $7::BIGINT
         FROM current
         ON CONFLICT (saga_id) DO NOTHING
         RETURNING saga_id
     ), entry AS (
         INSERT INTO entries (saga_id, body)
         SELECT saga_id, $9::TEXT FROM saga WHERE $9 IS NOT NULL
     )
     SELECT EXISTS (SELECT 1 FROM saga), EXISTS (SELECT 1 FROM current)"
);

/// A saga's end in one statement, all of it or none: under the fence of its row (saga
/// `$1`, epoch `$2`, owner `$3`, as an append), and given `$task` what else it waits for
/// (`go`: the task's write, `$go_if`), its last entries (`$4`, when there are any), its
/// reservation settled at `$5` (the rules of `mandates::settle`: what it did not spend goes
/// back to its mandate, whose row is written only then) and its finish mark at `$6`. Answers
/// whether the fence held and whether it wrote.
macro_rules! end_sql {
    ($task:literal, $go_if:literal) => {
        concat!(
            "WITH fence AS (
                 SELECT saga_id FROM sagas WHERE saga_id = $1 AND epoch = $2 AND owner = $3
                 FOR KEY SHARE
             ), ",
            $task,
            " go AS (
                 SELECT 1 FROM fence WHERE ",
            $go_if,
            "), written AS (
                 INSERT INTO entries (saga_id, body) SELECT $1, $4 FROM go WHERE $4::TEXT IS NOT NULL
             ), settled AS (
                 UPDATE mandate_reservations SET spent_minor = LEAST($5, reserved_minor)
                 WHERE saga_id = $1 AND spent_minor IS NULL AND EXISTS (SELECT 1 FROM go)
                 RETURNING principal_key, mandate_id, reserved_minor - spent_minor AS unspent
             ), given_back AS (
                 UPDATE mandates SET used_minor = used_minor - settled.unspent
                 FROM settled
                 WHERE mandates.principal_key = settled.principal_key
                   AND mandates.mandate_id = settled.mandate_id AND settled.unspent > 0
             ), finished AS (
                 UPDATE sagas SET finished = TRUE, finished_ms = $6
                 WHERE saga_id = $1 AND EXISTS (SELECT 1 FROM go)
             )
             SELECT EXISTS (SELECT 1 FROM fence), EXISTS (SELECT 1 FROM go)"
        )
    };
}

/// A saga's end with no task to write.
pub(super) const END: &str = end_sql!("", "TRUE");

/// A saga's end with its task's last write: task `$7` at version `$13`, the columns of
/// the task store's row (`$8`-`$12`), written only under the fence; nothing is written
/// unless it is.
pub(super) const END_WITH_TASK: &str = end_sql!(
    "task AS (
         UPDATE tasks SET context_id = $8, state = $9, owner = $10, updated_ms = $11,
                          body = $12, version = tasks.version + 1
         WHERE id = $7 AND version = $13 AND EXISTS (SELECT 1 FROM fence)
         RETURNING 1
     ),",
    "EXISTS (SELECT 1 FROM task)"
);

/// A saga's task, created in its begin's transaction: written only when the saga's row
/// (`$7`) was, on this task (`$1`). The saga's lease decides who drives it.
pub(super) const CREATE_TASK: &str = "INSERT INTO tasks
         (id, context_id, state, owner, updated_ms, version, body)
     SELECT $1::TEXT, $2::TEXT, $3::TEXT, $4::TEXT, $5::BIGINT, 1, $6::TEXT
     WHERE EXISTS (SELECT 1 FROM sagas WHERE saga_id = $7::TEXT AND task_id = $1)";
