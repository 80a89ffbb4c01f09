"""Shared test fixtures: the toy corpus, the (optional) real Multi30k files, and one tiny
training run per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers import TOY_CORPUS_DIR, TinyRun, train_tiny

from minitx.cli.common import signal_handlers_kept

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `pytest -n 2`: one thread per worker process, so that two workers share the two cores
    # instead of four threads spinning for them (torch's default is one per core).
    torch.set_num_threads(1)

TESTS_DIR = Path(__file__).resolve().parent
DEFAULT_MULTI30K_DIR = TESTS_DIR.parent.parent / "shared" / "data" / "multi30k"
"""Where CI keeps the offline Multi30k copy: ``../shared/data/multi30k`` beside the checkout."""

MULTI30K_FILES = [
    f"{stem}.{lang}" for stem in ("train", "val", "test_2016_flickr") for lang in ("de", "en")
]


@pytest.fixture(autouse=True)
def signal_handlers_put_back():
    """Each test starts with the worker's Ctrl-C and SIGTERM handlers: a Lightning fit that a
    test interrupts and drives itself (not through minitx-train) leaves its own in place, and a
    command started later from this worker (a subprocess, the preloaded fork server) would
    inherit an ignored Ctrl-C."""
    with signal_handlers_kept():
        yield


@pytest.fixture
def toy_corpus_dir() -> Path:
    """A tiny hand-written de-en corpus (60/10/10 pairs) in the Multi30k raw layout."""
    return TOY_CORPUS_DIR


@pytest.fixture
def multi30k_dir() -> Path:
    """The raw Multi30k directory: ``$MINITX_DATA_DIR`` if set, else ``../shared/data/multi30k``.

    Skips the test, saying where it looked, when the de/en files are not there.
    """
    configured = os.environ.get("MINITX_DATA_DIR", "").strip()
    directory = Path(configured) if configured else DEFAULT_MULTI30K_DIR
    origin = "MINITX_DATA_DIR" if configured else "the default location"
    missing = [
        name
        for name in MULTI30K_FILES
        if not (directory / name).is_file() and not (directory / f"{name}.gz").is_file()
    ]
    if missing:
        pytest.skip(
            f"Multi30k raw files not found in {directory} ({origin}); missing {missing}. "
            "Set MINITX_DATA_DIR to a directory of {split}.{lang}[.gz] files "
            "(multi30k/dataset: data/task1/raw)."
        )
    return directory


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> TinyRun:
    """The tiny config trained on the toy corpus: once per test session (a few seconds)."""
    return train_tiny(tmp_path_factory.mktemp("tiny_run"))


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_run: TinyRun) -> Path:
    """Path of the tiny run's `last.ckpt`."""
    return tiny_run.checkpoint


@pytest.fixture(scope="session")
def chrome(tmp_path_factory: pytest.TempPathFactory):
    """One headless Chromium (selenium) for the session's browser tests; skips, with the
    install command, when chromium, chromedriver or selenium are missing."""
    from browser import browser_missing, start_chrome

    reason = browser_missing()
    if reason:
        pytest.skip(reason)
    driver = start_chrome(str(tmp_path_factory.mktemp("chromium-profile")))
    try:
        yield driver
    finally:
        driver.quit()
