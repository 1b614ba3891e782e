"""What an experiment is: a sweep spec's tables as typed records, parsed and checked once, and
their expansion into planned runs with their identities. Torch-free, and below both sweep/ (which
runs a spec) and report/ (which reads its results): it imports neither.

    schema.py      SweepSpec and its tables ([slurm], [report], [study], [tune], [[more_seeds]],
                   [[exclude]])
    rows.py        the row selector: {variant, <axis> = <point>}, as claims, [[tune.rows]],
                   [[more_seeds]] and [[exclude]] write it; every row of a spec's grid
    claims.py      the [[claims]] table: its format, the typed Claim, and its checks
    grid.py        override tables, nested keys, grid points, presets
    tune.py        the [tune] table: each row's values and seeds, names, the pick rule
    more_seeds.py  which rows a [[more_seeds]] entry selects, and their seeds
    exclude.py     the rows an [[exclude]] entry leaves out, and the claims that would lose theirs
    expand.py      PlannedRun, run_identity, a spec's expansion into its runs
    tune_plan.py   the tuning sweep's planned runs
    check.py       the whole-spec check (and tune_check.py, [tune]'s part of it)
    load.py        parse_spec and load_spec: a TOML file to a checked SweepSpec
"""
