"""The lifecycle of a LongContextJob as pure decisions, one module per policy.

`decide.decide` takes the job's spec and status, what was observed of its current workload
generation and a way to ask builtin admission, and returns the next status, the actions to apply
(create or delete a generation) and one Kubernetes Event per condition transition. The handlers
write the status BEFORE applying the actions, which makes every step idempotent: a restarted
operator finds the generation it meant to create (or delete) in the status and does it again with
create-or-get.

Phases: Pending (not admitted; the reason says why) -> Admitted (workload created) -> Starting
(some ranks Running) -> Running (all ranks Running) -> Succeeded. A failed rank or a startup
timeout -> Restarting (generation deleted, backoff) -> generation + 1, or Failed after
restartPolicy.maxRestarts. A Running gang that stops advancing (the watchdog's reads of every
rank, stall.py) -> Stalled and Restarting, counted in stallRestarts against
restartPolicy.maxStallRestarts. spec.suspend -> Suspended (workload deleted); unsuspending creates
the next generation, which resumes from the last checkpoint.

The modules: `decision` (what a step returns), `draft` (the status being decided and its
condition Events), `planning` (the layout, to and from the status), and one per policy: `admit`,
`create_refusal`, `startup`, `running` (completion and all ranks Running), `gang_restart`,
`health` (stalls and stragglers), `lost_node`, `preempted`, `kueue`, `suspend`; `decide`
composes them.
"""
