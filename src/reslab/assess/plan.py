"""The card's sweeps: the assessed design and its baselines, trained in the regimes of built-in studies.

A card is not a new experiment with its own settings: it puts the design into studies that already
measure what each section asks, so its runs are theirs wherever they coincide (a run's identity is
its resolved config, so `reslab assess pre-ln` reuses ln-placement's runs in the same store):

    main sweep    ln-placement's regime (cpu: width 64, 4 heads, 1250 updates of 16 sequences, clip 1,
                  cosine to 1e-4): rows design x depth {4, 16} x warmup {0, 100 updates}, every row
                  at its own learning rate ([tune] over 1e-3 / 3e-3 / 1e-2, extended where the best
                  is an end), then 3 comparison seeds at the tuned rate. Its tuning runs are the card's
                  loss-against-learning-rate curves and its stability record; its comparison rows are
                  the comparison (sections 4) and the depth / warmup rows (section 5).
    ladder sweep  (--ladder) hyper-connections-ladder's width ladder (4 layers, widths 64 / 128 / 256,
                  each rung tuned), for the trend of the difference with size (section 8).

The claims the card rules on are generated here (card_claims) and decided by the reports' rules
(report/claims.py: two one-sided t-tests per claim, Holm over the card): better, worse or
equivalent within +-0.02 nats against each baseline at 4 and at 16 layers; improves with depth;
needs warmup at 16 layers.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field, replace

from ..errors import ConfigError, ReslabError
from ..fileio import read_toml
from ..spec.load import parse_spec
from ..spec.expand import IdenticalRunsError
from ..spec.schema import NAME_RE, SweepSpec
from ..studies import study_path

REGIME = "ln-placement"
LADDER = "hyper-connections-ladder"
SCALES = ("smoke", "cpu", "paper")
EQUIVALENCE = 0.02          # nats: "equivalent" means the 95% TOST interval lies within +-0.02
DEPTHS = ("L4", "L16")      # the regime's named depth points, shallow first
WARM, COLD = "w100", "none"  # the regime's warmup points
INIT_BASELINES = ("pre-ln", "post-ln")  # always beside the design at initialisation (no training cost)
PROBE_DEPTHS = (6, 12, 24, 48, 96)


@dataclass(frozen=True)
class CardRequest:
    """What `reslab assess` was asked: the design (with options and other overrides of its own
    runs), the baselines, the scale, the seeds, and whether to climb the ladder."""
    design: str
    overrides: dict = field(default_factory=dict)  # nested, e.g. {"model": {"options": {"k": 2}}}
    against: tuple = ()
    scale: str = "cpu"
    seeds: int | None = None
    ladder: bool | None = None  # None: on at the smoke scale only (a cheap check of the pipeline)
    # rows (variant, depth, warmup) whose tuned rate did not hold on their comparison seeds: they tune
    # again on RETUNE_SEEDS tuning seeds (retune_entries; assess/run.py finds them after the main sweep)
    retune: tuple = ()

    @property
    def baselines(self) -> tuple:
        if self.against:
            return tuple(self.against)
        return ("post-ln",) if self.design == "pre-ln" and not self.overrides else ("pre-ln",)

    @property
    def climbs(self) -> bool:
        return self.scale == "smoke" if self.ladder is None else self.ladder

    @property
    def label(self) -> str:
        """The design's row name, and the card's name (two option sets of one design are two cards, two
        variants): the design, then each of its own settings as +key-value (`pre-ln+norm-derf`,
        `hyper-connections+streams-2`) where that spells them unambiguously in a short folder name,
        else a short hash of them (`pre-ln-3fa2c1`)."""
        if not self.overrides:
            return self.design
        readable = _spelled(self.design, self.overrides)
        if readable:
            return readable
        digest = hashlib.sha256(json.dumps(self.overrides, sort_keys=True).encode()).hexdigest()[:6]
        return f"{self.design}-{digest}"


LABEL_MAX = 48  # characters: a label is a folder name and a table row


def _leaves(tree: dict, path: tuple = ()):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaves(value, path + (key,))
        else:
            yield path + (key,), value


def _short(path: tuple) -> tuple:
    """A setting's name in a label: model.options.streams -> streams, model.norm -> norm, optim.lr stays."""
    if path[:1] == ("model",):
        path = path[1:]
        if path[:1] == ("options",) and len(path) > 1:
            path = path[1:]
    return path


def _spelled(design: str, overrides: dict) -> str | None:
    """design+key-value+... (keys as _short writes them), or None where that could name two different
    sets of settings: two settings spelled alike, a string that reads as another type ("2", "true"),
    a value that is a list or holds characters a folder name may not, or a long result."""
    parts = []
    for path, value in sorted(_leaves(overrides)):
        if isinstance(value, str):
            try:
                json.loads(value)
                return None  # "2" would read like 2
            except ValueError:
                text = value
        elif isinstance(value, (bool, int, float)):
            text = json.dumps(value)
        else:
            return None
        parts.append((".".join(_short(path)), text))
    keys = [k for k, _ in parts]  # model.options.k and a model field k would be spelled alike
    label = design + "".join(f"+{k}-{v}" for k, v in parts)
    if len(set(keys)) < len(keys) or len(label) > LABEL_MAX or not NAME_RE.match(label):
        return None
    return label


def check_request(req: CardRequest) -> None:
    """One line per problem, before anything is planned or written."""
    from ..model.registry import DESIGNS
    from ..plugins import load_plugins

    load_plugins()  # an installed plugin's design (a 'reslab.designs' entry point) is assessed by name
    known = sorted(DESIGNS)
    for name, what in [(req.design, "DESIGN")] + [(b, "--against") for b in req.baselines]:
        if name not in DESIGNS:
            raise ReslabError(f"{what}: unknown design {name!r}; choose one of {', '.join(known)} "
                              "(or register your own: docs/plugins.md)")
    if req.scale not in SCALES:
        raise ReslabError(f"--scale: {req.scale!r} is not a card scale; choose one of {', '.join(SCALES)}")
    if len(set(req.baselines)) != len(req.baselines):
        raise ReslabError(f"--against: a baseline is named twice ({', '.join(req.baselines)})")
    if req.label in req.baselines:
        raise ReslabError(f"--against: {req.label} is the design assessed; name other designs to compare with")
    if not NAME_RE.match(req.label):
        raise ReslabError(f"DESIGN: {req.design!r} cannot name a card (letters, digits, '_', '.', '+', '-')")
    if isinstance(req.overrides.get("model"), dict) and "design" in req.overrides["model"]:
        raise ReslabError("--set model.design: the design is the command's argument, not a --set")


def _variant(design: str, overrides: dict | None = None) -> dict:
    table = copy.deepcopy(overrides or {})
    table.setdefault("model", {})["design"] = design
    return table


def card_claims(req: CardRequest) -> list[dict]:
    """The claims a card rules on, in the report's [[claims]] format (spec/claims.py)."""
    d, out = req.label, []

    def cell(variant, depth, warmup=WARM):
        return {"variant": variant, "depth": depth, "warmup": warmup}
    source = "design card: the comparison at each row's own tuned learning rate"
    for b in req.baselines:
        for depth in DEPTHS:
            layers = depth[1:]
            out.append({"id": f"better-than-{b}-{depth}", "kind": "difference", "op": "<", "threshold": 0.0,
                        "statement": f"{d} ends below {b} at {layers} layers (with warmup)",
                        "source": source, "a": cell(d, depth), "b": cell(b, depth)})
            out.append({"id": f"equivalent-to-{b}-{depth}", "kind": "difference", "op": "within",
                        "threshold": EQUIVALENCE,
                        "statement": f"{d} ends within ±{EQUIVALENCE:g} nats of {b} at {layers} layers",
                        "source": source, "a": cell(d, depth), "b": cell(b, depth)})
    out.append({"id": "improves-with-depth", "kind": "difference", "op": "<", "threshold": 0.0,
                "statement": f"{d} at 16 layers ends below {d} at 4 layers (both with warmup)",
                "source": "design card: depth", "a": cell(d, "L16"), "b": cell(d, "L4")})
    out.append({"id": "needs-warmup-L16", "kind": "difference", "op": ">", "threshold": 0.0,
                "statement": f"{d} at 16 layers ends worse without warmup than with 100 warmup updates",
                "source": "design card: warmup (Xiong et al. 2020 for Post-LN)",
                "a": cell(d, "L16", COLD), "b": cell(d, "L16", WARM)})
    out.append({"id": "warmup-free-L16", "kind": "difference", "op": "within", "threshold": EQUIVALENCE,
                "statement": f"{d} at 16 layers ends within ±{EQUIVALENCE:g} nats without warmup of where it "
                             "ends with it",
                "source": "design card: warmup", "a": cell(d, "L16", COLD), "b": cell(d, "L16", WARM)})
    return out


RETUNE_SEEDS = 3  # a row whose tuned rate did not hold tunes again on this many tuning seeds


def retune_entries(data: dict, req: CardRequest) -> None:
    """Give each row of req.retune its own [[tune.rows]] entry with RETUNE_SEEDS tuning seeds (the
    regime's first tuning seed and the ones after it), placed first so that it wins; a row that
    already tunes on that many seeds (ln-placement's post-ln rows without warmup) is left as it is.
    The rule is the one ln-placement adopted by hand on 2026-12-03: a rate at which a row trains on
    some seeds only loses to one at which it trains on all of them, once the mean is over several
    seeds. An entry of the regime's that no longer takes a row is dropped."""
    tune = data.get("tune")
    if not req.retune or not tune:
        return
    from ..spec.rows import selects

    first = int(tune["seeds"][0])
    seeds = list(range(first, first + RETUNE_SEEDS))
    entries = list(tune.get("rows") or [])
    rows = [(v, {"depth": d, "warmup": w}) for v in data["variants"] for d in DEPTHS for w in (WARM, COLD)]

    def owner(variant: str, point: dict) -> dict | None:
        return next((e for e in entries if selects(e.get("match") or {}, variant, point)), None)

    added = []
    for variant, depth, warmup in req.retune:
        point = {"depth": depth, "warmup": warmup}
        entry = owner(variant, point) or {}
        if len(entry.get("seeds") or tune["seeds"]) >= RETUNE_SEEDS:
            continue
        added.append({"match": {"variant": variant, **point}, "seeds": seeds,
                      **({"values": entry["values"]} if entry.get("values") else {})})
    if not added:
        return
    entries = added + entries
    taken = {id(owner(v, p)) for v, p in rows}
    tune["rows"] = [e for e in entries if id(e) in taken]


def _common(data: dict, req: CardRequest, name: str, question: str, description: str) -> dict:
    data = copy.deepcopy(data)
    data["name"] = name
    data["question"] = question
    data["description"] = description
    data["baseline"] = req.baselines[0]
    data["variants"] = {req.label: _variant(req.design, req.overrides),
                        **{b: _variant(b) for b in req.baselines}}
    study = data.get("study") or {}
    study["designs"] = [req.design, *req.baselines]
    data["study"] = study
    data.pop("claims", None)
    keep = set(data["variants"])
    tune = data.get("tune")
    if tune and tune.get("rows"):  # the study's per-row tuning rules that concern the card's designs
        rows = [r for r in tune["rows"] if (r.get("match") or {}).get("variant") in keep]
        if rows:
            tune["rows"] = rows
        else:
            del tune["rows"]
    report = data.setdefault("report", {})
    report.pop("published", None)
    report.pop("probe", None)   # the card probes its own configs (assess/signal.py)
    return data


def main_spec_data(req: CardRequest) -> dict:
    """The card's main sweep as a spec dict: ln-placement's regime with the card's designs and claims."""
    against = ", ".join(req.baselines)
    data = _common(read_toml(study_path(REGIME), "study spec"), req, f"assess-{req.label}",
                   f"Is {req.label} better than {against}, at its own learning rate, at 4 and 16 layers, "
                   "with and without warmup?",
                   f"design card of {req.label} against {against}: ln-placement's regime (depth 4 / 16 x "
                   "warmup 0 / 100 updates, every row at its own tuned learning rate)")
    data["claims"] = card_claims(req)
    data["report"]["notes"] = [
        f"The card's regime is the ln-placement study's at this scale; the {', '.join(req.baselines)} rows "
        "are that study's runs (the same identities: a store that ran it trains them once).",
    ]
    retune_entries(data, req)
    return data


def ladder_spec_data(req: CardRequest) -> dict:
    """The card's ladder as a spec dict: hyper-connections-ladder's rungs with the card's designs and
    one trend claim per baseline (the slope of design - baseline per doubling of parameters)."""
    d = req.label
    data = _common(read_toml(study_path(LADDER), "study spec"), req, f"assess-{req.label}-ladder",
                   f"Does {d}'s difference from {', '.join(req.baselines)} grow, shrink or hold as the width grows?",
                   f"design card of {d}: the width ladder of hyper-connections-ladder (4 layers), each rung "
                   "at its own tuned learning rate")
    data["claims"] = [{"id": f"gain-over-{b}-grows", "kind": "trend", "op": "<", "threshold": 0.0,
                       "statement": f"{d} - {b} falls as the model grows ({d}'s advantage grows or its "
                                    "deficit shrinks)",
                       "source": "design card: ladder", "a": d, "b": b} for b in req.baselines]
    data["report"]["notes"] = [
        f"The card's ladder is the hyper-connections-ladder study's at this scale; its pre-ln rows are "
        "that study's runs."]
    return data


def _seeded(spec: SweepSpec, req: CardRequest) -> SweepSpec:
    from ..spec.expand import with_seeds

    scale_seeds = spec.study.seeds.get(req.scale) if spec.study else None
    n = req.seeds if req.seeds is not None else scale_seeds
    return with_seeds(spec, n) if n is not None else spec


def card_specs(req: CardRequest) -> list[SweepSpec]:
    """The card's sweeps, validated: [main] or [main, ladder]."""
    check_request(req)
    datas = [main_spec_data(req)] + ([ladder_spec_data(req)] if req.climbs else [])
    out = []
    for data in datas:
        if req.scale not in data.get("scales", {}):
            raise ReslabError(f"--scale {req.scale}: the card's {data['name']} sweep has no such scale "
                              f"(it has {', '.join(data.get('scales', {}))})")
        _only_scale(data, req.scale)
        check_settings(req, data)
        try:
            out.append(_seeded(parse_spec(data, where=data["name"]), req))
        except IdenticalRunsError:
            if not (req.overrides and req.design in req.baselines):
                raise
            raise ReslabError(f"--set {settings_text(req)}: {req.design} already has these settings, so the card would "
                              f"compare {req.design} with itself; set something that changes it") from None
        except ConfigError as e:  # after IdenticalRunsError, one of its kind
            raise _as_set_error(e, req, data["name"]) from None
    if req.overrides and req.design not in req.baselines and _same_runs_without_settings(out, req):
        raise ReslabError(f"--set {settings_text(req)}: these are {req.design}'s own settings, so the card would be "
                          f"{req.design}'s under another name; run `reslab assess {req.design}`")
    return out


def settings_text(req: CardRequest) -> str:
    """The --set settings as the user wrote them: model.norm=derf optim.weight_decay=0."""
    return " ".join(f"{'.'.join(p)}={v}" for p, v in _leaves(req.overrides))


def _same_runs_without_settings(specs: list[SweepSpec], req: CardRequest) -> bool:
    """Whether the --set settings are the design's own defaults: the same runs, but a card under another
    name, which a reader of docs/cards.md would take for another design."""
    try:
        plain = card_specs(replace(req, overrides={}))
    except ReslabError:  # the design needs a setting to run at all: the settings change it
        return False
    return _design_run_ids(specs, req.label, req.scale) == _design_run_ids(plain, req.design, req.scale)


def _design_run_ids(specs: list[SweepSpec], variant: str, scale: str) -> list[str]:
    """The identities (resolved configs) of every run the card's specs plan for `variant` at `scale`."""
    from ..spec.tune_plan import all_planned

    return sorted(r.id for s in specs for r in all_planned(s, [scale])[0] if r.variant == variant)


def _as_set_error(error: ConfigError, req: CardRequest, spec_name: str) -> ConfigError:
    """A bad --set is found when the card's spec is parsed or expanded, under the spec's, the variant's
    and the grid point's names (`assess-pre-ln+bogus-1: variants.pre-ln+bogus-1.model.bogus: ...`),
    which the user never wrote: a line about a setting the user gave is said as that --set
    (`--set model.bogus: unknown key ...`); any other line is kept whole, where it happened included."""
    given = [".".join(path) for path, _ in _leaves(req.overrides)]
    lines = []
    for line in error.lines():
        inner = _variant_error(line, spec_name, req.label)
        key = (inner or "").split(": ", 1)[0]
        if inner and any(k == key or k.startswith(key + ".") or key.startswith(k + ".") for k in given):
            lines.append("--set " + re.sub(r" \(and \d+ more runs\)$", "", inner))
        else:
            lines.append(line)
    return ConfigError(lines)


def _variant_error(line: str, spec_name: str, label: str) -> str | None:
    """`field: problem` of an error line about the assessed variant (from the spec's variants table,
    or from one of its runs: `variant L, scale S, grid {...}: field: problem`), else None."""
    table = f"{spec_name}: variants.{label}."
    if line.startswith(table):
        return line[len(table):]
    run = f"{spec_name}: variant {label}"
    if not line.startswith(run + ",") and not line.startswith(run + ":"):
        return None
    rest = line[len(run):]
    end = rest.index("}: ") + 1 if ", grid {" in rest and "}: " in rest else rest.find(": ")
    return rest[end + 2:] if end >= 0 else None


# A card compares designs in one regime: its budget, data and evaluation are the regime's for every
# row, so a --set of these tables would compare the design on other terms than its baselines.
REGIME_TABLES = {"train": "budget, batches and evaluation", "data": "data"}


def _card_sets(data: dict, scale: str) -> dict[str, str]:
    """Dotted setting -> which of the card's axes sets it for every run of `data` (a card's spec, one
    scale left), so that a --set of it would be overwritten or collapse the axis."""
    owned = {}
    grid = dict((data.get("scale_grid") or {}).get(scale, data.get("grid") or {}))
    ladder = data.get("ladder") or {}
    if ladder.get("rungs"):  # the rungs this scale climbs, as the spec's ladder chooses them
        names = (ladder.get("scale_rungs") or {}).get(scale, list(ladder["rungs"]))
        grid["rung"] = {n: ladder["rungs"][n] for n in names}
    for axis, values in grid.items():
        if isinstance(values, list):
            owned[axis] = f"its grid axis {axis}"
            continue
        by_path: dict[str, list[str]] = {}
        for point, table in values.items():
            for path, value in _leaves(table):
                by_path.setdefault(".".join(path), []).append(f"{point} {value!r}")
        for key, points in by_path.items():
            owned.setdefault(key, f"its {axis} axis: {', '.join(points)}")
    tune = data.get("tune") or {}
    if tune.get("axis"):
        owned[tune["axis"]] = "it tunes it for every row"
    return owned


def check_settings(req: CardRequest, data: dict) -> None:
    """A --set the card can honour: not one its axes or tuning set for every run, and not the regime's
    budget or data (the design is compared on the same terms as its baselines)."""
    owned = _card_sets(data, req.scale)
    for path, _ in _leaves(req.overrides):
        key = ".".join(path)
        if key in owned:
            raise ReslabError(f"--set {key}: the card sets it itself ({owned[key]}); set what belongs to the "
                              "design (model.norm, model.options.*, optim.weight_decay)")
        if path[0] in REGIME_TABLES:
            raise ReslabError(f"--set {key}: every row of a card keeps the regime's {REGIME_TABLES[path[0]]}, "
                              "so the design is compared on the same terms as its baselines; set what belongs "
                              "to the design (model.*, optim.*)")


def _only_scale(data: dict, scale: str) -> None:
    """A card runs at one scale: the other scales' tables go (a run's identity is its resolved config,
    which they never enter), so planning and checking the card expands this scale's runs only."""
    for key in ("scales", "scale_presets", "scale_grid", "scale_variants"):
        if isinstance(data.get(key), dict):
            data[key] = {k: v for k, v in data[key].items() if k == scale}
    data["default_scales"] = [scale]
    study = data.get("study") or {}
    for key in ("seeds", "estimates"):
        if isinstance(study.get(key), dict):
            study[key] = {k: v for k, v in study[key].items() if k == scale}
    ladder = data.get("ladder")
    if isinstance(ladder, dict):
        for key in ("scale_rungs", "scale_tokens_per_param"):
            if isinstance(ladder.get(key), dict):
                ladder[key] = {k: v for k, v in ladder[key].items() if k == scale}
    tune = data.get("tune")
    if isinstance(tune, dict) and isinstance(tune.get("scales"), list) and scale not in tune["scales"]:
        del data["tune"]
