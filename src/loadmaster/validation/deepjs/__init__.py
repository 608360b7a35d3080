"""The DeepJS evaluation setup (CloudSimPy ``playground/Non_DAG``), re-implemented exactly.

DeepJS (Li et al., 2019) trains and compares job schedulers on chunks of 10
consecutive jobs of the Alibaba 2017 batch trace, on 5 machines of (64 CPU,
1 memory, 1 disk). A job is a list of tasks; a task is N identical *instances*
(CPU, memory, disk, duration). Every decision starts one instance of one task
on one machine. This package reruns that setup with the reference's exact
semantics, so that a learned scheduler can be compared on the same chunks with
the same numbers as CloudSimPy's Random, FirstFit and Tetris
(``data/reference/cloudsimpy/reference_runs_heuristics.json``).

It does not go through :mod:`loadmaster.sim`: the reference's clock (a
scheduler tick every time unit, SimPy's event order at equal times, float
resource bookkeeping) decides its numbers, and it is simpler to reproduce it
in a small loop than to bend the GPU simulator into it. docs/deepjs.md explains
the semantics and quirks; the points that decide the numbers are:

* jobs are grouped by ``job_id`` in order of first appearance, take the submit
  time of their *last* row, and are sorted stably by submit time; chunk ``k``
  is jobs ``10k .. 10k+9`` with submit times rebased to its first job;
* the scheduler runs at t = 0, 1, 2, ...; at each tick it asks the policy for
  a (machine, task) pair and starts the task's next instance until the policy
  says none; an instance finishes ``duration`` later (a float time) and frees
  its resources then;
* at equal times events run in SimPy order: (time, priority, creation order),
  which decides whether a job submitted at t, or an instance ending exactly at
  t, is seen by the tick at t (:class:`_Clock`);
* the run ends at the first tick that sees every job finished: that tick is
  the makespan;
* ``avg_completion`` and ``avg_slowdown`` are per *task*: (last instance end -
  first instance start) and that divided by the instance duration, so time
  queued before a task's first instance starts is not counted. We also report
  metrics that count it (``avg_response``, ``avg_wait``, ...).

The package, one job per module:

* :mod:`.trace`: the setup's constants and the reader of CloudSimPy's
  ``jobs.csv`` (:class:`~.trace.BatchJob`, chunks);
* :mod:`.chooser`: the policy interface (:class:`~.chooser.Chooser`) and the
  views it decides on;
* :mod:`.heuristics`: the reference's heuristics with their quirks
  (Random, FirstFit, Tetris) and an SJF baseline;
* :mod:`.engine`: the event loop with the reference's clock, and the results;
* :mod:`.reference`: the comparison with CloudSimPy's published runs;
* ``python -m loadmaster.validation.deepjs [DATA_DIR]`` (:mod:`.__main__`):
  the tables, exit 1 if a reference run is not reproduced.
"""
