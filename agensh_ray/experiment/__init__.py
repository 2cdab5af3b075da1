"""Experiments: a grid of runs from one plan file (`python -m agensh_ray.experiment PLAN.yaml`).

    plan.py     the plan (tasks, worker counts, seeds, shared settings, ablations) and its cells
    runner.py   runs the cells one after another (or N at once), each as `python -m agensh_ray.run --config`,
                skipping finished ones; records the plan, each cell's RunConfig and the git commit
    summary.py  the table across cells, from each cell's run folder through the DuckDB views
    cli.py      the command line

docs/experiments.md says how to write a plan and shows a worked experiment.
"""
