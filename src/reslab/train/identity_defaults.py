"""The defaults that run identities are measured against, frozen.

A run's identity (its folder name in a store, `reslab train`'s default folder, the resume check)
hashes only the fields of its resolved config that differ from these values. They are the
defaults each field had when it was introduced, not the current ones, so:

- a field a later reslab adds, at its default, changes no identity: old runs resume as they were
  (add the new field here with the default it is introduced with; tests/test_identity.py fails
  until every field is listed);
- a default a later reslab changes makes every run that relies on it a new run: its value now
  differs from the one frozen here, so it is hashed, and the run trains in a new folder while
  the old run stays untouched. NEVER edit a value here when a default changes.

Frozen at reslab 0.1.0 (every field that existed then).
"""

BASELINE: dict = {
    "name": "run",
    "model": {
        "design": "pre-ln",
        "vocab_size": 65,
        "n_layer": 6,
        "n_head": 6,
        "n_embd": 384,
        "block_size": 256,
        "dropout": 0.0,
        "bias": None,
        "tie_weights": True,
        "pos": "learned",
        "rope_base": 10000.0,
        "mlp": None,
        "mlp_ratio": 4.0,
        "norm": None,
        "norm_eps": 1e-05,
        "init": None,
        "init_std": 0.02,
        "attn_res": None,
        "ffn_res": None,
        "branch_gain": 1.0,
        "gain_mode": "runtime",
        "prores": "none",
        "prores_warmup": 1000,
        "embed_norm": None,
        "shaped_attention": None,
        "vp_identity": None,
        # norm_free ... mix_ln_post_layers, gate_bias, hyper_*, sinkhorn_iters, ngpt_alpha_init are
        # [model.options] of their designs now; canonical() compares those options as these fields.
        "norm_free": False,
        "sas_ff_gain": 0.1,
        "resi_dual_scale": 1.0,
        "mix_ln_post_layers": None,
        "skip_scale": "none",
        "branch_scale": None,
        "branch_scale_init": None,
        "dyt_alpha": 0.5,
        "gate_bias": 2.0,
        "value_residual": False,
        "value_residual_init": 0.5,
        "residual_attention": False,
        "hyper_streams": 4,
        "hyper_mixing": "free",
        "hyper_dynamic": False,
        "sinkhorn_iters": 20,
        "ngpt_alpha_init": 0.05,
        "layer_designs": {},
        "options": {},  # a design's own hyperparameters ([model.options])
        "qk_norm": False,           # added with the parallel block and the speedruns' options
        "residual_update": "add",   # added with the parallel block and the speedruns' options
        "xsa": "off",               # added with the parallel block and the speedruns' options
        "stochastic_depth": 0.0,    # added with the parallel block and the speedruns' options
        "stochastic_depth_rule": "linear",
        "attn_gate": "off",         # added with the in-block designs (gated attention)
        "dyt_alpha_attn": None,     # added with DyT's LLaMA recipe
        "dyt_alpha_mlp": None,      # added with DyT's LLaMA recipe
        "dyt_alpha_final": None,    # added with DyT's LLaMA recipe
        "embed_scale": "none",      # added with DyT's LLaMA recipe
    },
    "data": {
        "corpus": "tinyshakespeare",
        "path": None,
        "hf_dataset": None,
        "hf_config": None,
        "hf_split": "train",
        "hf_text_field": "text",
        "hf_max_docs": None,
        "tokenizer": "char",
        "tokenizer_path": None,
        "bpe_vocab_size": 4096,
        "val_fraction": 0.1,
        "download": True,
        "fallback": True,
        "cache_dir": None,
    },
    "optim": {
        "lr": 0.001,
        "min_lr": 0.0001,
        "schedule": "cosine",
        "warmup_steps": 100,
        "decay_steps": None,
        "wsd_decay_fraction": 0.2,
        "beta1": 0.9,
        "beta2": 0.99,
        "eps": 1e-08,
        "weight_decay": 0.1,
        "embedding_decay": True,
        "grad_clip": 1.0,
        "fused": None,
    },
    "train": {
        "steps": 2000,
        "batch_size": 12,
        "grad_accum": 1,
        "eval_interval": 250,
        "eval_iters": 20,
        "eval_batch_size": None,
        "eval_mode": "fixed",
        "eval_seed": 99991,
        "log_interval": 1,
        "checkpoint_interval": None,
        "keep_checkpoints": 2,
        "seed": 1337,
        "init_seed": None,
        "data_seed": None,
        "dropout_seed": None,
        "device": "auto",
        "dtype": "auto",
        "compile": False,
        "tf32": True,
        "deterministic": False,
        "threads": None,
        # added 2026-12-06 at True: part of a run's arithmetic like `threads` (recorded in status.json),
        # not of its identity. Runs before it kept subnormals; one that never produced any computes the
        # same numbers either way, one that did moves a little (train/determinism.py says how much)
        "flush_denormal": True,
        "parallel": "ddp",
        "progress": "auto",
        "tensorboard": False,
        "wandb": False,
        "wandb_project": "reslab",
        "nan_at_step": None,
    },
    "diagnostics": {
        "enabled": False,
        "interval": None,
        "batch_size": 8,
        "seed": 4242,
        "spike_window": 1000,
        "spike_threshold": 7.0,
    },
}

# Design options added to a design AFTER runs of it were recorded, each with the default it was
# introduced with. The resolved config fills every option of a design with its default, so without
# this a design that gains an option would change the identity of every earlier run of it.
# canonical() leaves such an option out while it holds the value frozen here (the same rule as
# BASELINE's: NEVER edit a value when the option's default changes). A design registered with its
# options from the start needs no entry: its first runs already held them.
OPTIONS_ADDED: dict = {
    "depth-attention": {"stride": 1},  # 2026-12-07: the authors' code reads every stride-th layer
}
