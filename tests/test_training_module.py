"""The LightningModule: grouped settings, loss, attention kernel choice, parameter groups."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path
from types import SimpleNamespace

import lightning
import pytest
import torch
import torch.nn.functional as F
from preloaded import fork_server

import minitx.attention
from minitx.checkpoint import CHECKPOINT_KEY, read_checkpoint
from minitx.errors import CheckpointError, ConfigError
from minitx.model import PACK_ROWS, TransformerConfig
from minitx.training import OptimConfig, TranslationModule, ValidationConfig
from minitx.training.schedules import (
    BudgetSchedule,
    CosineDecaySchedule,
    InverseSqrtSchedule,
    LinearDecaySchedule,
)
from minitx.vocab import EOS_ID

SMALL = dict(
    src_vocab_size=40,
    tgt_vocab_size=40,
    d_model=16,
    n_heads=2,
    n_encoder_layers=1,
    n_decoder_layers=1,
    d_ff=32,
)


def test_inverse_sqrt_schedule_warms_up_then_decays() -> None:
    schedule = InverseSqrtSchedule(warmup_steps=100)
    assert schedule(50) == pytest.approx(0.5)
    assert schedule(100) == pytest.approx(1.0)
    assert schedule(400) == pytest.approx(0.5)
    assert max(schedule(s) for s in range(1, 1000)) == pytest.approx(1.0)


@pytest.mark.parametrize("schedule_class", [LinearDecaySchedule, CosineDecaySchedule])
def test_decaying_schedules_warm_up_then_reach_zero_at_the_last_step(schedule_class) -> None:
    schedule = schedule_class(warmup_steps=100, total_steps=500)
    assert schedule(50) == pytest.approx(0.5)
    assert schedule(100) == pytest.approx(1.0)
    assert schedule(300) == pytest.approx(0.5)  # half way through the decay: both at 0.5
    assert schedule(500) == 0.0 and schedule(600) == 0.0  # zero at the end, and after it
    after_warmup = [schedule(s) for s in range(100, 501)]
    assert all(a > b for a, b in zip(after_warmup, after_warmup[1:], strict=False))
    if schedule_class is CosineDecaySchedule:  # the cosine stays higher early, lower late
        assert schedule(200) > LinearDecaySchedule(100, 500)(200)
        assert schedule(400) < LinearDecaySchedule(100, 500)(400)


def scheduler_of(module: TranslationModule, planned: float):
    from types import SimpleNamespace

    module._trainer = SimpleNamespace(estimated_stepping_batches=planned)
    return module.configure_optimizers()["lr_scheduler"]["scheduler"].lr_lambdas[0]


@pytest.mark.parametrize("schedule_class", [LinearDecaySchedule, CosineDecaySchedule])
def test_every_update_of_the_plan_has_a_positive_rate_and_the_last_one_ends_at_zero(
    schedule_class,
) -> None:
    """LambdaLR's stepping: update k uses factor(k - 1), so all `total_steps` updates learn."""
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule_class(10, 50))
    rates = []
    for _ in range(50):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert min(rates) > 0 and max(rates) == pytest.approx(1.0)
    assert optimizer.param_groups[0]["lr"] == 0.0


def test_the_decay_ends_at_the_trainers_planned_steps_or_at_total_steps() -> None:
    linear = TranslationModule(transformer=SMALL, optim={"schedule": "linear", "warmup_steps": 100})
    assert type(scheduler_of(linear, 1180)) is LinearDecaySchedule
    assert scheduler_of(linear, 1180).total_steps == 1180
    fixed = TranslationModule(
        transformer=SMALL, optim={"schedule": "cosine", "warmup_steps": 100, "total_steps": 300}
    )
    assert type(scheduler_of(fixed, 1180)) is CosineDecaySchedule
    assert scheduler_of(fixed, 1180).total_steps == 300
    paper = TranslationModule(transformer=SMALL, optim={"schedule": "inverse_sqrt"})
    assert isinstance(scheduler_of(paper, float("inf")), InverseSqrtSchedule)
    default = TranslationModule(transformer=SMALL)  # the default recipe's: the budget's
    assert type(scheduler_of(default, 15000)) is BudgetSchedule
    with pytest.raises(ConfigError, match="trainer.max_epochs or trainer.max_steps"):
        scheduler_of(linear, float("inf"))  # max_epochs -1 and no max_steps: no end to decay to


def test_a_plan_shorter_than_the_warm_up_warms_up_over_a_tenth_of_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`--trainer.max_steps 20` with the default's 100-step warm-up: a short try, not refused."""
    for name, schedule_type in (("linear", LinearDecaySchedule), ("budget", BudgetSchedule)):
        module = TranslationModule(transformer=SMALL, optim={"schedule": name, "warmup_steps": 100})
        with caplog.at_level("WARNING", logger="minitx"):
            schedule = scheduler_of(module, 80)
        assert type(schedule) is schedule_type
        assert (schedule.warmup_steps, schedule.total_steps) == (8, 80)
        assert (
            "plans 80 optimizer steps, not more than model.optim.warmup_steps (100): "
            "warming up over 8 steps instead" in caplog.text
        )
        caplog.clear()
    tiny = TranslationModule(transformer=SMALL, optim={"schedule": "linear", "warmup_steps": 5})
    assert (scheduler_of(tiny, 3).warmup_steps, scheduler_of(tiny, 3).total_steps) == (1, 3)


def test_loss_matches_torch_label_smoothed_cross_entropy() -> None:
    torch.manual_seed(0)
    module = TranslationModule(transformer=SMALL, optim={"label_smoothing": 0.2}).eval()
    batch = {
        "src": torch.randint(4, 40, (3, 8)),
        "tgt_in": torch.randint(4, 40, (3, 6)),
        "tgt_out": torch.randint(4, 40, (3, 6)),
    }
    batch["tgt_out"][0, 3:] = 0  # padding is ignored
    loss, nll, n_tokens = module._losses(batch)
    logits = module.model(batch["src"], batch["tgt_in"]).flatten(0, 1)
    target = batch["tgt_out"].flatten()
    torch.testing.assert_close(
        loss, torch.nn.functional.cross_entropy(logits, target, ignore_index=0, label_smoothing=0.2)
    )
    torch.testing.assert_close(
        nll, torch.nn.functional.cross_entropy(logits, target, ignore_index=0)
    )
    assert int(n_tokens) == 15


def _batch(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {key: torch.randint(4, 40, (2, 8), generator=g) for key in ("src", "tgt_in", "tgt_out")}


@pytest.mark.parametrize("precision", ["32", "bf16"])
def test_training_steps_run_the_fused_kernel_in_fp32_and_the_written_out_one_under_cpu_bf16(
    precision: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sdpa_backend: auto`: PyTorch's fused kernel in fp32, minitx's written-out attention
    under bf16 autocast on a CPU; the model itself still calls the fused kernel unless weights
    are asked for (decoding, maps)."""
    calls = []
    original = minitx.attention.scaled_dot_product_attention
    monkeypatch.setattr(
        minitx.attention,
        "scaled_dot_product_attention",
        lambda *a, **k: calls.append(1) or original(*a, **k),
    )
    module = TranslationModule(transformer=SMALL)
    batch = _batch()
    with (
        torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"),
        module._sdpa_kernel(),
    ):
        module._losses(batch)[0].backward()
    assert len(calls) == (3 if precision == "bf16" else 0)  # encoder self, decoder self, cross
    calls.clear()
    module.model(batch["src"], batch["tgt_in"], need_weights=True)
    assert len(calls) == 3
    calls.clear()
    module.model(batch["src"], batch["tgt_in"])
    assert calls == []


def test_the_written_out_attention_trains_as_the_fused_kernel_under_bf16() -> None:
    """Under bf16 autocast the two backends differ by rounding only: the written-out products
    run in bf16, the math kernel's in fp32 (both softmax in fp32)."""
    losses, grads = {}, {}
    for backend in ("explicit", "math"):
        torch.manual_seed(0)
        module = TranslationModule(transformer={**SMALL, "dropout": 0.0}, sdpa_backend=backend)
        batch = _batch(1)
        batch["src"][1, 5:] = 0  # padded keys are masked either way
        with torch.autocast("cpu", dtype=torch.bfloat16), module._sdpa_kernel():
            loss = module._losses(batch)[0]
        loss.backward()
        losses[backend] = loss.detach()
        grads[backend] = torch.cat([p.grad.flatten() for p in module.parameters()])
    torch.testing.assert_close(losses["explicit"], losses["math"], rtol=2e-3, atol=0)
    cosine = F.cosine_similarity(grads["explicit"], grads["math"], dim=0)
    assert cosine > 0.999, cosine


def test_settings_are_accepted_as_dataclasses_or_dicts_and_saved_as_plain_data() -> None:
    a = TranslationModule(transformer=TransformerConfig(**SMALL), optim=OptimConfig(lr=0.5))
    b = TranslationModule(transformer=SMALL, optim={"lr": 0.5})
    assert a.model_config == b.model_config and a.optim == b.optim
    assert a.validation == ValidationConfig() and a.validation.decoding.strategy == "greedy"
    hparams = dict(b.hparams)
    assert hparams["transformer"]["d_model"] == 16 and hparams["optim"]["lr"] == 0.5
    assert hparams["validation"]["decoding"]["strategy"] == "greedy"

    def plain(value) -> bool:
        if isinstance(value, dict):
            return all(isinstance(k, str) and plain(v) for k, v in value.items())
        if isinstance(value, list | tuple):
            return all(plain(v) for v in value)
        return isinstance(value, str | int | float | bool | type(None))

    assert plain(hparams)  # so that checkpoints load with weights_only=True


@pytest.mark.parametrize(
    ("optim", "message"),
    [
        ({"lr": 0}, "lr must be > 0"),
        ({"schedule": "noam"}, "schedule: unknown learning-rate schedule 'noam'; choose one of"),
        ({"total_steps": -1}, "total_steps must be >= 0"),
        (
            {"schedule": "linear", "warmup_steps": 1000, "total_steps": 500},
            "total_steps=500 must be larger than",
        ),
        (
            {"schedule": "inverse_sqrt", "total_steps": 5000},
            "applies to the linear, cosine and budget schedules only",
        ),
    ],
)
def test_bad_optim_settings_are_clear_errors(optim: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TranslationModule(transformer=SMALL, optim=optim)


def test_the_attention_kernel_is_a_module_setting(capsys: pytest.CaptureFixture) -> None:
    """`sdpa_backend` (`model.sdpa_backend`) chooses the training kernel; it is saved beside,
    not inside, the optimisation settings."""
    assert TranslationModule(transformer=SMALL).sdpa_backend == "auto"
    module = TranslationModule(transformer=SMALL, sdpa_backend="math")
    assert module.sdpa_backend == "math" and module.hparams["sdpa_backend"] == "math"
    assert "sdpa_backend" not in module.hparams["optim"]
    assert capsys.readouterr().err == ""
    with pytest.raises(ConfigError, match="model.sdpa_backend='fast'; choose one of"):
        TranslationModule(transformer=SMALL, sdpa_backend="fast")


@pytest.mark.parametrize(
    ("validation", "message"),
    [({"log_examples": -1}, "log_examples must be >= 0"), ({"bleu_every_n_epochs": -1}, ">= 0")],
)
def test_bad_validation_settings_are_clear_errors(validation: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TranslationModule(transformer=SMALL, validation=validation)


def test_parameter_groups_are_chosen_by_module_type() -> None:
    """Decay: weights of linear layers (an additive score's too). No decay: embeddings
    (learned positions and the tied output matrix included), biases, norms, a bilinear W."""
    module = TranslationModule(
        transformer={**SMALL, "score": "additive", "positional": "learned"},
        optim={"weight_decay": 0.1},
    )
    model = module.model
    decay, no_decay = module.parameter_groups()
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    decayed = {id(p) for p in decay["params"]}
    names = {id(p): n for n, p in model.named_parameters()}
    assert len(decay["params"]) + len(no_decay["params"]) == len(names)  # each parameter once
    for name, p in model.named_parameters():
        should_decay = name.endswith(".weight") and (
            "_proj." in name or ".w1." in name or ".w2." in name or ".score." in name
        )
        assert (id(p) in decayed) == should_decay, name
    assert id(model.positional.embedding.weight) not in decayed
    assert id(model.output.weight) not in decayed  # tied to the embedding

    bilinear = TranslationModule(
        transformer={**SMALL, "score": "bilinear"}, optim={"weight_decay": 0.1}
    )
    w = bilinear.model.encoder_layers[0].self_attn.score.weight
    assert id(w) not in {id(p) for p in bilinear.parameter_groups()[0]["params"]}


@pytest.mark.parametrize(
    ("clip_val", "algorithm", "largest"),
    [(None, None, 3.0), (1.0, "norm", None), (0.5, "value", 0.5)],
    ids=["no-clipping", "norm", "value"],
)
def test_the_logged_gradient_norm_follows_the_trainers_clipping(
    clip_val: float | None, algorithm: str | None, largest: float | None
) -> None:
    """`configure_gradient_clipping` logs the norm of all gradients as one vector: before
    clipping by norm (what `clip_grad_norm_` returns), after clipping by value, and as it is
    without clipping."""
    sizes = {"src_vocab_size": 50, "tgt_vocab_size": 50, "d_model": 16, "n_heads": 2, "d_ff": 32}
    module = TranslationModule(sizes, OptimConfig())
    # clip_gradients goes through the Trainer's precision plugin
    module.trainer = lightning.Trainer(logger=False, enable_progress_bar=False)
    logged = {}
    module.log = lambda name, value, **kwargs: logged.update({name: value})
    optimizer = torch.optim.AdamW(module.parameters())
    params = list(module.parameters())
    for i, p in enumerate(params):
        p.grad = torch.full_like(p, 3.0 if i % 2 else -1.0)
    raw = [p.grad.clone() for p in params]
    expected = torch.cat([g.flatten() for g in raw]).clamp(-(largest or 3.0), largest or 3.0)
    module.configure_gradient_clipping(optimizer, clip_val, algorithm)
    norm = logged["train/grad_norm"]
    assert torch.allclose(norm, expected.norm()), (norm, expected.norm())
    grads = torch.cat([p.grad.flatten() for p in params])
    if algorithm == "norm":  # scaled down to the limit as a whole
        assert torch.allclose(grads.norm(), torch.tensor(clip_val), rtol=1e-4)
    else:
        assert torch.equal(grads, expected)


def test_non_finite_loss_and_weights_are_caught() -> None:
    from minitx.training import DivergenceError

    module = TranslationModule(transformer=SMALL)
    batch = {
        "src": torch.randint(4, 40, (2, 8)),
        "tgt_in": torch.randint(4, 40, (2, 8)),
        "tgt_out": torch.randint(4, 40, (2, 8)),
    }
    module.on_save_checkpoint({})  # finite weights: fine
    with torch.no_grad():
        module.model.encoder_layers[0].feed_forward.w1.weight[0, 0] = float("inf")
    with pytest.raises(DivergenceError, match="refusing to write a checkpoint"):
        module.on_save_checkpoint({})
    with pytest.raises(DivergenceError, match="training diverged at step 0: the loss is nan"):
        module.training_step(batch, 0)


@pytest.mark.parametrize("fused", [True, False])
def test_a_resumed_optimizer_uses_this_runs_kernel(fused: bool) -> None:
    """torch's load_state_dict takes `fused` from the saved param groups: the module resets it
    to this run's `optim.fused`, and the restored optimizer steps with it."""
    module = TranslationModule(transformer=SMALL, optim={"fused": not fused})
    saved = torch.optim.AdamW(module.parameter_groups(), fused=not fused or None)
    checkpoint = {"optimizer_states": [saved.state_dict()]}
    resumed = TranslationModule(transformer=SMALL, optim={"fused": fused})
    resumed.on_load_checkpoint(checkpoint)
    optimizer = torch.optim.AdamW(resumed.parameter_groups(), fused=fused or None)
    optimizer.load_state_dict(checkpoint["optimizer_states"][0])
    assert all(group["fused"] == (fused or None) for group in optimizer.param_groups)


def _trained_state(module: TranslationModule, fused: bool) -> dict:
    """What Lightning saves of `module`'s optimizer and schedule after one update."""
    optimizer = torch.optim.AdamW(module.parameter_groups(), fused=fused or None)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    for p in module.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()  # the moments exist now
    return {
        "state_dict": module.state_dict(),
        "loops": {"fit_loop": {"epoch_progress": {"current": {"processed": 0}}}},
        "optimizer_states": [optimizer.state_dict()],
        "lr_schedulers": [scheduler.state_dict()],
    }


@pytest.mark.parametrize("fused", [True, False])
def test_a_resume_refuses_adamw_moments_of_another_shape(fused: bool) -> None:
    """The fused AdamW kernel trusts its moments to have their parameter's shape: restored from
    a crafted checkpoint with others, the first update crashed the process (SIGSEGV). A 0-d
    moment is refused too: only `step` is a scalar."""
    module = TranslationModule(transformer=SMALL)
    checkpoint = _trained_state(module, fused)
    module.check_training_state(checkpoint)  # as saved: whole
    moments = checkpoint["optimizer_states"][0]["state"]
    first = checkpoint["optimizer_states"][0]["param_groups"][0]["params"][0]
    for bad, said in [(torch.zeros(3), r"\(3,\)"), (torch.tensor(0.0), r"\(\)")]:
        moments[first]["exp_avg"] = bad
        with pytest.raises(CheckpointError, match=rf"'exp_avg' of parameter 0 has shape {said}"):
            module.check_training_state(checkpoint)
    checkpoint = _trained_state(module, fused)
    checkpoint["lr_schedulers"] = []  # Lightning restored nothing: the warm-up began again
    with pytest.raises(CheckpointError, match="one learning-rate schedule"):
        module.check_training_state(checkpoint)


def test_loading_weights_outside_a_fit_does_not_ask_for_a_training_state() -> None:
    """`on_load_checkpoint` also serves `load_from_checkpoint` and `trainer.test(ckpt_path=)`,
    where a weights-only checkpoint (minitx-average's) is fine: the check is for resumes."""
    module = TranslationModule(transformer=SMALL)
    module.on_load_checkpoint({"state_dict": module.state_dict()})  # no trainer: no refusal
    with pytest.raises(CheckpointError, match="does not hold the state of one optimizer"):
        module.check_training_state(
            {"state_dict": module.state_dict(), "loops": {"fit_loop": {}}, "lr_schedulers": [{}]}
        )


def test_pack_rows_reaches_the_model_and_the_checkpoint_hyperparameters() -> None:
    """`model.pack_rows` sets `Transformer.pack_rows` (the default: PACK_ROWS), travels in the
    hyperparameters, and a negative value is refused."""
    assert TranslationModule(transformer=SMALL).model.pack_rows == PACK_ROWS == 64
    module = TranslationModule(transformer=SMALL, pack_rows=0)
    assert module.model.pack_rows == 0 and module.hparams["pack_rows"] == 0
    with pytest.raises(ConfigError, match="model.pack_rows must be >= 0"):
        TranslationModule(transformer=SMALL, pack_rows=-8)


def _gather_val_pairs(rank: int, port: int, out: dict) -> None:
    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2
    )
    share = SimpleNamespace(
        val_pairs=[(f"hyp {rank} {i}", f"ref {rank} {i}") for i in range(rank + 1)]
    )
    out[rank] = TranslationModule._all_val_pairs(share)
    torch.distributed.destroy_process_group()


def test_validation_scores_the_translations_of_every_ddp_process() -> None:
    # Each process translates its share of the validation set; BLEU and chrF are corpus
    # scores, so every process must score all the shares, not its own.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = torch.multiprocessing.Manager().dict()
    # Forked from the tests' preloaded server: a fresh interpreter each would import torch.
    fork_server()
    torch.multiprocessing.start_processes(
        _gather_val_pairs, args=(port, out), nprocs=2, start_method="forkserver"
    )
    everything = (["hyp 0 0", "hyp 1 0", "hyp 1 1"], ["ref 0 0", "ref 1 0", "ref 1 1"])
    assert out[0] == out[1] == everything


@pytest.mark.parametrize("every", [0, 2])
def test_the_token_rate_is_logged_as_often_as_lightning_logs_steps(every: int) -> None:
    """`train/tokens_per_sec_step` every `trainer.log_every_n_steps` batches; 0, which Lightning
    reads as "no per-step logging", logs none (it was a ZeroDivisionError)."""
    from minitx.training.callbacks import TokenThroughput
    from minitx.vocab import PAD_ID

    callback, logged = TokenThroughput(), []
    trainer = SimpleNamespace(log_every_n_steps=every)
    module = SimpleNamespace(log=lambda name, value, **kwargs: logged.append(name))
    batch = {"tgt_out": torch.tensor([[5, 6, PAD_ID]])}
    callback.on_train_epoch_start(trainer, module)
    for index in range(4):
        callback.on_train_batch_end(trainer, module, None, batch, index)
    assert logged == ["train/tokens_per_sec_step"] * (4 // every if every else 0)


class FakeClock:
    """`time.perf_counter` of `minitx.training.callbacks`, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def throughput_trainer(logged: dict[str, float]) -> SimpleNamespace:
    """The parts of a Trainer `TokenThroughput` reads, its logged metrics into `logged`."""
    from lightning.pytorch.trainer.states import TrainerFn

    return SimpleNamespace(
        log_every_n_steps=0,
        global_step=3,
        current_epoch=0,
        sanity_checking=False,
        state=SimpleNamespace(fn=TrainerFn.FITTING),
        strategy=SimpleNamespace(reduce=lambda tensor, reduce_op: tensor),
        loggers=[SimpleNamespace(log_metrics=lambda metrics, step: logged.update(metrics))],
    )


def test_an_epochs_seconds_end_at_its_last_update_less_its_validations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The attention maps drawn at an epoch's end were counted as training: the tiny config's
    tokens/s fell from about 4,300 to 1,300 (and the experiments' ms/step rose with it)."""
    from minitx.training import callbacks
    from minitx.vocab import PAD_ID

    clock, logged = FakeClock(), {}
    monkeypatch.setattr(callbacks.time, "perf_counter", clock)
    callback, trainer = callbacks.TokenThroughput(), throughput_trainer(logged)
    module = SimpleNamespace(device="cpu", log=lambda *args, **kwargs: None)
    batch = {"tgt_out": torch.tensor([[5, 6, PAD_ID]])}  # 2 target tokens
    callback.on_train_epoch_start(trainer, module)
    for index in range(3):
        clock.now += 1.0  # an update
        callback.on_train_batch_end(trainer, module, None, batch, index)
        if index == 1:  # a validation inside the epoch: 5 s
            callback.on_validation_start(trainer, module)
            clock.now += 5.0
            callback.on_validation_end(trainer, module)
    callback.on_validation_start(trainer, module)  # the epoch-end validation, then the maps
    clock.now += 7.0
    callback.on_validation_end(trainer, module)
    clock.now += 11.0
    callback.on_train_epoch_end(trainer, module)
    assert logged == {"train/epoch_seconds": 3.0, "train/tokens_per_sec": 2.0}


def test_the_fit_clock_goes_on_from_the_checkpoints_at_a_resume(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`time/fit_seconds` started again from 0 at every resume (curves over time went back)."""
    from minitx.training import callbacks

    clock, logged = FakeClock(), []
    monkeypatch.setattr(callbacks.time, "perf_counter", clock)
    trainer = throughput_trainer({})
    module = SimpleNamespace(log=lambda name, value, **kwargs: logged.append((name, value)))
    first = callbacks.TokenThroughput()
    first.on_fit_start(trainer, module)
    clock.now += 40.0
    saved = first.state_dict()  # in the checkpoint
    assert saved == {"fit_seconds": 40.0}
    resumed = callbacks.TokenThroughput()
    resumed.load_state_dict(saved)  # Lightning restores it before on_fit_start
    clock.now += 100.0  # the time between the two processes is not the fit's
    resumed.on_fit_start(trainer, module)
    clock.now += 2.0
    resumed.on_validation_epoch_end(trainer, module)
    assert logged == [("time/fit_seconds", 42.0)]


def test_a_module_loaded_from_a_checkpoint_has_its_tokenizer_and_keeps_it(
    tiny_checkpoint: Path,
) -> None:
    """Was: `load_from_checkpoint` left `tokenizer` None, though the checkpoint carries it:
    decoding failed on None.decode, validation left BLEU out, and a fit on a data module with
    another tokenizer went on with ids that meant other pieces."""
    module = TranslationModule.load_from_checkpoint(tiny_checkpoint, map_location="cpu")
    saved = read_checkpoint(tiny_checkpoint)[CHECKPOINT_KEY]["tokenizer"]
    assert module.tokenizer is not None and module.tokenizer.model_bytes == saved
    ids = torch.tensor([module.tokenizer.encode(["ein hund ."])[0] + [EOS_ID]])
    assert module.training  # as Lightning loads it: decoded in eval mode, then restored
    assert module.translate_ids(ids) == module.translate_ids(ids)  # no dropout in decoding
    assert module.training and module.model.training
    other = SimpleNamespace(model_bytes=b"another model", vocab_size=module.tokenizer.vocab_size)
    module._trainer = SimpleNamespace(datamodule=SimpleNamespace(tokenizer=other))
    with pytest.raises(ConfigError, match="differs from the data module's"):
        module.setup("fit")


def test_a_fit_without_a_tokenizer_is_refused() -> None:
    """Was: a fit with bare dataloaders trained without a word about BLEU, the attention maps
    and the checkpoints' tokenizer, all left out; the checkpoints then failed to load."""
    module = TranslationModule(transformer=SMALL)
    with pytest.raises(ConfigError, match="has no tokenizer: fit it with datamodule="):
        module.setup("fit")
    module.setup("validate")  # a loss needs no tokenizer


@pytest.mark.parametrize("group", ["transformer", "optim", "validation"])
def test_a_misspelt_key_of_a_settings_group_is_named(group: str) -> None:
    """Was: TypeError "__init__() got an unexpected keyword argument 'lrr'"."""
    with pytest.raises(ConfigError, match=r"unknown keys \['lrr'\]; known keys are \["):
        TranslationModule(**{group: {"lrr": 1}})


def test_a_fit_into_japanese_without_mecab_is_refused_before_its_first_update(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Validation BLEU of Japanese needs sacreBLEU's MeCab tokenizer: without it the fit is
    refused at its setup, in one line, not at its first validation."""
    if importlib.util.find_spec("MeCab") is not None:
        pytest.skip("MeCab is installed: nothing lacks")
    module = TranslationModule(transformer=SMALL)
    monkeypatch.setattr(module, "_languages", lambda: ("en", "ja"))
    with pytest.raises(ConfigError, match=r"pip install 'sacrebleu\[ja\]'"):
        module.setup("fit")
