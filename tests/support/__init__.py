"""Shared test helpers, and the testing rulebook.

Modules:

- :mod:`tests.support.plane`: the test manifest and principals, a plane over a fresh
  store root, its HTTP app and in-process clients.
- :mod:`tests.support.agent`: :class:`~tests.support.agent.Agent`, a scripted test
  runtime with a turn log.
- :mod:`tests.support.virtual`: a plane in virtual time and bounded reads of what it
  recorded (``send``, ``settle``, ``journal``, ``quiesce``, ...).
- :mod:`tests.support.overload`: a full wake queue and a log of the store's SQL.
- :mod:`tests.support.crash`: the crash button of the restart drills.
- :mod:`tests.support.tiers`: the pytest plugin that assigns and enforces the tiers.
- :mod:`tests.support.pg`: a throwaway PostgreSQL cluster (the ``pg_cluster`` fixture).

Folder-local helpers sit next to their tests (``tests/e2e/_support.py`` and
``taskplane_proc.py``, ``tests/acceptance/_support.py``, ``tests/bridge/_support.py``
and the fakes, ``tests/store/contract.py``, ``tests/supervision/supervision_testkit.py``).

The rulebook:

1. **Helpers live in support modules.** A ``test_*`` module holds tests; what two
   modules share moves here (or into a folder's support module). Nothing imports a
   ``test_*`` module or a ``conftest.py`` (``tests/test_test_imports.py`` walks every
   module's imports). Fixtures live in ``conftest.py`` files and are built from these
   helpers.
2. **Two tiers.** A test is *quick* (in process, no process started, no socket
   listening, well under a second) or *slow* (it starts ``taskplane serve``, an agent
   program or a fake provider, serves on a real socket, is a drill, or takes seconds).
   :mod:`tests.support.tiers` marks ``slow`` in one place, by folder (``tests/e2e``,
   ``tests/drills``) and by fixture (``spawn``, ``live``, ``fake_openai``,
   ``pg_cluster``); a module that starts processes on its own says ``pytestmark =
   pytest.mark.slow``. A quick
   test that starts a process or listens fails, in every run. ``./run test -m "not
   slow"`` runs the quick tier (under 2 minutes on two cores); ``./run test``, what CI
   runs, runs every test.
3. **Localhost and port 0.** Servers bind ``127.0.0.1`` on port 0 and the test reads
   the bound port back; no fixed ports, no other interface.
4. **Virtual time for anything timed.** Timeouts, backoffs, retries, idle and keep-alive
   deadlines run under pytest-trio's ``autojump_clock`` (a ``MockClock`` that jumps to
   the next deadline once every task is blocked), with the plane of
   :func:`tests.support.virtual.options` (SQLite on the trio thread, a record clock that
   follows trio's clock). There a ``trio.sleep`` is virtual time passing, at no cost.
5. **No sleeps to wait for something.** Wait for the thing itself: an Event, the turn
   log (:meth:`~tests.support.agent.Agent.wait_turns`),
   ``trio.testing.wait_all_tasks_blocked`` (:func:`~tests.support.virtual.quiesce`),
   a ``trio.testing.Sequencer`` for an order; a slow test polls a condition with a
   deadline.
6. **An absolute deadline on every I/O test.** Every wait on a socket, a process or a
   file that another task writes sits under ``trio.fail_after`` (or a client timeout),
   so a hang fails with the step that hung; ``faulthandler_timeout`` (pytest options)
   dumps every thread's stack past 120 s as the last resort.
7. **Each test owns its state.** A fresh store root under ``tmp_path``, no module-level
   mutable state; a fixture scoped wider than one test builds an expensive setup that
   its tests only read (or copy, as ``written_once`` in ``tests/e2e/test_cli_commands.py``).
8. **Strict by default.** Unknown marks and options are errors (``--strict-markers``,
   ``--strict-config``), an ``xfail`` that passes fails (``xfail_strict``), and every
   warning is an error.
"""
