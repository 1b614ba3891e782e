"""`reslab assess DESIGN [--set KEY=VALUE ...] [--against A,B] [--scale S] [--seeds N] [--ladder] [--plan]`:
the design report card (reslab.assess)."""

from __future__ import annotations

import sys

from ..errors import ReslabError
from .args import int_in
from .checks import check_run_folders, check_runs, check_spec_record
from .stores import writable_store
from .sweep import MAX_JOBS, MAX_SEEDS, add_stack_options


def _request(args):
    from ..config_sources import parse_set
    from ..assess.plan import CardRequest

    against = tuple(a.strip() for a in args.against.split(",")) if args.against else ()
    if args.against is not None and (not against or not all(against)):
        raise ReslabError(f"--against {args.against!r}: expected design names separated by commas, e.g. pre-ln,post-ln")
    return CardRequest(design=args.design, overrides=parse_set(args.set), against=against, scale=args.scale,
                       seeds=args.seeds, ladder=args.ladder)


def cmd_assess(args) -> int:
    from ..assess.plan import card_specs
    from ..assess.run import assess, card_plan, design_speed
    from ..spec.tune import tune_name
    from ..spec.tune_plan import all_planned
    from ..sweep.runner import default_jobs
    from ..sweep.store import Store

    req = _request(args)
    specs = card_specs(req)
    runs = [r for s in specs for r in all_planned(s, [req.scale])[0]]
    check_runs(runs, local=True)
    root = writable_store(args)
    store = Store(root)
    for spec in specs:
        check_spec_record(store, spec.name)
        check_spec_record(store, tune_name(spec.name))
    check_run_folders(store)
    if args.plan:
        plan = card_plan(req, store, specs)
        jobs = args.jobs or default_jobs(runs)
        for line in plan.text(req, jobs, design_speed(plan, req, jobs)):
            print(line)
        store.close()
        return 0
    card, folder = assess(req, store, jobs=args.jobs, stack=args.stack, stack_size=args.stack_size, specs=specs)
    store.close()
    from ..assess.render import summary_lines

    for line in summary_lines(card, folder):
        print(line, file=sys.stderr)
    print(folder)
    return 1 if card["runs"].get("failed") else 0


def add_parsers(sub) -> None:
    p = sub.add_parser("assess", help="the design report card: one design against the baselines, every section of the lab")
    p.add_argument("design", help="a design name (`reslab variants`; a plugin's with --plugin MODULE)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of the assessed design's runs only, e.g. --set model.options.k=2 or "
                        "--set optim.weight_decay=0 (repeatable); the baselines keep the regime's settings")
    p.add_argument("--against", help="baselines, comma-separated (default: pre-ln; post-ln when assessing pre-ln)")
    p.add_argument("--scale", default="cpu", help="smoke (the pipeline in a minute, never a result), cpu "
                   "(default: answers on a 2-core CPU) or paper (GPUs)")
    p.add_argument("--seeds", type=int_in("--seeds", 1, MAX_SEEDS),
                   help="comparison seeds (default 3 at cpu and paper scale, 1 at smoke)")
    p.add_argument("--ladder", action="store_true", default=None,
                   help="also climb the width ladder (section 8; default: only at the smoke scale)")
    p.add_argument("--no-ladder", dest="ladder", action="store_false", help="do not climb the ladder")
    p.add_argument("--plan", action="store_true", help="print the plan and estimate, train nothing")
    p.add_argument("--jobs", type=int_in("--jobs", 1, MAX_JOBS),
                   help="parallel workers (default: one per GPU, else one per core)")
    add_stack_options(p)
    p.add_argument("--store", help="results store (default: $RESLAB_STORE or ./results)")
    p.set_defaults(func=cmd_assess)
