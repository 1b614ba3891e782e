"""`reslab export hf` and `reslab import hf`: GPT-2 model folders of Hugging Face."""

from __future__ import annotations

from pathlib import Path

from ..errors import ReslabError
from ..typed import INT_MAX, INT_MIN, short_int
from .args import Parser


def cmd_export_hf(args) -> None:
    from ..fileio import check_output_dir, check_path_text
    from ..hf import export_hf
    from ..train.checkpoint import model_folder_of

    model_dir, _ = model_folder_of(check_path_text(args.model, "MODEL_OR_RUN_DIR"), "best")  # a run: its best
    check_output_dir(args.out, "OUT")
    out = export_hf(model_dir, args.out)
    print(out)


def check_hf_numbers(hf_folder: Path) -> None:
    """Numbers in a Hugging Face config.json that reslab.hf's field checks let through: an integer
    too large for a float (math.isfinite(10**400) raises) and dropout rates of 1 or more.
    (These checks belong in reslab/hf.py's _field; they are here until its owner moves them.)"""
    from ..fileio import read_json

    path = hf_folder / "config.json"
    if not path.is_file():
        return  # import_hf says what is missing
    conf = read_json(path, "Hugging Face config")
    for key, value in conf.items():
        if isinstance(value, int) and not isinstance(value, bool) and not INT_MIN <= value <= INT_MAX:
            raise ReslabError(f"{path}: {key}: {short_int(value)} is out of range")
    for key in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
        value = conf.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not 0 <= value < 1:
            raise ReslabError(f"{path}: {key} must be in [0, 1), got {value!r}")


def cmd_import_hf(args) -> None:
    from ..fileio import check_output_dir, check_path_text
    from ..hf import import_hf
    from ..model.io import save_model

    check_hf_numbers(check_path_text(args.hf_folder, "HF_DIR"))
    out = check_output_dir(args.out, "OUT")
    if out.exists() and (not out.is_dir() or set(p.name for p in out.iterdir()) - {"model.json", "model.safetensors"}):
        raise ReslabError(f"{out}: exists and is not a reslab model folder; choose an empty or new folder")
    print(save_model(import_hf(args.hf_folder), out))


def add_parsers(sub) -> None:
    e = sub.add_parser("export", help="convert a reslab model to another library's format")
    esub = e.add_subparsers(dest="target", required=True, parser_class=Parser)
    eh = esub.add_parser("hf", help="write a pre-ln model folder as a Hugging Face GPT-2 folder")
    eh.add_argument("model", help="reslab model folder (model.json + model.safetensors), or a run folder "
                                  "(its best checkpoint)")
    eh.add_argument("out", help="output folder for config.json + model.safetensors")
    eh.set_defaults(func=cmd_export_hf)

    i = sub.add_parser("import", help="convert another library's model into a reslab model folder")
    isub = i.add_subparsers(dest="source", required=True, parser_class=Parser)
    ih = isub.add_parser("hf", help="read a local Hugging Face GPT-2 folder as a pre-ln model")
    ih.add_argument("hf_folder", help="folder with config.json and model.safetensors")
    ih.add_argument("out", help="output reslab model folder")
    ih.set_defaults(func=cmd_import_hf)
