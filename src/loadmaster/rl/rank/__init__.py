"""PPO over rankings: train the ``learned`` plugin in the very profile it will serve in.

The step-by-step environment (:mod:`loadmaster.rl.env`) lets the agent start
one job at a time among those that fit. The RLScheduler protocol is
different: the agent names the next job, which blocks the machine until it
starts, and with EASY backfilling others run around it. Rather than a second
environment for each profile, this trainer runs the ordinary simulator with
the ``learned`` plugin in sampling mode (``explore`` > 0: Gumbel noise on the
scores draws each cycle's order from the Plackett-Luce distribution of
``scores / explore``) and records every cycle's inputs and sampled order.

**Decisions.** In a cycle, the jobs that started, in the sampled order, and
the first one that did not (the head that blocks or reserves) are the
positions that changed what happened; their Plackett-Luce log-probability is
the action's. Where the profile commits to a head (the RLScheduler
protocol), cycles in which the head picked earlier still blocks changed
nothing and are left out, and in the cycle where it starts only the order of
the others counts; cycles with a single job offered no choice.

**Advantage.** Each update draws ``sequences`` workloads and plays each
``samples`` times with different noise (the same jobs: common random
numbers). A decision's advantage is how much less bounded slowdown its
episode accrued from that moment on than the other samples of the same
workload did from the same moment (the leave-one-out baseline), relative to
theirs and scaled by the batch's standard deviation. Counting only what
accrues after the decision keeps the earlier decisions' noise out of it. No critic is needed.

**Update.** ``epochs`` passes of PPO's clipped surrogate over minibatches of
decisions. The ratio is new over old probability of the recorded positions.

Everything is seeded; rollouts run in ``workers`` processes, or on Ray workers
(``ray``), and are merged in task order, so the result depends neither on the
number of workers nor on where they run.

The package, one job per module: :mod:`.config` (settings, the per-update
log, limits and seed streams), :mod:`.episodes` (what the trainer plays: the
protocols and the built-in lab workload), :mod:`.workers` (one episode played
in a worker process, its decisions recorded), :mod:`.loss` (Plackett-Luce
log-probability, advantages, the PPO update) and :mod:`.train` (the training
loop, :func:`~.train.train_ranking`). Only :mod:`.loss` and :mod:`.train` need
torch.
"""
