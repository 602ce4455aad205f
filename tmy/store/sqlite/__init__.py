"""The embedded store: one SQLite file, zero set-up, shared safely by several processes.

Why it is built this way:

* **Synchronous calls on the event loop.** Every statement is a few
  microseconds (WAL, ``synchronous=NORMAL``: a commit appends to the WAL and
  does not fsync), far cheaper than handing it to a thread. What could block is
  waiting for *another process* that holds the write lock, so SQLite's own busy
  wait is kept short (``busy_timeout`` 20 ms) and longer waits are retried with
  ``await asyncio.sleep`` backoff until ``lock_timeout`` (10 s) has passed; only
  then does the call fail with :class:`~tmy.errors.StoreError`. The loop is
  never blocked for more than one short busy wait.
* **update** runs ``BEGIN IMMEDIATE; SELECT; fn; write; COMMIT`` in one
  synchronous go: nothing else in this process can run in between (no
  ``await``), and ``BEGIN IMMEDIATE`` takes SQLite's write lock, so it is atomic
  across processes too. The updates asked in one pass of the event loop share
  that transaction (:mod:`tmy.store.passes`: a commit alone is ~16 µs, a
  ``SELECT``/write pair inside a shared one ~3): each, in the order asked, reads
  what the ones before it left. If ``fn`` raises, nothing of that update is
  written (the others' writes stand) and its caller gets the exception unchanged;
  ``fn`` runs in its caller's context (a copy taken when asked).
* **TTL** is stored as an absolute wall-clock time (``time.time()``, shared by
  all processes). Expired rows read as ``MISSING`` and are purged lazily: at
  most once a minute, as part of a write.
* ``update(ttl=None)`` keeps the key's current expiry (a counter inside a
  session keeps the session's lifetime); ``set(ttl=None)`` stores a value that
  never expires; ``set(key, MISSING)`` deletes the key.
* **Every write is applied at most once.** The only retry is ``_run``'s, and
  it re-runs an operation only after SQLITE_BUSY/SQLITE_LOCKED, which SQLite
  reports *before* changing anything: a single statement (``set``,
  ``delete``, the lease statements) that fails busy did not run, and an
  ``update`` that fails busy — at ``BEGIN IMMEDIATE``, inside, or at
  ``COMMIT`` (a COMMIT that fails busy leaves its transaction open) — is
  rolled back before the retry. Nothing that runs after a COMMIT (the lazy
  purge) lets a busy error escape to trigger a retry. So a retry is always
  the first application, never a second, and writes need no operation ids
  here (unlike Redis, whose client resends commands that may have run).
  Any other error is a StoreError, raised without retrying.
* **lock** is an in-process ``asyncio.Lock`` per key (waiters queue in order)
  plus a lease row in ``locks`` that other processes see. A lease is taken
  when absent, expired, or already ours (so taking is idempotent); another
  process's lease is polled for with short sleeps; release deletes the row
  only if the token is still ours. Leases are short (5 s by default) and
  renewed every third of that (``UPDATE … WHERE token = ?``) while the holder
  works, so a killed daemon's lease frees within seconds. Tokens name their
  holder process (:mod:`tmy.store.leases`): a lease whose holder was a process
  of this machine that has died is cleared at once — at ``open`` (with every
  expired row), and by a contender that finds it — so a restarted daemon never
  waits on the locks of its previous life.
* **commit** applies several writes in one ``BEGIN IMMEDIATE`` transaction,
  after checking in that same transaction that each fencing lease's row still
  holds its token and is unexpired (``LeaseLost`` and nothing written
  otherwise): an atomic span's writes land all together or not at all, and
  never after its lease was lost. ``?lease_ttl=`` in the URL sets the default
  lease length (tests use 1 s).

One instance belongs to one event loop (one thread); open a second instance for
another thread or process.

* **Format marker**: ``open`` inserts ``{"format": 1}`` at ``tmy/format`` when
  absent and refuses a file whose marker names a newer format.

The package: :mod:`~tmy.store.sqlite.connection` (the connection, its busy-wait
retries and transactions, open/close, the SQL statements),
:mod:`~tmy.store.sqlite.ranks` (leaderboard boards: the ``ranks`` table),
:mod:`~tmy.store.sqlite.rank_counts` (their order-statistics counts: ``rank_of`` in O(log n)),
:mod:`~tmy.store.sqlite.snapshots` (``snapshot``: one read transaction;
``restore``), :mod:`~tmy.store.sqlite.checkpoints` (the WAL's checkpoints, on a
thread of their own: never a sync inside a commit on the event loop) and
:mod:`~tmy.store.sqlite.store` (:class:`SQLiteStore`: values, commits, locks).
"""

from tmy.store.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
